"""`python -m bench.move_partition`: a partition of `--batches` batches moved between coordinators under steady
commits to it and to another partition (issue #39 item 3's figure; design §5a).

The run: one `diskless serve` node of 4 coordinators; a topic of two partitions on two of them; partition 0 loaded
with `--batches` one-record batches (files of `LOAD_FILE_BATCHES`), then two committers, one per partition, each an
idempotent producer committing one batch at a time through the routing client (which retries NOT_COORDINATOR
and re-finds the coordinator, as a broker does) with `COMMIT_PAUSE_S` between commits. After `--baseline-s` of that,
`diskless move-partition --wait` moves partition 0 to the coordinator holding neither partition. Reported: the move's
time (the command's start to its end), the longest a commit to the moving partition waited (from its first try to
its acknowledgement, retries included) among those in flight during the move, and the other partition's commit p99
before the move and during it. The acknowledged batches of the moving partition are then read back at the target
and must all be there at their offsets.

Writes results-<batches>.json under --out (default bench/results/move_partition); --json prints the result.
Run it with another checkout's interpreter (`/work/main/.venv/bin/python bench/move_partition.py`) to measure that
checkout's server: only `bench.node_process` and the protos are imported from the running checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

from bench.node_process import start_node, stop_node, wait_serving
from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

OUT_DEFAULT = Path("bench/results/move_partition")
COORDINATORS = 4
LOAD_FILE_BATCHES = 1000  # batches per loading CommitFile
COMMIT_PAUSE_S = 0.01  # between one committer's commits
COMMIT_DEADLINE_MS = 600_000  # a commit to the moving partition may wait the whole move (before the catch-up)
COMMIT_TRIES = 5  # a committer's tries of one batch before it gives it up (counted as an error)


@dataclass
class Committed:
    """One committer's acknowledged commits: (first try, wait in s, base offset)."""

    partition: int
    acknowledged: list[tuple[float, float, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MoveFigure:
    batches: int
    chunk_batches: int
    tail_batches: int | None  # None: the server's default (or no such setting: a checkout before the catch-up)
    load_s: float
    move_s: float
    longest_wait_moving_ms: float
    moving_commits_during: int
    other_p99_before_ms: float
    other_p99_during_ms: float
    other_commits_before: int
    other_commits_during: int
    commit_errors: int
    acknowledged_found: bool
    final_step: str
    machine: str


def batch(
    topic_id: bytes, partition: int, byte_offset: int, size: int, producer: int, sequence: int
) -> pb.CommitFileRequest.Batch:
    return pb.CommitFileRequest.Batch(
        topic_id=topic_id, partition=partition, byte_offset=byte_offset, size=size, base_offset=0, last_offset=0,
        batch_max_timestamp=int(time.time() * 1000), magic=2, timestamp_type=pb.CREATE_TIME, producer_id=producer,
        producer_epoch=0 if producer >= 0 else -1, base_sequence=sequence, last_sequence=sequence,
    )  # fmt: skip


def percentile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1) if ordered else float("nan")


async def coordinator_of(stub: pb_grpc.DisklessCoordinatorAsyncStub, topic_id: bytes, partition: int) -> int:
    request = pb.FindCoordinatorRequest(
        topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[partition])]
    )
    found = await stub.FindCoordinator(request, timeout=30)
    return int(found.topics[0].partitions[0].coordinator_id)


async def owners_now(stub: pb_grpc.DisklessCoordinatorAsyncStub, topic_id: bytes) -> list[int]:
    """The coordinators of the topic's two partitions now: a broker's WAL file names them as its owners."""
    return sorted({await coordinator_of(stub, topic_id, p) for p in (0, 1)})


async def commit_steadily(
    address: str, stub: pb_grpc.DisklessCoordinatorAsyncStub, topic_id: bytes, partition: int, stop: asyncio.Event,
    into: Committed,
) -> None:  # fmt: skip
    """One idempotent producer's batches, one at a time, until `stop`. A file names the owners FindCoordinator gave
    when the producer last looked (as a broker's); refused (a coordinator the file does not name), it looks again."""
    producer, sequence = 9000 + partition, 0
    owners = await owners_now(stub, topic_id)
    async with RoutingClient(address, deadline_ms=COMMIT_DEADLINE_MS) as client:
        while not stop.is_set():
            first_try = time.monotonic()
            for _ in range(COMMIT_TRIES):
                request = pb.CommitFileRequest(
                    object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100, uploader_broker_id=1,
                    owner_ids=owners, batches=[batch(topic_id, partition, 0, 100, producer, sequence)],
                )  # fmt: skip
                answer = (await client.commit_file(request)).batches[0]
                if answer.error_code == pb.NONE:
                    into.acknowledged.append((first_try, time.monotonic() - first_try, answer.assigned_base_offset))
                    break
                into.errors.append(f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message[:100]}")
                owners = await owners_now(stub, topic_id)
            sequence += 1
            await asyncio.sleep(COMMIT_PAUSE_S)


