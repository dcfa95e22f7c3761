"""The cost of transactions (issue #36's figures) on a coordinator's core, one process, no gRPC and no log fsync:

    python -m bench.transactions [--files 400] [--calls 2000] [--aborted 10000] [--json]

1. CommitFile, the benchmark's 100x100 shape (files of 100 batches, one per partition of 100): each file checked
   (`check_commit_part`), its record replayed into the view and applied to SQLite, as the pipeline does. The same
   files idempotent, then with every producer transactional and, after every 10 files, a file of one marker per
   partition (COMMIT) ending each producer's transaction. CPU (process time) per data batch, batches/s, p99 per file.
2. FindBatches on one partition holding 10,000 aborted transactions (a data batch and its ABORT marker each):
   the same random offsets read READ_UNCOMMITTED, READ_COMMITTED, READ_UNCOMMITTED again (100 batches per call, the
   aborted ones listed), through the code the node and its reader processes run (`partition_offsets`,
   `fetch_partition`); calls per CPU second, the machine being shared.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator.commits import parts, rules
from coordinator.machine import batch_entries, kinds
from coordinator.machine.state import reads
from coordinator.machine.state.store import StateStore
from coordinator.reads.byte_budget import FetchBudget, fetch_partition, header_offsets
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb

TOPIC = bytes(range(1, 17))
PARTITIONS = 100
FILES_PER_TRANSACTION = 10
RECORDS = 10
BATCH_BYTES = 1000


def _batch(partition: int, producer: int, sequence: int, transactional: bool) -> pb.CommitFileRequest.Batch:
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=TOPIC, partition=partition, byte_offset=partition * BATCH_BYTES, size=BATCH_BYTES,
        base_offset=0, last_offset=RECORDS - 1, batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME,
        producer_id=producer, producer_epoch=0, base_sequence=sequence, last_sequence=sequence + RECORDS - 1,
        is_transactional=transactional,
    )  # fmt: skip


def _marker(partition: int, producer: int, commit: bool) -> pb.CommitFileRequest.Batch:
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=TOPIC, partition=partition, byte_offset=partition * 78, size=78, base_offset=0,
        last_offset=0, batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME, producer_id=producer,
        producer_epoch=0, base_sequence=-1, last_sequence=-1, is_transactional=True, is_control=True,
        control_type=pb.CONTROL_COMMIT if commit else pb.CONTROL_ABORT,
    )  # fmt: skip


class Core:
    """A coordinator's view and SQLite state, records replayed and applied as the pipeline does."""

    def __init__(self, directory: Path, partitions: int) -> None:
        self.store = StateStore(directory / "state.sqlite", 0)
        self.view = self.store.load_view()
        self.end = self.store.applied_offset
        request = partition_checks.CreatePartitions(TOPIC, "bench", tuple(range(partitions)))
        self.run(partition_checks.check_create_partitions(self.view, request, 0).records)

    def run(self, records: Any) -> None:
        self.end += 1
        for record in records:
            kinds.replay(self.view, record, self.end)
        self.store.apply([(self.end, list(records))])
        self.view.forget_applied_files(self.end)

    def commit(self, batches: list[pb.CommitFileRequest.Batch], key: str, now_ms: int) -> list[int]:
        read = parts.request_batches(batches)
        size = sum(b.size for b in batches) + max(b.byte_offset for b in batches)
        part = parts.CommitPart(key, size, 1, (0,), tuple(read), tuple(rules.batch_structure_problems(read, size)))
        result = rules.check_commit_part(self.view, part, now_ms)
        self.run(result.records)
        return [outcome.error_code for outcome in result.response]


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def commit_load(files: int, transactional: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        core = Core(Path(directory), PARTITIONS)
        sequences = [0] * PARTITIONS
        durations: list[float] = []
        data_batches = 0
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        for number in range(files):
            batches = [_batch(p, 1000 + p, sequences[p], transactional) for p in range(PARTITIONS)]
            started = time.perf_counter()
            codes = core.commit(batches, f"wal/{number}", number)
            durations.append(time.perf_counter() - started)
            assert not any(codes), codes
            data_batches += PARTITIONS
            sequences = [s + RECORDS for s in sequences]
            if transactional and number % FILES_PER_TRANSACTION == FILES_PER_TRANSACTION - 1:
                started = time.perf_counter()
                codes = core.commit([_marker(p, 1000 + p, True) for p in range(PARTITIONS)], f"wal/m{number}", number)
                durations.append(time.perf_counter() - started)
                assert not any(codes), codes
        cpu, wall = time.process_time() - cpu_started, time.perf_counter() - wall_started
        core.store.close()
    return {
        "batches_per_s": data_batches / wall,
        "cpu_us_per_batch": cpu / data_batches * 1e6,
        "p99_ms_per_file": _p99(durations),
    }


def _read(core: Core, offset: int, committed: bool) -> bytes:
    """One partition's FindBatches answer, 100 batches from `offset`, as the node frames it."""
    with core.store.read_transaction() as db:
        found = reads.partition_offsets(db, TOPIC, 0)
        assert found is not None
        entries: list[bytes] = []
        code, message = fetch_partition(db, found, offset, 2**30, FetchBudget(2**30, 100, 1000), entries, committed)
        header = batch_entries.partition_header(0, code, message, header_offsets(found))
        return batch_entries.partition_result(header, entries)


def _read_rate(core: Core, offsets: list[int], committed: bool) -> float:
    """Calls per CPU second (the machine is shared: wall time says more of the others)."""
    started = time.process_time()
    for offset in offsets:
        _read(core, offset, committed)
    return len(offsets) / (time.process_time() - started)


def find_batches_load(aborted: int, calls: int, seed: int, rounds: int = 3) -> dict[str, float]:
    """Two ranges of one partition: its 10,000 aborted transactions (dense: every other batch is an ABORT marker)
    and as many plain batches after them (the aborted ones are in the partition, none in the range read)."""
    with tempfile.TemporaryDirectory() as directory:
        core = Core(Path(directory), 1)
        chunk = 500  # transactions per file: a data batch and its ABORT marker each
        for first in range(0, aborted, chunk):
            batches = []
            for producer in range(first, min(first + chunk, aborted)):
                batches += [_batch(0, 10_000 + producer, 0, True), _marker(0, 10_000 + producer, False)]
            for index, made in enumerate(batches):
                made.byte_offset = index * BATCH_BYTES
            assert not any(core.commit(batches, f"wal/{first}", first))
        dense_end = core.view.partitions_by_key[0].high_watermark
        for first in range(0, 2 * aborted, chunk):
            batches = [pb.CommitFileRequest.Batch(
                magic=2, topic_id=TOPIC, partition=0, byte_offset=i * BATCH_BYTES, size=BATCH_BYTES, base_offset=0,
                last_offset=RECORDS - 1, batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME,
                producer_id=-1, producer_epoch=-1, base_sequence=-1, last_sequence=-1,
            ) for i in range(chunk)]  # fmt: skip
            assert not any(core.commit(batches, f"wal/plain/{first}", first))
        high_watermark = core.view.partitions_by_key[0].high_watermark
        generator = random.Random(seed)
        ranges = {"dense": (0, dense_end - 200), "after": (dense_end, high_watermark - 2000)}
        report: dict[str, float] = {}
        for name, (low, high) in ranges.items():
            offsets = [generator.randrange(low, high) for _ in range(calls)]
            best = {False: 0.0, True: 0.0}
            for _ in range(rounds):  # alternating, the best of each: the machine is shared
                for committed in (False, True):
                    best[committed] = max(best[committed], _read_rate(core, offsets, committed))
            answers = [
                pb.FindBatchesResponse.TopicResult.FromString(_read(core, o, True)).partitions[0] for o in offsets
            ]
            report[f"{name}_aborted_listed_per_call"] = sum(len(a.aborted_transactions) for a in answers) / calls
            report[f"{name}_read_uncommitted_calls_per_cpu_s"] = best[False]
            report[f"{name}_read_committed_calls_per_cpu_s"] = best[True]
            report[f"{name}_ratio"] = best[True] / best[False]
        core.store.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--aborted", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    idempotent = commit_load(args.files, False)
    transactional = commit_load(args.files, True)
    idempotent_again = commit_load(args.files, False)
    reads_result = find_batches_load(args.aborted, args.calls, args.seed)
    report = {
        "commit_idempotent": idempotent,
        "commit_transactional": transactional,
        "commit_idempotent_again": idempotent_again,
        "cpu_per_batch_ratio": transactional["cpu_us_per_batch"]
        / ((idempotent["cpu_us_per_batch"] + idempotent_again["cpu_us_per_batch"]) / 2),
        "find_batches": reads_result,
    }
    print(json.dumps(report, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in report.items()))


if __name__ == "__main__":
    main()
