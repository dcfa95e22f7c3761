"""A CommitFile's CPU per batch, counted in instructions (callgrind), which a loaded machine does not change:

    python -m bench.profile_commit count [--files 60] [--warmup 20] [--partitions 100] [--keep DIR]

`count` runs the process below under `valgrind --tool=callgrind` twice, with `warmup` files and with
`warmup + files`, and prints the difference per batch. Each file is the benchmark's 100x100 shape (one idempotent
batch on each of 100 partitions of one coordinator) and goes the whole way a CommitFile goes on the node, less the
gRPC server and the pipeline's queue: the request's bytes parsed as the gate parses them, `CommitFiles.commit_file`
(the request's checks, each batch's structure, the split, the metrics and the answer), the part's check
(`check_commit_part`), its record replayed into the view, framed as the log frames it, and applied to SQLite in one
transaction (checksum VFS and checkpoints included), then the response serialized. No log file, no fsync.

`--cprofile N`: instead of counting, runs N files under cProfile (after `warmup`) and prints the Python functions
by own time and by calls: the ranking the counts do not give.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from protos import coordinator_pb2 as pb

TOPIC = bytes(range(1, 17))
RECORDS = 10  # per batch
BATCH_BYTES = 1000


class _Catalog:
    def __init__(self, partitions: int) -> None:
        self._entry = type("Entry", (), {"partitions": dict.fromkeys(range(partitions), 0)})()

    def topic(self, topic_id: bytes) -> Any:
        return self._entry if topic_id == TOPIC else None


class _OneCoordinator:
    """What CommitFiles asks of the node's coordinators, over one coordinator's core (bench.transactions.Core):
    each part checked, replayed, framed and applied at once, as a pipeline's group of one."""

    def __init__(self, directory: Path, partitions: int) -> None:
        from bench.transactions import Core
        from coordinator.base.metrics import Metrics
        from coordinator.config.settings import Settings

        self.core = Core(directory, partitions)
        self.settings = Settings()
        self.metrics = Metrics()
        self.shards = [self.core]
        self.catalog = _Catalog(partitions)

    def require_room(self, coordinator_ids: Any) -> None:
        pass

    def unknown_partition(self, partition: int) -> Any:
        raise AssertionError(f"partition {partition} is unknown")

    async def run_parts(self, operations: Mapping[int, Any], timeout_ms: int, may_linger: bool) -> dict[int, Any]:
        from coordinator.machine import kinds, records
        from coordinator.runtime.log.frame import encode_frame

        core = self.core
        answers = {}
        for coordinator_id, operation in operations.items():
            result = operation.run(core.view, 0)
            answers[coordinator_id] = result.response
            if not result.records:  # a retried commit: answered again, nothing written
                continue
            core.end += len(result.records)
            for record in result.records:
                kinds.replay(core.view, record, core.end)
            encode_frame(core.end - len(result.records), 0, len(result.records), records.encode_batch(result.records))
            core.store.apply([(core.end, list(result.records))])
            core.view.forget_applied_files(core.end)
        return answers


def _request(number: int, partitions: int) -> bytes:
    batches = [
        pb.CommitFileRequest.Batch(
            magic=2, topic_id=TOPIC, partition=p, byte_offset=p * BATCH_BYTES, size=BATCH_BYTES, base_offset=0,
            last_offset=RECORDS - 1, batch_max_timestamp=1_700_000_000_000 + number, timestamp_type=pb.CREATE_TIME,
            producer_id=1000 + p, producer_epoch=0, base_sequence=number * RECORDS,
            last_sequence=number * RECORDS + RECORDS - 1,
        )
        for p in range(partitions)
    ]  # fmt: skip
    request = pb.CommitFileRequest(
        object_key=f"wal/{number:08d}", object_format=1, file_size=partitions * BATCH_BYTES,
        uploader_broker_id=1, owner_ids=[0], batches=batches, timeout_ms=30_000,
    )  # fmt: skip
    return request.SerializeToString()


def run(files: int, partitions: int, profile_after: int = -1) -> None:
    """`files` commits through CommitFiles; with `profile_after` >= 0, those after it under cProfile (printed)."""
    from coordinator.base.clock import ManualClock
    from coordinator.commits.commit_file import CommitFiles

    raws = [_request(number, partitions) for number in range(files)]
    with tempfile.TemporaryDirectory(prefix="diskless-profile-commit-") as directory:
        coordinators = _OneCoordinator(Path(directory), partitions)
        commits = CommitFiles(coordinators, ManualClock(1_700_000_000_000))  # type: ignore[arg-type]
        profiler = cProfile.Profile()

        async def all_files() -> None:
            for number, raw in enumerate(raws):
                if number == profile_after:
                    profiler.enable()
                response = await commits.commit_file(pb.CommitFileRequest.FromString(raw))
                response.SerializeToString()
                assert not any(batch.error_code for batch in response.batches), response.batches[0]
            profiler.disable()

        asyncio.run(all_files())
        coordinators.core.store.close()
    if profile_after >= 0:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("ncalls").print_stats(30)
        print(text.getvalue())


def _callgrind(files: int, partitions: int, out: Path) -> int:
    command = [
        "valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={out}", sys.executable, "-m",
        "bench.profile_commit", "run", "--files", str(files), "--partitions", str(partitions),
    ]  # fmt: skip
    subprocess.run(command, check=True, env={**os.environ, "PYTHONHASHSEED": "0"}, stderr=subprocess.DEVNULL)
    found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    assert found is not None, f"no total in {out}"
    return int(found.group(1))


def count(files: int, warmup: int, partitions: int, keep: Path | None) -> float:
    with tempfile.TemporaryDirectory(prefix="diskless-profile-commit-out-") as scratch:
        where = keep or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        totals = [_callgrind(made, partitions, where / f"commit-{made}.out") for made in (warmup, warmup + files)]
        if keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    per_batch = (totals[1] - totals[0]) / (files * partitions)
    print(f"commit: {per_batch / 1000:.2f}k instructions per batch, {per_batch * partitions / 1000:.1f}k per file "
          f"{totals}", flush=True)  # fmt: skip
    return per_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    counted = commands.add_parser("count")
    counted.add_argument("--files", type=int, default=60)
    counted.add_argument("--warmup", type=int, default=20)
    counted.add_argument("--partitions", type=int, default=100)
    counted.add_argument("--keep", type=Path, help="a directory to keep the callgrind files in")
    counted.add_argument("--cprofile", type=int, default=0, help="files run under cProfile instead of counted")
    ran = commands.add_parser("run")  # the counted process
    ran.add_argument("--files", type=int, required=True)
    ran.add_argument("--partitions", type=int, default=100)
    args = parser.parse_args()
    if args.command == "count" and args.cprofile:
        run(args.warmup + args.cprofile, args.partitions, profile_after=args.warmup)
    elif args.command == "count":
        count(args.files, args.warmup, args.partitions, args.keep)
    else:
        run(args.files, args.partitions)


if __name__ == "__main__":
    main()
