"""FindBatches' CPU per call, counted in instructions (callgrind), which a loaded machine does not change:

    python -m bench.profile_find_batches build DIR [--partitions 100] [--files 1000]
    python -m bench.profile_find_batches count DIR [--calls 200] [--warmup 40] [--kinds tail,lag] [--grpc]
    python -m bench.profile_find_batches gc DIR [--calls 3000] [--kind tail]

`build` writes one coordinator's state (DIR/state.sqlite): a topic of `partitions` partitions, `files` files of one
1000-byte batch of 10 records per partition, each checked, replayed and applied as the pipeline does. `count` runs
the process below under `valgrind --tool=callgrind` twice, with `warmup` calls and with `warmup + calls`, and prints
the difference per call: the same work as the benchmark's find-batches consumers, without the load around it.

- `tail`: 10 partitions read at their high watermark (nothing to return), as three consumers in four do.
- `one`: 10 partitions read one batch below it.
- `lag`: 10 partitions read 2,000 batches behind, 64 KiB per partition (66 batches each), as the fourth does.

Without `--grpc` the calls run `coordinator.reads.find_batches.find_batches` over a reader process's view of the
state file (`ReaderCoordinators`), the code its handler calls. With `--grpc` the reader process's own server
(`serve_reads`, the gate and admission included) runs in the counted process and a client in another process makes
the calls over a loopback socket: the whole path, serialization and gRPC included, the client's work not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from protos import coordinator_pb2 as pb

TOPIC = bytes(range(1, 17))
RECORDS = 10  # per batch
PARTITIONS_PER_CALL = 10
LAG_BATCHES = 2000
LAG_PARTITION_BYTES = 64 * 1024
TAIL_PARTITION_BYTES = 1024 * 1024
FETCH_MAX_BYTES = 1024 * 1024
KINDS = ("tail", "one", "lag")
PROFILE_SHOWN = 60  # functions listed by --cprofile


def build(directory: Path, partitions: int, files: int) -> None:
    from bench.transactions import Core, _batch

    directory.mkdir(parents=True, exist_ok=True)
    core = Core(directory, partitions)
    sequences = [0] * partitions
    for number in range(files):
        batches = [_batch(p, 1000 + p, sequences[p], False) for p in range(partitions)]
        codes = core.commit(batches, f"wal/{number}", number)
        assert not any(codes), codes
        sequences = [s + RECORDS for s in sequences]
    core.store.close()


def requests(kind: str, partitions: int, high_watermark: int, count: int) -> list[pb.FindBatchesRequest]:
    """`count` requests of `kind`, each on the next group of 10 partitions (the consumers' own, in turn)."""
    made = []
    for number in range(count):
        first = number * PARTITIONS_PER_CALL % partitions
        group = [(first + i) % partitions for i in range(PARTITIONS_PER_CALL)]
        if kind == "tail":
            offset, most = high_watermark, TAIL_PARTITION_BYTES
        elif kind == "one":
            offset, most = high_watermark - RECORDS, TAIL_PARTITION_BYTES
        else:
            offset, most = high_watermark - LAG_BATCHES * RECORDS, LAG_PARTITION_BYTES
        made.append(
            pb.FindBatchesRequest(
                fetch_max_bytes=FETCH_MAX_BYTES,
                topics=[pb.FindBatchesRequest.Topic(topic_id=TOPIC, partitions=[
                    pb.FindBatchesRequest.Partition(partition=p, offset=offset, max_partition_fetch_bytes=most)
                    for p in group])],
            )
        )  # fmt: skip
    return made


def _shape(directory: Path) -> tuple[int, int]:
    """(partitions, high watermark) of the built state (every partition holds the same batches)."""
    import apsw

    db = apsw.Connection(str(directory / "state.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = db.execute("SELECT count(*), max(high_watermark) FROM partitions").fetchone()
    finally:
        db.close()
    assert row is not None
    return int(row[0]), int(row[1])


def _board() -> tuple[Any, Any]:
    from coordinator.reads.readers.board import Status, StatusBoard
    from coordinator.reads.readers.counters import CallCounts

    board = StatusBoard.create(1)
    board.publish(0, Status(0, 1))
    return board, CallCounts.create(1)


def write_requests(path: Path, made: list[pb.FindBatchesRequest]) -> None:
    """Serialized, one per line in hex: the counted process parses them as the gate parses a call's bytes."""
    path.write_text("".join(request.SerializeToString().hex() + "\n" for request in made))


def churn_writer(directory: Path) -> Any:
    """A connection that commits a row between calls: as the node's commits do, it changes the WAL, so SQLite
    drops the reader's page cache and the next call reads (and checks) its pages again."""
    import apsw

    from snapshot import page_checksums

    writer = page_checksums.connect(directory / "state.sqlite", apsw.SQLITE_OPEN_READWRITE)
    writer.execute("CREATE TABLE IF NOT EXISTS profile_churn (n INTEGER)")
    return writer


def run_core(directory: Path, requests_file: Path, churn: bool, reads: bool = True) -> None:
    """The file's FindBatches through the reader's view, each parsed and answered as its handler does; with
    `churn`, a write before each; without `reads`, only the writes (the baseline subtracted)."""
    from coordinator.config.settings import Settings
    from coordinator.reads.find_batches import find_batches
    from coordinator.reads.readers.state_files import reader_coordinators

    raws = [bytes.fromhex(line) for line in requests_file.read_text().split()]
    board, _ = _board()
    writer = churn_writer(directory) if churn else None
    with reader_coordinators(Settings(), [directory], board, lambda *_: None) as view:
        for number, raw in enumerate(raws):
            if writer is not None:
                writer.execute("INSERT INTO profile_churn VALUES (?)", (number,))
            if reads:
                find_batches(view, pb.FindBatchesRequest.FromString(raw))


def run_server(directory: Path, frozen: bool = True, gc_report: bool = False) -> None:
    """The reader process's server in this process: prints its port, serves until stdin closes. `frozen`: the
    loaded state frozen for the collector, as the reader's entry point does (`run_reader`); `gc_report`: the
    collections made while serving, and their time, printed to stderr at the end."""
    from coordinator.base.child_processes import freeze_loaded_state
    from coordinator.config.settings import Settings
    from coordinator.reads.readers.worker import ReaderPlan, serve_reads

    board, counts = _board()
    node_end, reader_end = multiprocessing.Pipe()
    plan = ReaderPlan(0, Settings(), "127.0.0.1", 0, (directory,))

    def relay() -> None:
        print(node_end.recv()[1], flush=True)  # ("listening", port)
        sys.stdin.read()
        node_end.send(("stop",))

    threading.Thread(target=relay, daemon=True).start()
    import uvloop

    collections = _GcCollections() if gc_report else None
    if frozen:
        freeze_loaded_state()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_reads(plan, board, counts, reader_end))
    if collections is not None:
        print(f"gc: {collections}", file=sys.stderr, flush=True)


class _GcCollections:
    """The collector's collections by generation, and their milliseconds, from its creation on."""

    def __init__(self) -> None:
        import gc
        import time

        self._clock = time.perf_counter
        self._counts = [0, 0, 0]
        self._seconds = [0.0, 0.0, 0.0]
        self._started = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        generation = info["generation"]
        self._counts[generation] += 1
        self._seconds[generation] += self._clock() - self._started

    def __str__(self) -> str:
        names = ("young", "middle", "full")
        parts = [f"{n} {c} ({s * 1000:.1f} ms)" for n, c, s in zip(names, self._counts, self._seconds, strict=True)]
        return ", ".join(parts) + f"; {sum(self._seconds) * 1000:.1f} ms in all"


def gc_time(directory: Path, kind: str, calls: int) -> None:
    """The reader server's collections over `calls` calls of `kind` with churn, its state unfrozen then frozen
    (`run_reader`'s `freeze_loaded_state`): wall-clock milliseconds, not instructions (a callgrind run of a few
    hundred calls rarely reaches a full collection, whose pause this shows)."""
    partitions, high_watermark = _shape(directory)
    made = requests(kind, partitions, high_watermark, calls)
    with tempfile.TemporaryDirectory(prefix="diskless-profile-gc-") as scratch:
        for frozen in (False, True):
            fresh = Path(scratch) / "state"
            shutil.rmtree(fresh, ignore_errors=True)
            shutil.copytree(directory, fresh)
            command = [sys.executable, "-m", "bench.profile_find_batches", "serve", str(fresh), "--gc-report"]
            command += [] if frozen else ["--unfrozen"]
            server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert server.stdin is not None and server.stdout is not None and server.stderr is not None
            port = int(server.stdout.readline())
            asyncio.run(_client_calls(port, made, fresh))
            server.stdin.close()
            report = [line for line in server.stderr.read().decode().splitlines() if line.startswith("gc: ")]
            server.wait(timeout=600)
            print(f"{kind}, {calls} calls, {'frozen' if frozen else 'unfrozen'}: {report[-1][4:]}", flush=True)


async def _client_calls(port: int, made: list[pb.FindBatchesRequest], churn: Path | None) -> None:
    import grpc

    from protos import coordinator_pb2_grpc as pb_grpc

    writer = churn_writer(churn) if churn is not None else None  # in this process: not counted
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        for number, request in enumerate(made):
            if writer is not None:
                writer.execute("INSERT INTO profile_churn VALUES (?)", (number,))
            answer = await stub.FindBatches(request, timeout=600)
            assert all(p.error_code == pb.NONE for t in answer.topics for p in t.partitions), answer


def _callgrind(
    arguments: list[str],
    out: Path,
    grpc_calls: list[pb.FindBatchesRequest] | None,
    churn: Path | None = None,
    cprofile: bool = False,
) -> int:
    """Runs this module with `arguments` under callgrind (arguments[1], the state's directory, copied afresh: every
    run starts from the same file); its total instructions (Ir). With `cprofile`, under cProfile instead (its
    stats in `out`; 0 returned)."""
    fresh = out.with_suffix(".state")
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(arguments[1], fresh)
    arguments = [arguments[0], str(fresh), *arguments[2:]]
    churn = fresh if churn is not None else None
    wrapper = (
        [sys.executable, "-m", "cProfile", "-o", str(out)]
        if cprofile
        else ["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={out}", sys.executable]
    )
    command = [*wrapper, "-m", "bench.profile_find_batches", *arguments]
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    if grpc_calls is None:
        subprocess.run(command, check=True, env=environment, stderr=subprocess.DEVNULL)
    else:
        server = subprocess.Popen(
            command, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert server.stdin is not None and server.stdout is not None
        port = int(server.stdout.readline())
        asyncio.run(_client_calls(port, grpc_calls, churn))
        server.stdin.close()
        server.wait(timeout=600)
    shutil.rmtree(fresh)
    if cprofile:
        return 0
    found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    assert found is not None, f"no total in {out}"
    return int(found.group(1))


def count(
    directory: Path, kinds: list[str], calls: int, warmup: int, grpc_path: bool, churn: bool, keep: Path | None
) -> dict[str, float]:
    """Instructions per call of each kind: the difference between `warmup` and `warmup + calls` calls, less (with
    `churn`, without gRPC) the same difference for the writes alone. `keep`: where the callgrind files stay."""
    partitions, high_watermark = _shape(directory)
    per_call = {}
    with tempfile.TemporaryDirectory(prefix="diskless-profile-find-") as scratch:
        where = keep or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        for kind in kinds:
            totals: dict[str, list[int]] = {"calls": [], "writes": []}
            for made in (warmup, warmup + calls):
                out = where / f"{kind}-{made}.out"
                made_requests = requests(kind, partitions, high_watermark, made)
                if grpc_path:
                    totals["calls"].append(
                        _callgrind(["serve", str(directory)], out, made_requests, directory if churn else None)
                    )
                    continue
                requests_file = Path(scratch) / f"{kind}-{made}.requests"
                write_requests(requests_file, made_requests)
                churned = ["--churn"] if churn else []
                totals["calls"].append(_callgrind(["run", str(directory), str(requests_file), *churned], out, None))
                if churn:
                    out = where / f"{kind}-{made}-writes.out"
                    arguments = ["run", str(directory), str(requests_file), *churned, "--writes-only"]
                    totals["writes"].append(_callgrind(arguments, out, None))
            per_call[kind] = (totals["calls"][1] - totals["calls"][0]) / calls
            if totals["writes"]:
                per_call[kind] -= (totals["writes"][1] - totals["writes"][0]) / calls
            print(f"{kind}: {per_call[kind] / 1000:.1f}k instructions per call {totals}", flush=True)
    return per_call


def profile(directory: Path, kind: str, calls: int, warmup: int, grpc_path: bool, churn: bool) -> None:
    """The counted process's Python functions under cProfile over `warmup + calls` calls (the warm-up included):
    by own time and by calls, the ranking callgrind's totals do not give."""
    import pstats

    partitions, high_watermark = _shape(directory)
    made = requests(kind, partitions, high_watermark, warmup + calls)
    with tempfile.TemporaryDirectory(prefix="diskless-profile-find-") as scratch:
        out = Path(scratch) / f"{kind}.prof"
        if grpc_path:
            _callgrind(["serve", str(directory)], out, made, directory if churn else None, cprofile=True)
        else:
            requests_file = Path(scratch) / f"{kind}.requests"
            write_requests(requests_file, made)
            churned = ["--churn"] if churn else []
            _callgrind(["run", str(directory), str(requests_file), *churned], out, None, cprofile=True)
        stats = pstats.Stats(str(out))
        # The process's start (imports above all) is in the profile too: the functions per call are those called
        # `warmup + calls` times or a multiple of it.
        stats.sort_stats("tottime").print_stats(PROFILE_SHOWN)
        stats.sort_stats("cumulative").print_stats("coordinator|grpc|asyncio", PROFILE_SHOWN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("build")
    made.add_argument("directory", type=Path)
    made.add_argument("--partitions", type=int, default=100)
    made.add_argument("--files", type=int, default=1000)
    counted = commands.add_parser("count")
    counted.add_argument("directory", type=Path)
    counted.add_argument("--calls", type=int, default=200)
    counted.add_argument("--warmup", type=int, default=40)
    counted.add_argument("--kinds", default=",".join(KINDS))
    counted.add_argument("--grpc", action="store_true")
    counted.add_argument("--churn", action="store_true", help="a commit before each call, as under load")
    counted.add_argument("--keep", type=Path, help="a directory to keep the callgrind files in")
    counted.add_argument("--cprofile", action="store_true", help="the first kind under cProfile, not counted")
    ran = commands.add_parser("run")  # the counted process (without --grpc)
    ran.add_argument("directory", type=Path)
    ran.add_argument("requests", type=Path)
    ran.add_argument("--churn", action="store_true")
    ran.add_argument("--writes-only", action="store_true")
    served = commands.add_parser("serve")  # the counted process (with --grpc)
    served.add_argument("directory", type=Path)
    served.add_argument("--unfrozen", action="store_true", help="the loaded state left to the collector")
    served.add_argument("--gc-report", action="store_true", help="the collections while serving, to stderr")
    collected = commands.add_parser("gc")  # the server's collections, unfrozen and frozen
    collected.add_argument("directory", type=Path)
    collected.add_argument("--calls", type=int, default=3000)
    collected.add_argument("--kind", default="tail", choices=KINDS)
    args = parser.parse_args()
    if args.command == "build":
        build(args.directory, args.partitions, args.files)
    elif args.command == "count" and args.cprofile:
        profile(args.directory, args.kinds.split(",")[0], args.calls, args.warmup, args.grpc, args.churn)
    elif args.command == "count":
        count(args.directory, args.kinds.split(","), args.calls, args.warmup, args.grpc, args.churn, args.keep)
    elif args.command == "run":
        run_core(args.directory, args.requests, args.churn, not args.writes_only)
    elif args.command == "gc":
        gc_time(args.directory, args.kind, args.calls)
    else:
        run_server(args.directory, not args.unfrozen, args.gc_report)


if __name__ == "__main__":
    main()
