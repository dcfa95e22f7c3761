"""Producer churn (issue #28, DESIGN §4a): many short-lived idempotent producers against a node it starts.

    python -m bench.producer_churn [--producers 1000000] [--rate 10000] [--batches 500] [--clients 4]
                                   [--partitions 64] [--coordinators 4] [--expiration-ms 20000]
                                   [--check-interval-ms 2000] [--tail-s 40] [--json]

Starts `diskless serve` in a temporary directory with a short
`diskless.coordinator.producer.id.expiration.ms`, then --clients brokers commit files of --batches batches,
each batch the only one of a new producer id (one record, a LOG_APPEND_TIME batch), at --rate producers per
second in all, until --producers producers have written; then it waits --tail-s more. Every --trim-interval-s it
deletes every batch written so far (DeleteRecords to the high watermark, as retention would), so that the state
and memory left growing are the producers'. Every second it samples
the node's RSS (VmRSS) and DescribeCoordinators (producer_count, state, log and snapshot bytes, summed over the
coordinators). It prints the samples and, for the steady window (from one expiration plus two check intervals
after the start until the producers stop), each figure's range against its median: flat means within ±10%.
Expected live producers in the steady window: about rate x (expiration + check interval).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc

from bench.load import create_load_topic
from bench.node_process import (
    start_node,
    status_kib,
    stop_node,
    wait_serving,
)
from bench.report import load_average, machine
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

BATCH_BYTES = 200  # the size each batch claims in its file
SAMPLE_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    produced: int  # producers that wrote so far
    producer_count: int
    rss_mib: float
    state_mib: float
    log_mib: float
    snapshot_mib: float


def _commit_request(topic_id: bytes, partitions: int, owners: list[int], first_producer: int, batches: int) -> bytes:
    items = [
        pb.CommitFileRequest.Batch(
            topic_id=topic_id, partition=(first_producer + i) % partitions, byte_offset=i * BATCH_BYTES,
            size=BATCH_BYTES, base_offset=0, last_offset=0, batch_max_timestamp=-1, magic=2,
            timestamp_type=pb.LOG_APPEND_TIME, producer_id=first_producer + i, producer_epoch=0, base_sequence=0,
            last_sequence=0,
        )
        for i in range(batches)
    ]  # fmt: skip
    return pb.CommitFileRequest(
        object_key=f"wal/{uuid.uuid4().hex[:2]}/{uuid.uuid4().hex}.wal", object_format=1,
        file_size=batches * BATCH_BYTES, uploader_broker_id=1, owner_ids=owners, batches=items, timeout_ms=30_000,
    ).SerializeToString()  # fmt: skip


class Churn:
    def __init__(self, args: argparse.Namespace, channel: grpc.aio.Channel, pid: int) -> None:
        self.args = args
        self.stub: pb_grpc.DisklessCoordinatorAsyncStub = pb_grpc.DisklessCoordinatorStub(channel)
        self.commit = channel.unary_unary(
            "/diskless.coordinator.v1.DisklessCoordinator/CommitFile",
            request_serializer=lambda raw: raw,
            response_deserializer=pb.CommitFileResponse.FromString,
        )
        self.pid = pid
        self.produced = 0
        self.refused = 0
        self.samples: list[Sample] = []
        self.started = time.monotonic()

    async def produce(self, topic_id: bytes, owners: list[int]) -> None:
        args = self.args
        next_producer = 0
        lock = asyncio.Lock()

        async def client() -> None:
            nonlocal next_producer
            while True:
                async with lock:
                    if next_producer >= args.producers:
                        return
                    first, next_producer = next_producer, next_producer + args.batches
                    # Paced: the producers of this call may start only at their share of the rate.
                    due = self.started + first / args.rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                count = min(args.batches, args.producers - first)
                answer = await self.commit(_commit_request(topic_id, args.partitions, owners, first, count))
                self.refused += sum(1 for b in answer.batches if b.error_code != pb.NONE)
                self.produced += count

        await asyncio.gather(*(client() for _ in range(args.clients)))

    async def trim_until(self, topic_id: bytes, done: asyncio.Event) -> None:
        """Every --trim-interval-s, DeleteRecords up to each partition's high watermark: the batches leave, as
        retention would take them, so that what stays in the state and in memory is the producers'."""
        partitions = [pb.DeleteRecordsRequest.Partition(partition=p, offset=-1) for p in range(self.args.partitions)]
        request = pb.DeleteRecordsRequest(topics=[pb.DeleteRecordsRequest.Topic(topic_id=topic_id,
                                                                                partitions=partitions)])  # fmt: skip
        while self.args.trim_interval_s > 0 and not done.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), self.args.trim_interval_s)
            await self.stub.DeleteRecords(request, timeout=30)

    async def sample(self) -> Sample:
        described = await self.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=30)
        mib = 1024 * 1024
        found = Sample(
            at_s=round(time.monotonic() - self.started, 1),
            produced=self.produced,
            producer_count=sum(c.producer_count for c in described.coordinators),
            rss_mib=round(status_kib(self.pid, "VmRSS") / 1024, 1),
            state_mib=round(sum(c.state_bytes for c in described.coordinators) / mib, 1),
            log_mib=round(sum(c.log_bytes for c in described.coordinators) / mib, 1),
            snapshot_mib=round(sum(c.snapshot_bytes for c in described.coordinators) / mib, 1),
        )
        self.samples.append(found)
        return found

    async def sample_until(self, done: asyncio.Event) -> None:
        while not done.is_set():
            found = await self.sample()
            if not self.args.json:
                print(json.dumps(asdict(found)), flush=True)
            await asyncio.sleep(SAMPLE_INTERVAL_S)


