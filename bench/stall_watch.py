"""Catches the node standing still during a benchmark, and what every thread was doing at that moment.

`python -m bench.stall_watch --address A --pid NODE [--pid BENCH] --out FILE`: every `--interval-ms` a
FindCoordinator call without topics (the gate and the node's loop, nothing else), and each second a 4 KiB
write + fsync beside the node's data, the machine's CPU and I/O pressure and load, the disks' throughput and
busy share, and each `--pid`'s process tree's bytes read and written (its children's too: the job's JVM and
Python workers under the benchmark's process), so a saturated disk says whose I/O filled it. A call not answered within
`--stall-ms` is a stall: while it lasts, `py-spy dump --nonblocking` of each `--pid` (the node; the
benchmark's own process) is taken once, so the file says whose stacks, not a guess, held it. One JSON
object per line: `tick` each second, `stall` when a stalled call comes back (at most `--dumps-max` with
stacks). Stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, TextIO

import grpc

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

PROBE_TIMEOUT_S = 120.0
DUMP_TIMEOUT_S = 20.0
FSYNC_PROBE_BYTES = 4096
FSYNC_FILE_MAX = 1 << 24  # the probe file starts over past this


def _pressure(name: str) -> dict[str, float]:
    """avg10 of `some` and `full` from /proc/pressure/<name> (absent on kernels without PSI)."""
    try:
        lines = Path(f"/proc/pressure/{name}").read_text().splitlines()
    except OSError:
        return {}
    return {line.split()[0]: float(line.split()[1].split("=")[1]) for line in lines}


def _py_spy() -> str:
    """The environment's py-spy (a dependency of the project's bench), else the one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy") or "py-spy"


