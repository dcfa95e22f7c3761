"""The classic -> diskless switch at scale (issue #39's figure): a `diskless serve` node, a classic topic of
`--partitions` partitions with `--producers` idempotent producers each, switched by InitDisklessLog, then committed to.

    .venv/bin/python -m bench.switch [--partitions 1000] [--producers 10] [--per-call 100] [--concurrency 4]
                                     [--rounds 3] [--coordinators 4] [--json]

1. The switch: CreatePartitions, then InitDisklessLog for every partition, `--per-call` partitions a call,
   `--concurrency` calls at once (as the brokers leading the classic partitions send them). Each producer carries
   its 5 last classic batches (Kafka's window), an epoch and a last timestamp; the seal is 10,000. Wall time of the
   whole switch, and the calls' p50/p99.
2. Right after: `--rounds` rounds in which every producer of every partition sends its next batch (its next
   sequence), in files of 100 batches (one per partition, the benchmark's 100x100 shape), `--concurrency` files at
   once; batches/s and the files' commit p50/p99. Every answer is checked: the first diskless offsets are the seal's,
   no batch is taken for a duplicate. Then each producer resends its last classic batch once: every one must be a
   duplicate answering its classic offset.
3. The same commits to a topic created diskless (its producers new: their first batches), for the ratio; with
   `--baseline-first` also once before the switch, which shows how much of the ratio is the order of the runs.

The machine is shared: figures are for a loaded machine and move from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import grpc

from bench.node_process import start_node, stop_node, wait_serving
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

SEAL = 10_000
CLASSIC_START = 1_000
RECORDS = 10  # per batch
BATCH_BYTES = 1_000
FILE_PARTITIONS = 100  # batches per committed file, one per partition
TIMESTAMP = 1_700_000_000_000
CALL_TIMEOUT_S = 120


def _classic_producer(producer_id: int) -> pb.ClassicProducerState:
    """A producer whose last 5 classic batches end at the seal: sequences 0..49 at offsets SEAL-50..SEAL-1 (all
    producers of a partition share those offsets: the figure is the coordinator's work, not a consistent log)."""
    batches = [
        pb.ClassicProducerBatch(
            base_sequence=10 * n, last_sequence=10 * n + 9, base_offset=SEAL - 50 + 10 * n,
            last_offset=SEAL - 41 + 10 * n, timestamp=TIMESTAMP, timestamp_type=pb.CREATE_TIME,
        )
        for n in range(5)
    ]  # fmt: skip
    return pb.ClassicProducerState(
        producer_id=producer_id, producer_epoch=0, batches=batches, last_timestamp=TIMESTAMP, coordinator_epoch=-1,
        current_txn_first_offset=-1,
    )  # fmt: skip


def _producer_id(partition: int, index: int, producers: int) -> int:
    return partition * producers + index + 1


def _producer_at(index: int, producers: int, sequence: int) -> Callable[[int], tuple[int, int]]:
    """Each partition's `index`th producer at `sequence`."""
    return lambda partition: (_producer_id(partition, index, producers), sequence)


def _init_request(topic_id: bytes, partitions: Sequence[int], producers: int) -> pb.InitDisklessLogRequest:
    parts = [
        pb.InitDisklessLogRequest.Partition(
            partition=p, log_start_offset=CLASSIC_START, seal_offset=SEAL, leader_epoch=3, max_timestamp=TIMESTAMP,
            producers=[_classic_producer(_producer_id(p, i, producers)) for i in range(producers)],
        )
        for p in partitions
    ]  # fmt: skip
    return pb.InitDisklessLogRequest(
        topics=[pb.InitDisklessLogRequest.Topic(topic_id=topic_id, partitions=parts)], timeout_ms=60_000
    )


def _file(topic_id: bytes, partitions: Sequence[int], producer_of: Callable[[int], tuple[int, int]]) -> Any:
    """A CommitFile of one batch per partition; `producer_of(partition)` gives (producer id, base sequence)."""
    batches = []
    for n, partition in enumerate(partitions):
        producer_id, sequence = producer_of(partition)
        batches.append(
            pb.CommitFileRequest.Batch(
                magic=2, topic_id=topic_id, partition=partition, byte_offset=n * BATCH_BYTES, size=BATCH_BYTES,
                base_offset=0, last_offset=RECORDS - 1, batch_max_timestamp=TIMESTAMP, timestamp_type=pb.CREATE_TIME,
                producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                last_sequence=sequence + RECORDS - 1,
            )
        )  # fmt: skip
    return batches


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


async def _bounded(jobs: Sequence[Callable[[], Awaitable[float]]], concurrency: int) -> tuple[float, list[float]]:
    """Runs the jobs, at most `concurrency` at once; (wall seconds, each job's seconds)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[float]]) -> float:
        async with gate:
            return await job()

    started = time.monotonic()
    durations = await asyncio.gather(*(one(job) for job in jobs))
    return time.monotonic() - started, list(durations)


class Run:
    def __init__(self, stub: pb_grpc.DisklessCoordinatorAsyncStub, args: argparse.Namespace) -> None:
        self.stub = stub
        self.args = args
        self.owners: dict[tuple[bytes, int], int] = {}

    async def topic(self, name: str) -> bytes:
        topic_id = uuid.uuid4().bytes
        topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=self.args.partitions)
        answer = await self.stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[topic], timeout_ms=60_000))
        assert answer.topics[0].error_code == pb.NONE, answer
        found = await self.stub.FindCoordinator(
            pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(self.args.partitions))]
            )
        )
        for result in found.topics[0].partitions:
            self.owners[(topic_id, result.partition)] = result.coordinator_id
        return topic_id

    async def commit(self, batches: list[Any], check: Callable[[Any, Any], None]) -> float:
        owners = sorted({self.owners[(b.topic_id, b.partition)] for b in batches})
        request = pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4().hex}", object_format=1, file_size=len(batches) * BATCH_BYTES,
            uploader_broker_id=1, owner_ids=owners, batches=batches, timeout_ms=60_000,
        )  # fmt: skip
        started = time.monotonic()
        answer = await self.stub.CommitFile(request, timeout=CALL_TIMEOUT_S)
        took = time.monotonic() - started
        for sent, result in zip(batches, answer.batches, strict=True):
            check(sent, result)
        return took

    def files(self, topic_id: bytes, producer_of: Callable[[int], tuple[int, int]]) -> list[list[Any]]:
        partitions = range(self.args.partitions)
        return [
            _file(topic_id, partitions[start : start + FILE_PARTITIONS], producer_of)
            for start in range(0, self.args.partitions, FILE_PARTITIONS)
        ]

    async def rounds(self, topic_id: bytes, first_sequence: int, first_offset: int) -> dict[str, float]:
        """Every producer's next batch, `--rounds` times; the answers checked against the offsets expected."""
        producers, durations, wall = self.args.producers, [], 0.0
        batches = 0
        for round_number in range(self.args.rounds):
            for index in range(producers):
                sequence = first_sequence + RECORDS * round_number
                expected = first_offset + RECORDS * (round_number * producers + index)

                def check(sent: Any, result: Any, expected: int = expected) -> None:
                    got = (result.error_code, result.assigned_base_offset, result.is_duplicate)
                    assert got == (pb.NONE, expected, False), (sent.partition, got, expected)

                files = self.files(topic_id, _producer_at(index, producers, sequence))
                jobs = [partial(self.commit, f, check) for f in files]
                took, each = await _bounded(jobs, self.args.concurrency)
                wall += took
                durations += each
                batches += sum(len(f) for f in files)
        return {
            "batches": batches,
            "batches_per_s": round(batches / wall),
            "commit_p50_ms": round(1000 * statistics.median(durations), 1),
            "commit_p99_ms": round(1000 * _percentile(durations, 0.99), 1),
        }


async def measure(address: str, args: argparse.Namespace) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub: pb_grpc.DisklessCoordinatorAsyncStub = pb_grpc.DisklessCoordinatorStub(channel)
        await wait_serving(stub)
        run = Run(stub, args)
        switched = await run.topic("classic-orders")
        chunks = [range(s, min(s + args.per_call, args.partitions)) for s in range(0, args.partitions, args.per_call)]

        async def init(chunk: range) -> float:
            started = time.monotonic()
            answer = await stub.InitDisklessLog(_init_request(switched, chunk, args.producers), timeout=CALL_TIMEOUT_S)
            assert all(r.error_code == pb.NONE for r in answer.topics[0].partitions), answer
            return time.monotonic() - started

        baseline_first = None
        if args.baseline_first:
            baseline_first = await run.rounds(await run.topic("born-diskless-first"), 0, 0)
        switch_s, calls = await _bounded([partial(init, c) for c in chunks], args.concurrency)
        print(
            f"switched {args.partitions} partitions x {args.producers} producers in {switch_s:.2f} s", file=sys.stderr
        )
        after = await run.rounds(switched, 50, SEAL)

        def duplicate(sent: Any, result: Any) -> None:
            assert (result.error_code, result.is_duplicate, result.assigned_base_offset) == (pb.NONE, True, SEAL - 10)

        resent = run.files(switched, _producer_at(0, args.producers, 40))
        await _bounded([partial(run.commit, f, duplicate) for f in resent], args.concurrency)
        # The same first commits to a topic created diskless: its producers are new (any sequence is theirs).
        baseline = await run.rounds(await run.topic("born-diskless"), 0, 0)
    return {
        "partitions": args.partitions,
        "producers_per_partition": args.producers,
        "switch_s": round(switch_s, 3),
        "switch_calls": len(calls),
        "switch_call_p50_ms": round(1000 * statistics.median(calls), 1),
        "switch_call_p99_ms": round(1000 * _percentile(calls, 0.99), 1),
        "commits_after_switch": after,
        "duplicates_of_last_classic_batch": args.partitions,
        "commits_born_diskless": baseline,
        "commits_born_diskless_before_switch": baseline_first,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--producers", type=int, default=10)
    parser.add_argument("--per-call", type=int, default=100, help="partitions per InitDisklessLog call")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight at once")
    parser.add_argument("--rounds", type=int, default=3, help="batches each producer sends after the switch")
    parser.add_argument("--coordinators", type=int, default=4)
    parser.add_argument("--baseline-first", action="store_true", help="also commit to a new topic before the switch")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-switch-") as scratch:
        directory = Path(scratch)
        process, address, _ = start_node(directory, args.coordinators, {})
        try:
            result = asyncio.run(measure(address, args))
        finally:
            stop_node(process)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, value in result.items():
            print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
