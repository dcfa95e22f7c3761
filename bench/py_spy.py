"""Where the coordinator's CPU goes, sampled by py-spy in its processes: a commit load and a read load.

cProfile (bench/profile.py) slows what it measures and sees one process; py-spy samples the running
server from outside (without pausing it) and follows its child processes. Each load writes the raw
stacks (`py-spy-<load>.raw`, collapsed stacks for any flame-graph tool) and a summary
(`py-spy-<load>.txt`): the load's figures, then the functions by own samples and by inclusive samples.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.coordinator_system import CoordinatorServer, CoordinatorSystem
from bench.driver import LoadPlan
from bench.profile import load_once
from bench.workload import DUPLICATE_SHARE_DEFAULT, SHAPES

SAMPLES_PER_S = 250
FUNCTIONS_SHOWN = 25
RECORDER_STOP_S = 30.0  # py-spy writes its file after the duration; it gets this long to do so
WARMUP_S = 1.0
FIND_COMMIT_INTERVAL_S = 0.25  # brokers commit every 250 ms while consumers read, as the find-batches scenario
FIND_CONSUMERS = 8
_REPOSITORY = f"{Path(__file__).resolve().parents[1]}/"


@dataclass(frozen=True, slots=True)
class ProfiledLoad:
    name: str  # file name part: commit, find
    title: str
    plan: LoadPlan


def profiled_loads(brokers: int, seconds: float) -> tuple[ProfiledLoad, ...]:
    shape = SHAPES["100x100"]
    commit = LoadPlan(shape, brokers, 0.0, WARMUP_S, seconds, 1, DUPLICATE_SHARE_DEFAULT)
    find = LoadPlan(shape, brokers, FIND_COMMIT_INTERVAL_S, WARMUP_S, seconds, 1, DUPLICATE_SHARE_DEFAULT,
                    consumers=FIND_CONSUMERS)  # fmt: skip
    return (
        ProfiledLoad("commit", "100x100 at the maximum rate", commit),
        ProfiledLoad("find", f"FindBatches back to back by {FIND_CONSUMERS} consumers, commits every 250 ms", find),
    )


def py_spy_binary() -> str:
    """py-spy beside this interpreter (the bench extra installs it), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
    return found


def summarise(raw: str, shown: int = FUNCTIONS_SHOWN) -> str:
    """The functions with the most own samples (the leaf frame) and the most inclusive samples."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        # py-spy's first frame names the process (--subprocesses): not a function.
        frames = [_function(frame) for frame in stack.split(";") if not frame.startswith("process ")]
        if not frames:
            continue
        own[frames[-1]] += count
        for function in set(frames):
            inclusive[function] += count
    if total == 0:
        return "no samples\n"
    lines = [f"{total} samples\n", "by own samples:"]
    lines += [f"{100 * n / total:6.1f}%  {function}" for function, n in own.most_common(shown)]
    lines += ["", "by inclusive samples:"]
    lines += [f"{100 * n / total:6.1f}%  {function}" for function, n in inclusive.most_common(shown)]
    return "\n".join(lines) + "\n"


def _function(frame: str) -> str:
    """`name (path:line)` as `name (path)`: a function's samples together whatever line they were on."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rpartition(":")[0] or where.rstrip(")")
    if path.startswith(_REPOSITORY):
        return f"{name} ({path.removeprefix(_REPOSITORY)})"
    for marker in ("site-packages/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"


def profile_with_py_spy(out: Path, brokers: int, coordinators: int, seconds: float) -> list[Path]:
    """Both loads against a fresh server each, sampled for their warm-up and window; returns the summaries."""
    out.mkdir(parents=True, exist_ok=True)
    binary = py_spy_binary()
    written = []
    for load in profiled_loads(brokers, seconds):
        raw_path = out / f"py-spy-{load.name}.raw"
        with tempfile.TemporaryDirectory(prefix="diskless-py-spy-") as scratch:
            server = CoordinatorServer(Path(scratch) / "data", coordinators, {})
            server.start()
            recorder = subprocess.Popen(
                [binary, "record", "--pid", str(server.pid), "--subprocesses", "--nonblocking",
                 "--rate", str(SAMPLES_PER_S), "--duration", str(round(WARMUP_S + seconds)),
                 "--format", "raw", "--output", str(raw_path)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                figures = asyncio.run(
                    load_once(CoordinatorSystem("coordinator", [server]), load.plan, "py-spy")
                ).median()
            finally:
                try:
                    _, errors = recorder.communicate(timeout=RECORDER_STOP_S)
                finally:
                    server.stop()
            if recorder.returncode != 0:
                raise RuntimeError(f"py-spy failed ({recorder.returncode}): {errors.strip()[-500:]}")
        heading = (
            f"coordinator sampled by py-spy ({SAMPLES_PER_S}/s, without pausing it, child processes included): "
            f"{load.title}, {brokers} brokers, {coordinators} coordinators, {seconds:.0f} s window\n"
            f"commits/s {figures['commits_per_s']:.0f}, batches/s {figures['batches_per_s']:.0f}, "
            f"FindBatches/s {figures['find_calls_per_s']:.0f}, server CPU µs/batch "
            f"{figures['cpu_s_per_batch'] * 1e6:.1f}\n\n"
        )
        summary = out / f"py-spy-{load.name}.txt"
        summary.write_text(heading + summarise(raw_path.read_text()))
        written.append(summary)
    return written