def _dump(pid: int) -> str:
    try:
        done = subprocess.run([_py_spy(), "dump", "--nonblocking", "--pid", str(pid)],
                              capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"py-spy dump failed: {error}"
    return done.stdout + done.stderr


def _fsync_ms(path: Path) -> float:
    started = time.monotonic()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(descriptor, b"x" * FSYNC_PROBE_BYTES)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    if path.stat().st_size > FSYNC_FILE_MAX:
        path.unlink()
    return (time.monotonic() - started) * 1000


class _Writer:
    def __init__(self, out: TextIO) -> None:
        self._out, self._lock = out, threading.Lock()

    def line(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(entry) + "\n")
            self._out.flush()


def _tree(pid: int, apart: frozenset[int]) -> list[int]:
    """`pid` and its descendants now (each thread's children, as /proc lists them), without the trees of `apart`."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        if current in apart and current != pid:
            continue
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(child) for child in (task / "children").read_text().split())
    return found


def tree_io_bytes(pid: int, apart: frozenset[int] = frozenset()) -> tuple[int, int]:
    """Bytes the process tree of `pid` (without the trees of `apart`: the node is the benchmark's child) read from
    and wrote to storage so far (/proc/PID/io's read_bytes and write_bytes: a buffered write counts when the page
    is dirtied, not when the kernel writes it back); a child that exited takes its share with it."""
    read = written = 0
    for member in _tree(pid, apart):
        with contextlib.suppress(OSError, ValueError):
            fields = dict(line.split(": ") for line in Path(f"/proc/{member}/io").read_text().splitlines())
            read += int(fields["read_bytes"])
            written += int(fields["write_bytes"])
    return read, written


def _disks() -> tuple[int, int, int]:
    """Sectors read, sectors written and milliseconds busy, summed over the whole disks (not partitions, loops)."""
    read = written = busy = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        name = fields[2]
        if name.startswith(("loop", "ram", "dm-")) or not Path(f"/sys/block/{name}").exists():
            continue
        read, written, busy = read + int(fields[5]), written + int(fields[9]), busy + int(fields[12])
    return read, written, busy


MB = 1 << 20


def _ticks(writer: _Writer, probe_file: Path, stop: threading.Event, worst: list[float], pids: list[int]) -> None:
    apart = frozenset(pids)
    disks, trees, last = _disks(), {pid: tree_io_bytes(pid, apart) for pid in pids}, time.monotonic()
    while not stop.wait(1.0):
        now_disks, now_trees, now = _disks(), {pid: tree_io_bytes(pid, apart) for pid in pids}, time.monotonic()
        seconds = max(now - last, 1e-3)
        disk = {"read_mb_s": round((now_disks[0] - disks[0]) * 512 / MB / seconds, 1),
                "write_mb_s": round((now_disks[1] - disks[1]) * 512 / MB / seconds, 1),
                "busy_pct": round((now_disks[2] - disks[2]) / 10 / seconds, 1)}  # fmt: skip
        trees_mb_s = {str(pid): [round(max(0, now_trees[pid][i] - trees[pid][i]) / MB / seconds, 1) for i in (0, 1)]
                      for pid in pids}  # fmt: skip
        disks, trees, last = now_disks, now_trees, now
        writer.line({"kind": "tick", "t": round(time.time(), 3), "fsync_ms": round(_fsync_ms(probe_file), 2),
                     "probe_ms_max": round(worst[0], 1), "cpu": _pressure("cpu"), "io": _pressure("io"),
                     "load": os.getloadavg()[0], "disk": disk, "tree_read_write_mb_s": trees_mb_s})  # fmt: skip
        worst[0] = 0.0


def watch(address: str, pids: list[int], out: Path, interval_s: float, stall_s: float, dumps_max: int) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worst = [0.0]
    dumps = 0
    with out.open("a") as stream, grpc.insecure_channel(address) as channel, futures.ThreadPoolExecutor(1) as pool:
        writer = _Writer(stream)
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        ticker = threading.Thread(target=_ticks, args=(writer, out.with_suffix(".fsync-probe"), stop, worst, pids),
                                  daemon=True)  # fmt: skip
        ticker.start()
        while not stop.is_set():
            started, wall = time.monotonic(), time.time()
            call = pool.submit(stub.FindCoordinator, pb.FindCoordinatorRequest(), timeout=PROBE_TIMEOUT_S)
            stacks: dict[str, str] = {}
            try:
                call.result(timeout=stall_s)
            except futures.TimeoutError:
                if dumps < dumps_max:
                    dumps += 1
                    stacks = {str(pid): _dump(pid) for pid in pids}
                with contextlib.suppress(grpc.RpcError):
                    call.result()
            except grpc.RpcError:
                pass
            took = time.monotonic() - started
            worst[0] = max(worst[0], took * 1000)
            if took >= stall_s:
                writer.line({"kind": "stall", "t": round(wall, 3), "ms": round(took * 1000, 1), "stacks": stacks})
            stop.wait(max(0.0, interval_s - took))
        ticker.join(2.0)


def summarize(path: Path, since: float, until: float) -> dict[str, Any]:
    """Stalls from `since` to `until` (wall time): their count, the longest, each one's start (s after `since`)
    and length, and the worst fsync probe."""
    stalls = []
    fsync_worst = 0.0
    busy_seconds = 0  # ticks with the disks at least 90 % busy
    written_mb: dict[str, float] = {}  # by --pid: what its process tree wrote (MB, summed per-second rates)
    if path.exists():
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if not since <= entry["t"] < until:
                continue
            if entry["kind"] == "stall":
                stalls.append([round(entry["t"] - since, 2), entry["ms"]])
                continue
            fsync_worst = max(fsync_worst, entry["fsync_ms"])
            busy_seconds += entry.get("disk", {}).get("busy_pct", 0.0) >= 90.0
            for pid, (_, written) in entry.get("tree_read_write_mb_s", {}).items():
                written_mb[pid] = round(written_mb.get(pid, 0.0) + written, 1)
    return {"stalls": len(stalls), "longest_ms": max((ms for _, ms in stalls), default=0.0),
            "list": stalls[:50], "fsync_worst_ms": fsync_worst, "disk_busy_90_s": busy_seconds,
            "written_mb_by_pid": written_mb, "file": str(path)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stall_watch", description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--pid", type=int, action="append", default=[], help="a process to dump on a stall")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--stall-ms", type=float, default=500.0)
    parser.add_argument("--dumps-max", type=int, default=20)
    arguments = parser.parse_args()
    watch(arguments.address, arguments.pid, arguments.out, arguments.interval_ms / 1000,
          arguments.stall_ms / 1000, arguments.dumps_max)  # fmt: skip


if __name__ == "__main__":
    main()