async def load(stub: pb_grpc.DisklessCoordinatorAsyncStub, topic_id: bytes, batches: int, owner: int) -> None:
    for file in range(-(-batches // LOAD_FILE_BATCHES)):
        count = min(LOAD_FILE_BATCHES, batches - file * LOAD_FILE_BATCHES)
        request = pb.CommitFileRequest(
            object_key=f"wal/load/{file}", object_format=1, file_size=count * 10, uploader_broker_id=1,
            owner_ids=[owner], batches=[batch(topic_id, 0, i * 10, 10, -1, -1) for i in range(count)],
        )  # fmt: skip
        answer = await stub.CommitFile(request, timeout=120)
        assert all(b.error_code == pb.NONE for b in answer.batches), answer.batches[0]


async def found_at_target(stub: pb_grpc.DisklessCoordinatorAsyncStub, topic_id: bytes, offsets: list[int]) -> bool:
    """Every acknowledged offset is a batch's base offset at the partition's coordinator now."""
    wanted, offset = set(offsets), min(offsets, default=0)
    seen: set[int] = set()
    while wanted - seen:
        request = pb.FindBatchesRequest(
            topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
                pb.FindBatchesRequest.Partition(partition=0, offset=offset, max_partition_fetch_bytes=1 << 30)])],
            max_batches_per_partition=10_000,
        )  # fmt: skip
        found = (await stub.FindBatches(request, timeout=60)).topics[0].partitions[0]
        if found.error_code != pb.NONE or not found.batches:
            return False
        seen.update(b.base_offset for b in found.batches)
        offset = found.batches[-1].last_offset + 1
    return True


async def measure(args: argparse.Namespace, work: Path) -> MoveFigure:
    settings = {
        "diskless.coordinator.commit.max.batches": str(max(LOAD_FILE_BATCHES, 1000)),
        "diskless.partition.move.chunk.batches": str(args.chunk_batches),
    }
    if args.tail_batches is not None:
        settings["diskless.partition.move.freeze.tail.batches"] = str(args.tail_batches)
    process, address, log_path = start_node(work, COORDINATORS, settings)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub: pb_grpc.DisklessCoordinatorAsyncStub = pb_grpc.DisklessCoordinatorStub(channel)
            await wait_serving(stub)
            topic_id = uuid.uuid4().bytes
            created = await stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[
                pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=f"move-{topic_id.hex()[:8]}", num_partitions=2)
            ]), timeout=30)  # fmt: skip
            assert created.topics[0].error_code == pb.NONE, created
            source, other = await coordinator_of(stub, topic_id, 0), await coordinator_of(stub, topic_id, 1)
            target = next(c for c in range(COORDINATORS) if c not in (source, other))
            started = time.monotonic()
            await load(stub, topic_id, args.batches, source)
            load_s = time.monotonic() - started
            print(f"loaded {args.batches} batches in {load_s:.1f} s", file=sys.stderr, flush=True)

            stop = asyncio.Event()
            moving, steady = Committed(0), Committed(1)
            committers = [
                asyncio.ensure_future(commit_steadily(address, stub, topic_id, 0, stop, moving)),
                asyncio.ensure_future(commit_steadily(address, stub, topic_id, 1, stop, steady)),
            ]
            await asyncio.sleep(args.baseline_s)
            move_start = time.monotonic()
            command = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "coordinator", "move-partition", "--bootstrap", address, "--topic-id",
                topic_id.hex(), "--partition", "0", "--to", str(target), "--wait", "--json",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await command.communicate()
            move_end = time.monotonic()
            await asyncio.sleep(args.settle_s)
            stop.set()
            await asyncio.gather(*committers)
            if command.returncode != 0:
                raise RuntimeError(f"move-partition failed: {err.decode()[-2000:]}")
            in_move = [w for t, w, _ in moving.acknowledged if move_start <= t + w and t <= move_end]
            before = [w for t, w, _ in steady.acknowledged if t < move_start]
            during = [w for t, w, _ in steady.acknowledged if move_start <= t <= move_end]
            found = await found_at_target(stub, topic_id, [o for _, _, o in moving.acknowledged])
            return MoveFigure(
                batches=args.batches, chunk_batches=args.chunk_batches, tail_batches=args.tail_batches,
                load_s=round(load_s, 1), move_s=round(move_end - move_start, 2),
                longest_wait_moving_ms=round(max(in_move, default=0.0) * 1000, 1), moving_commits_during=len(in_move),
                other_p99_before_ms=percentile_ms(before, 0.99), other_p99_during_ms=percentile_ms(during, 0.99),
                other_commits_before=len(before), other_commits_during=len(during),
                commit_errors=len(moving.errors) + len(steady.errors), acknowledged_found=found,
                final_step=str(json.loads(out)["step"]),
                machine=f"{platform.node()} {os.cpu_count()} cpus, loaded (shared with other work)",
            )  # fmt: skip
    except BaseException:
        print(log_path.read_text(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        stop_node(process)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.move_partition", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=100_000, help="batches in the moved partition at the start")
    parser.add_argument("--chunk-batches", type=int, default=1000, help="diskless.partition.move.chunk.batches")
    parser.add_argument(
        "--tail-batches",
        type=int,
        default=None,
        help="diskless.partition.move.freeze.tail.batches (default: the server's)",
    )
    parser.add_argument("--baseline-s", type=float, default=5.0, help="commits before the move (the 'before' window)")
    parser.add_argument("--settle-s", type=float, default=3.0, help="commits after the move ends")
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"output directory (default {OUT_DEFAULT})")
    parser.add_argument("--label", default="", help="added to the results file's name (e.g. main)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="move-partition-") as directory:
        figure = asyncio.run(measure(args, Path(directory)))
    document = asdict(figure)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = f"-{args.label}" if args.label else ""
    (args.out / f"results-{args.batches}{suffix}.json").write_text(
        json.dumps(document, indent=2, sort_keys=True) + "\n"
    )
    if args.json:
        print(json.dumps(document, sort_keys=True))
    else:
        print(
            f"{figure.batches} batches moved in {figure.move_s} s; longest commit wait on it "
            f"{figure.longest_wait_moving_ms} ms; other partition p99 {figure.other_p99_before_ms} ms before, "
            f"{figure.other_p99_during_ms} ms during"
        )
    return 0 if figure.acknowledged_found and figure.final_step == "moved out" else 1


if __name__ == "__main__":
    raise SystemExit(main())
