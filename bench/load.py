"""A simple commit load against a running node or one it starts: commits/s, batches/s, latency.

    python -m bench.load [--bootstrap HOST:PORT] [--brokers 16] [--batches 100] [--partitions 100]
                         [--seconds 10] [--runs 3]

Without --bootstrap it starts `diskless serve` on a temporary data dir (8
coordinators) and stops it afterwards. Each broker is a closed loop: commit a
file of --batches batches spread over --partitions partitions (idempotent
producers, one per partition and broker), wait for the answer, repeat.
Figures are medians over --runs runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc


def _start_server(data_dir: Path, coordinators: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
         "--coordinators", str(coordinators)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if "listening on" in line:
            address = line.split("listening on ")[1].split(",")[0]
            return process, address
    raise RuntimeError("server did not start")


async def _wait_serving(stub: pb_grpc.DisklessCoordinatorAsyncStub) -> None:
    for _ in range(600):
        try:
            await stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=1)
            return
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.05)
    raise RuntimeError("server not serving")


async def create_load_topic(
    stub: pb_grpc.DisklessCoordinatorAsyncStub, prefix: str, partitions: int
) -> tuple[bytes, list[int]]:
    """A new topic of `partitions` partitions: (its id, the coordinators that hold them)."""
    topic_id = uuid.uuid4().bytes
    created = await stub.CreatePartitions(
        pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=f"{prefix}-{topic_id.hex()[:8]}",
                                                     num_partitions=partitions)]
        )
    )  # fmt: skip
    assert created.topics[0].error_code == pb.NONE, created
    found = await stub.FindCoordinator(
        pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(partitions))]
        )
    )
    return topic_id, sorted({p.coordinator_id for p in found.topics[0].partitions})


async def _broker(
    stub: pb_grpc.DisklessCoordinatorAsyncStub,
    broker_id: int,
    topic_id: bytes,
    partitions: int,
    batches: int,
    owners: list[int],
    stop_at: float,
    latencies: list[float],
) -> int:
    sequences = [0] * partitions
    committed = 0
    producer_base = broker_id * 1_000_000
    offset = broker_id * batches
    while time.monotonic() < stop_at:
        items = []
        for i in range(batches):
            partition = (offset + i) % partitions
            seq = sequences[partition]
            items.append(
                pb.CommitFileRequest.Batch(
                    magic=2,
                    topic_id=topic_id,
                    partition=partition,
                    byte_offset=i * 1000,
                    size=1000,
                    base_offset=0,
                    last_offset=9,
                    batch_max_timestamp=1_700_000_000_000,
                    timestamp_type=pb.CREATE_TIME,
                    producer_id=producer_base + partition,
                    producer_epoch=0,
                    base_sequence=seq,
                    last_sequence=seq + 9,
                )
            )
            sequences[partition] = seq + 10
        offset += batches
        request = pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=batches * 1000, uploader_broker_id=broker_id,
            owner_ids=owners, batches=items,
        )  # fmt: skip
        started = time.perf_counter()
        response = await stub.CommitFile(request, timeout=30)
        latencies.append(time.perf_counter() - started)
        assert all(b.error_code == pb.NONE for b in response.batches), response.batches[0]
        committed += 1
    return committed


async def _run_once(address: str, args: argparse.Namespace) -> dict[str, float]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        await _wait_serving(stub)
        topic_id, owners = await create_load_topic(stub, "load", args.partitions)
        latencies: list[float] = []
        cpu_before = os.times()
        started = time.monotonic()
        commits = await asyncio.gather(
            *(
                _broker(stub, b, topic_id, args.partitions, args.batches, owners, started + args.seconds, latencies)
                for b in range(args.brokers)
            )
        )
        elapsed = time.monotonic() - started
        del cpu_before
    latencies.sort()
    total = sum(commits)
    return {
        "commits_per_s": total / elapsed,
        "batches_per_s": total * args.batches / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="HOST:PORT of a running node (default: start one)")
    parser.add_argument("--coordinators", type=int, default=8, help="coordinators of the node started here")
    parser.add_argument("--brokers", type=int, default=16)
    parser.add_argument("--batches", type=int, default=100, help="batches per commit")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    server = None
    address = args.bootstrap
    with tempfile.TemporaryDirectory() as data_dir:
        if address is None:
            server, address = _start_server(Path(data_dir) / "data", args.coordinators)
        try:
            runs = []
            for run in range(args.runs):
                figures = asyncio.run(_run_once(address, args))
                runs.append(figures)
                print(
                    f"run {run + 1}/{args.runs}: " + ", ".join(f"{k}={v:.1f}" for k, v in figures.items()), flush=True
                )
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=60)
    print(
        f"median of {args.runs} runs on {platform.node()} ({os.cpu_count()} cores, {platform.python_version()}), "
        f"{args.brokers} brokers x {args.batches} batches/commit over {args.partitions} partitions:"
    )
    for key in runs[0]:
        print(f"  {key}: {statistics.median(r[key] for r in runs):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
