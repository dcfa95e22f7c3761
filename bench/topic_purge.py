"""DeleteTopics of a large topic while other topics commit on the same coordinators (DESIGN §4a).

    python -m bench.topic_purge [--batches 1000000] [--coordinators 2] [--brokers 4] [--commit-batches 10]
                                [--baseline-seconds 20] [--purge-seconds-max 600] [--set NAME=VALUE ...]

Starts `diskless serve` on 127.0.0.1 in a temporary directory, fills a "doomed" topic (one partition per
coordinator) with --batches batches, in files of 1,000, then runs --brokers closed-loop brokers committing files
of --commit-batches batches to a live topic on the same coordinators: for --baseline-seconds without a purge,
then DeleteTopics of the doomed topic, and on until every coordinator's purge is over (the node's
`diskless_coordinator_topics_awaiting_purge` back to 0; at most --purge-seconds-max). It prints the DeleteTopics
answer time, how long the purge took and its rate, and the live topic's commit latency (median, p99, max) before
and during the purge, with their ratio (issue #28 asks p99 during at most 2x without). With
`--set diskless.coordinator.topic.purge.batch.max=100000000` one pass takes everything: the stall of a deletion
in one apply, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.arguments import node_settings
from bench.driver import NAN, percentile_ms
from bench.node_process import (
    METRICS_LINE,
    start_node,
    stop_node,
    wait_serving,
)
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

FILL_BATCHES_PER_FILE = 1000
FILL_IN_FLIGHT = 2
POLL_INTERVAL_S = 0.2


def _batch(topic_id: bytes, partition: int, position: int) -> pb.CommitFileRequest.Batch:
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=topic_id, partition=partition, byte_offset=position * 100, size=100, base_offset=0,
        last_offset=9, batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip


async def _topic(stub: pb_grpc.DisklessCoordinatorAsyncStub, name: str, partitions: int) -> tuple[bytes, list[int]]:
    """A topic whose partitions land on every coordinator: (its id, partition -> coordinator)."""
    topic_id = uuid.uuid4().bytes
    created = await stub.CreatePartitions(
        pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
        )
    )
    assert created.topics[0].error_code == pb.NONE, created
    found = await stub.FindCoordinator(
        pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(partitions))]
        )
    )
    return topic_id, [p.coordinator_id for p in found.topics[0].partitions]


async def _commit(
    stub: pb_grpc.DisklessCoordinatorAsyncStub, batches: list[pb.CommitFileRequest.Batch], owners: list[int]
) -> None:
    answer = await stub.CommitFile(
        pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4().hex}", object_format=1, file_size=100 * len(batches), uploader_broker_id=1,
            owner_ids=owners, batches=batches,
        ),
        timeout=60,
    )  # fmt: skip
    assert all(b.error_code == pb.NONE for b in answer.batches), answer.batches[0]


async def _fill(stub: pb_grpc.DisklessCoordinatorAsyncStub, topic_id: bytes, placement: list[int], total: int) -> None:
    files = (total + FILL_BATCHES_PER_FILE - 1) // FILL_BATCHES_PER_FILE
    started = time.monotonic()

    async def filler(first: int) -> None:
        for file in range(first, files, FILL_IN_FLIGHT):
            partition = file % len(placement)  # each file on one partition: one coordinator's commit
            count = min(FILL_BATCHES_PER_FILE, total - file * FILL_BATCHES_PER_FILE)
            await _commit(stub, [_batch(topic_id, partition, i) for i in range(count)], [placement[partition]])
            if file % 100 == 0:
                print(f"  filled {file * FILL_BATCHES_PER_FILE} of {total} batches", flush=True)

    await asyncio.gather(*(filler(i) for i in range(FILL_IN_FLIGHT)))
    elapsed = time.monotonic() - started
    print(f"filled {total} batches in {elapsed:.1f} s ({total / elapsed:.0f} batches/s)", flush=True)


@dataclass
class Latencies:
    samples: list[tuple[float, float]] = field(default_factory=list)  # (answered at, latency), monotonic seconds

    def between(self, start: float, end: float) -> list[float]:
        return [latency for at, latency in self.samples if start <= at < end]


async def _broker(
    stub: pb_grpc.DisklessCoordinatorAsyncStub,
    broker: int,
    topic_id: bytes,
    placement: list[int],
    batches: int,
    stop: asyncio.Event,
    latencies: Latencies,
) -> None:
    owners = sorted(set(placement))
    items = [_batch(topic_id, (broker + i) % len(placement), i) for i in range(batches)]
    while not stop.is_set():
        sent = time.monotonic()
        await _commit(stub, items, owners)
        answered = time.monotonic()
        latencies.samples.append((answered, answered - sent))


def _awaiting_purge(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("diskless_coordinator_topics_awaiting_purge{")
    )


async def _run(args: argparse.Namespace, address: str, metrics_url: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        await wait_serving(stub)
        doomed, doomed_placement = await _topic(stub, "doomed", args.coordinators * 4)
        live, live_placement = await _topic(stub, "live", args.coordinators * 4)
        await _fill(stub, doomed, doomed_placement, args.batches)
        latencies, stop = Latencies(), asyncio.Event()
        brokers = [
            asyncio.create_task(_broker(stub, b, live, live_placement, args.commit_batches, stop, latencies))
            for b in range(args.brokers)
        ]
        try:
            baseline_start = time.monotonic()
            await asyncio.sleep(args.baseline_seconds)
            sent = time.monotonic()
            deleted = await stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[doomed]), timeout=60)
            answered = time.monotonic()
            assert deleted.topics[0].error_code == pb.NONE, deleted
            while _awaiting_purge(metrics_url) > 0:
                if time.monotonic() - answered > args.purge_seconds_max:
                    print(f"the purge did not end within {args.purge_seconds_max} s: the figures cover that much")
                    break
                await asyncio.sleep(POLL_INTERVAL_S)
            purged = time.monotonic()
        finally:
            stop.set()
            await asyncio.gather(*brokers)
    before = latencies.between(baseline_start, sent)
    during = latencies.between(sent, purged)
    print(f"DeleteTopics answered in {(answered - sent) * 1000:.1f} ms")
    print(f"purge of {args.batches} batches: {purged - answered:.1f} s ({args.batches / (purged - answered):.0f}/s)")
    for label, values in (("without a purge", before), ("during the purge", during)):
        print(
            f"live topic commits {label}: {len(values)} commits, "
            f"median {percentile_ms(values, 0.5, empty=NAN):.2f} ms, "
            f"p99 {percentile_ms(values, 0.99, empty=NAN):.2f} ms, max {percentile_ms(values, 1.0, empty=NAN):.2f} ms"
        )
    print(
        f"p99 during / without: {percentile_ms(during, 0.99, empty=NAN) / percentile_ms(before, 0.99, empty=NAN):.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=1_000_000, help="batches of the topic deleted")
    parser.add_argument("--coordinators", type=int, default=2)
    parser.add_argument("--brokers", type=int, default=4, help="closed-loop brokers committing to the live topic")
    parser.add_argument("--commit-batches", type=int, default=10, help="batches per live-topic commit")
    parser.add_argument("--baseline-seconds", type=float, default=20, help="commits measured before the deletion")
    parser.add_argument("--purge-seconds-max", type=float, default=600, help="the longest the purge is waited for")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a node setting")
    args = parser.parse_args(argv)
    if args.batches > 10_000_000 or args.brokers > 100 or args.baseline_seconds > 600:
        parser.error("bounded by design: at most 10,000,000 batches, 100 brokers, 600 s of baseline")
    settings = node_settings(parser, args.set, {"diskless.metrics.listen": "127.0.0.1:0"})
    print(
        f"topic purge: {args.batches} batches deleted while {args.brokers} brokers commit {args.commit_batches}-batch "
        f"files on {args.coordinators} coordinators, on {platform.node()} ({os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.2f}), settings {settings}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="topic-purge-") as directory:
        process, address, log_path = start_node(Path(directory), args.coordinators, settings)
        try:
            match = METRICS_LINE.search(log_path.read_text(errors="replace"))
            deadline = time.monotonic() + 30
            while match is None and time.monotonic() < deadline:
                time.sleep(0.1)
                match = METRICS_LINE.search(log_path.read_text(errors="replace"))
            if match is None:
                raise RuntimeError("the node did not say where its metrics are")
            import uvloop

            uvloop.run(_run(args, address, match.group(1)))
        finally:
            stop_node(process)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