def _steady(samples: list[Sample], from_s: float, to_s: float) -> dict[str, dict[str, float]]:
    window = [s for s in samples if from_s <= s.at_s <= to_s]
    figures: dict[str, dict[str, float]] = {}
    for name in ("producer_count", "rss_mib", "state_mib"):
        values = [float(getattr(s, name)) for s in window]
        if not values:
            continue
        median = statistics.median(values)
        spread = (max(values) - min(values)) / 2 / median * 100 if median else 0.0
        figures[name] = {"min": min(values), "median": median, "max": max(values), "spread_percent": round(spread, 1)}
    return figures


async def run(args: argparse.Namespace, directory: Path) -> dict[str, object]:
    settings = {
        "diskless.coordinator.producer.id.expiration.ms": str(args.expiration_ms),
        "diskless.coordinator.producer.id.expiration.check.interval.ms": str(args.check_interval_ms),
        "diskless.server.read.processes": "0",
    }
    process, address, log_path = start_node(directory, args.coordinators, settings)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            churn = Churn(args, channel, process.pid)
            await wait_serving(churn.stub)
            topic_id, owners = await create_load_topic(churn.stub, "churn", args.partitions)
            churn.started = time.monotonic()
            done = asyncio.Event()
            sampler = asyncio.create_task(churn.sample_until(done))
            trimmer = asyncio.create_task(churn.trim_until(topic_id, done))
            await churn.produce(topic_id, owners)
            produced_s = time.monotonic() - churn.started
            await asyncio.sleep(args.tail_s)
            done.set()
            await sampler
            await trimmer
            final = await churn.sample()
    finally:
        stop_node(process)
    warm_s = (args.expiration_ms + 2 * args.check_interval_ms) / 1000
    expired_lines = sum(1 for line in log_path.read_text(errors="replace").splitlines() if "idle producers" in line)
    return {
        "machine": machine(),
        "load_average_after": load_average(),
        "producers": churn.produced,
        "refused_batches": churn.refused,
        "produce_seconds": round(produced_s, 1),
        "producers_per_second": round(churn.produced / produced_s),
        "expected_steady_producers": round(churn.produced / produced_s * (args.expiration_ms + args.check_interval_ms)
                                           / 1000),
        "steady_window_s": [round(warm_s, 1), round(produced_s, 1)],
        "steady": _steady(churn.samples, warm_s, produced_s),
        "peak_producer_count": max(s.producer_count for s in churn.samples),
        "final": asdict(final),
        "expiry_passes_logged": expired_lines,
        "samples": [asdict(s) for s in churn.samples],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--producers", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=10_000, help="new producers per second, in all")
    parser.add_argument("--batches", type=int, default=500, help="batches (producers) per CommitFile")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--coordinators", type=int, default=4)
    parser.add_argument("--expiration-ms", type=int, default=20_000)
    parser.add_argument("--check-interval-ms", type=int, default=2_000)
    parser.add_argument("--tail-s", type=float, default=40.0, help="seconds sampled after the last producer")
    parser.add_argument(
        "--trim-interval-s", type=float, default=5.0, help="DeleteRecords of every batch this often (0: never)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="diskless-churn-") as directory:
        report = asyncio.run(run(args, Path(directory)))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    report.pop("samples")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
