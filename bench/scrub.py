"""How long one scrub pass over a large coordinator takes, unthrottled and at the default rate (issue #40 item 2).

    .venv/bin/python -m bench.scrub [--live 3000000] [--paced-seconds 30] [--data-dir DIR]

Builds one coordinator's data directory with the benchmark's prefill (bench/state.py: a generated metadata log
replayed into its SQLite state), takes a snapshot of it, then runs the scrub's pass (`Scrubber.run_pass`, the
node's own code: sealed segments, the snapshot, every state page through the checksum VFS, on a thread of its
own) once with no rate bound, and once at `diskless.coordinator.scrub.bytes.per.second`'s default for
`--paced-seconds` (a whole pass at the default rate takes minutes per GB), and prints bytes, seconds and bytes/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from bench.state import build_coordinator_state
from coordinator.base.clock import SystemClock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.config.loading import load_settings
from coordinator.runtime.replication.role import ReplicaRole
from coordinator.runtime.shard.scrubber import Scrubber, ScrubReport
from snapshot.snapshots import snapshot_directory, take_snapshot


class _Serving:
    """A coordinator that serves alone, as its scrub sees it; nothing to report in sound files."""

    role: ReplicaRole | None = None

    def __init__(self) -> None:
        self.stopped = False

    def require_active(self) -> None:
        if self.stopped:
            raise CoordinatorUnavailable(ErrorCode.NOT_COORDINATOR, "the measurement is over")

    def report_damage(self, error: Exception) -> None:
        raise AssertionError(f"the scrub found damage in a freshly built state: {error}")


def _bytes_under(directory: Path, pattern: str) -> int:
    return sum(path.stat().st_size for path in directory.glob(pattern))


async def _pass(directory: Path, bytes_per_second: int, seconds: float | None) -> tuple[ScrubReport, float]:
    settings = replace(load_settings(None, {}), scrub_bytes_per_second=bytes_per_second)
    subject = _Serving()
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scrub")
    scrubber = Scrubber(0, directory, settings, SystemClock(), executor, subject, asyncio.Lock(), lambda: None)
    started = time.monotonic()
    task = asyncio.ensure_future(scrubber.run_pass())
    if seconds is not None:
        done, _ = await asyncio.wait([task], timeout=seconds)
        if not done:
            subject.stopped = True  # the pass ends at its next step
    report = await task
    elapsed = time.monotonic() - started
    executor.shutdown()
    return report, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scrub", description=__doc__.split("\n")[0])
    parser.add_argument("--live", type=int, default=3_000_000, help="live batches of the coordinator's state")
    parser.add_argument("--paced-seconds", type=float, default=30.0)
    parser.add_argument("--data-dir", type=Path, default=None, help="reuse (or build once into) this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scrub-") as temporary:
        data_dir = args.data_dir or Path(temporary)
        directory = data_dir / "coordinator-0"
        if not (directory / "state.sqlite").exists():
            started = time.monotonic()
            build_coordinator_state(data_dir, 1, args.live)
            take_snapshot(directory / "state.sqlite", snapshot_directory(directory), 1024, int(time.time() * 1000), 0)
            print(f"built in {time.monotonic() - started:.0f} s")
        sizes = {
            "state_bytes": (directory / "state.sqlite").stat().st_size,
            "log_bytes": _bytes_under(directory / "log", "*.log"),
            "snapshot_bytes": _bytes_under(snapshot_directory(directory), "*.sqlite"),
        }
        print(json.dumps(sizes))
        default_rate = load_settings(None, {}).scrub_bytes_per_second
        for label, rate, seconds in (("unthrottled", 0, None), ("default rate", default_rate, args.paced_seconds)):
            report, elapsed = asyncio.run(_pass(directory, rate, seconds))
            print(
                f"{label}: {report.read_bytes:,} bytes in {elapsed:.1f} s = {report.read_bytes / elapsed / 2**20:.1f} "
                f"MiB/s (complete: {report.complete}, findings: {len(report.findings)})"
            )


if __name__ == "__main__":
    main()
