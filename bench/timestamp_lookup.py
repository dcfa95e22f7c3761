"""ListOffsets by timestamp on one partition of many batches, over gRPC (issue 37 item 5), and what lookups running
back to back cost the commits of the same coordinator.

    python -m bench.timestamp_lookup [--batches 1000000] [--lookups 300] [--commit-s 8] [--rounds 2] [--json]

Builds one coordinator's data dir with the generated-log machinery of bench/state.py: a metadata log of one topic
(partition 0 holding --batches batches of 10 records, 100 to a file, CreateTime timestamps 10 ms apart going up
and down by up to 25 ms, so that about a third of the batches raise the partition's max timestamp), replayed into
SQLite with the coordinator's own replay. Then it starts `diskless serve` on it and times ListOffsets, one call at
a time, for a timestamp near the head (1% in), in the middle, near the tail (99.9% in) and MAX_TIMESTAMP (-3):
each --lookups times after a few warm-up calls, every answer checked against the generator's. Last, --rounds
rounds of --commit-s seconds of commits (one CommitFile of 10 batches in flight at a time, to partition 0), each
round once alone, once with another process sending those four lookups back to back, and once with it sending
ListOffsets -1 (the high watermark: the same call with nothing to look up, the control), and once with it
sending ListOffsets -1 to a second, empty `diskless serve` process (the machine's control: the same client and
server work, none of it on the measured coordinator): commit p50/p99 and commits/s of each, and the ratios of the
p99s (medians over the rounds). On a machine with few cores the last control shows how much of the ratio is
only CPU shared with the two extra processes.

The state is built by the code it runs under, so the same file measures another checkout: with that checkout's
interpreter and the checkout first on the path (`cd OTHER && PYTHONPATH=OTHER OTHER/.venv/bin/python
THIS/bench/timestamp_lookup.py ...`), it uses only modules both have.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc

from bench.node_process import start_node, stop_node, wait_serving
from bench.state import _write_log, replay_into  # the generated-log machinery (one private helper, shared)
from coordinator.config.loading import load_settings
from coordinator.machine import records
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-0000000071de").bytes
TOPIC_NAME = "lookups"
BASE_TIMESTAMP_MS = 1_600_000_000_000
SPACING_MS = 10
JITTER_MS = 25
RECORDS_PER_BATCH = 10
BATCHES_PER_FILE = 100
BATCH_BYTES = 1000
WARM_UP_CALLS = 5
COMMIT_BATCHES = 10
MAX_TIMESTAMP = -3
LATEST = -1  # ListOffsets' high watermark: the same call with no timestamp to find, the control
POSITIONS = {"head": 0.01, "middle": 0.5, "tail": 0.999}

# Lookups back to back, in a process of its own (so that the committer's client loop does not share its CPU time
# with them), for a number of seconds; prints how many it made.
LOOKUP_LOOP = """
import sys, time, grpc
from protos import coordinator_pb2 as pb, coordinator_pb2_grpc as pb_grpc
address, topic_id, seconds, timestamps = sys.argv[1], bytes.fromhex(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
stub = pb_grpc.DisklessCoordinatorStub(grpc.insecure_channel(address))
requests = [pb.ListOffsetsRequest(timeout_ms=30000, topics=[pb.ListOffsetsRequest.Topic(topic_id=topic_id,
            partitions=[pb.ListOffsetsRequest.Partition(partition=0, timestamp=int(t))])]) for t in timestamps]
deadline, count = time.monotonic() + seconds, 0
while time.monotonic() < deadline:
    stub.ListOffsets(requests[count % len(requests)], timeout=60)
    count += 1
print(count)
"""


def batch_timestamps(count: int, seed: int) -> list[int]:
    """Each batch's max timestamp: its place in time, moved up or down by a little."""
    rng = random.Random(seed)
    return [BASE_TIMESTAMP_MS + i * SPACING_MS + rng.randint(-JITTER_MS, JITTER_MS) for i in range(count)]


def _frames(timestamps: list[int]) -> Iterator[list[records.MetadataRecord]]:
    yield [records.leader_change(1, 0)]
    yield [records.partition_created(p, TOPIC_ID, TOPIC_NAME, p) for p in range(2)]
    for file_id, first in enumerate(range(0, len(timestamps), BATCHES_PER_FILE)):
        chosen = timestamps[first : first + BATCHES_PER_FILE]
        committed = [
            records.CommittedBatch(
                first + i,
                0,
                i * BATCH_BYTES,
                BATCH_BYTES,
                (first + i) * RECORDS_PER_BATCH,
                (first + i + 1) * RECORDS_PER_BATCH - 1,
                timestamp,
                -1,
                -1,
                -1,
                -1,
                2,
                pb.CREATE_TIME,
            )
            for i, timestamp in enumerate(chosen)
        ]
        yield [
            records.file_committed(
                file_id,
                f"lookups/{file_id}",
                len(chosen) * BATCH_BYTES,
                1,
                [0],
                BASE_TIMESTAMP_MS + first * SPACING_MS,
                committed,
            )
        ]


def build(data_dir: Path, timestamps: list[int]) -> float:
    """Coordinator 0's log and state; returns the seconds the replay took."""
    settings = load_settings(None, {})
    directory = data_dir / "coordinator-0"
    directory.mkdir(parents=True)
    _write_log(directory, _frames(timestamps), settings.log_segment_bytes)
    started = time.monotonic()
    replay_into(directory / "state.sqlite", directory, 0, settings.replay_batch_operations)
    return time.monotonic() - started


def expected_answer(timestamps: list[int], timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) ListOffsets answers, by a scan of the generated batches."""
    if timestamp == MAX_TIMESTAMP:
        highest = max(timestamps)
        return highest, timestamps.index(highest) * RECORDS_PER_BATCH
    for index, found in enumerate(timestamps):
        if found >= timestamp:
            return found, index * RECORDS_PER_BATCH
    return -1, -1


def lookup_request(timestamp: int) -> pb.ListOffsetsRequest:
    return pb.ListOffsetsRequest(
        timeout_ms=30_000,
        topics=[
            pb.ListOffsetsRequest.Topic(
                topic_id=TOPIC_ID, partitions=[pb.ListOffsetsRequest.Partition(partition=0, timestamp=timestamp)]
            )
        ],
    )


def percentile_ms(latencies_s: list[float], fraction: float) -> float:
    ordered = sorted(latencies_s)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


async def time_lookups(
    stub: pb_grpc.DisklessCoordinatorAsyncStub, timestamp: int, expected: tuple[int, int], calls: int
) -> dict[str, float]:
    request = lookup_request(timestamp)
    latencies: list[float] = []
    for number in range(WARM_UP_CALLS + calls):
        started = time.perf_counter()
        response = await stub.ListOffsets(request, timeout=60)
        elapsed = time.perf_counter() - started
        found = response.topics[0].partitions[0]
        if found.error_code != pb.NONE or (found.timestamp, found.offset) != expected:
            raise AssertionError(f"ListOffsets({timestamp}) answered {found}, expected {expected}")
        if number >= WARM_UP_CALLS:
            latencies.append(elapsed)
    return {
        "median_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(percentile_ms(latencies, 0.99), 3),
    }


async def commit_round(stub: pb_grpc.DisklessCoordinatorAsyncStub, seconds: float, first_key: int) -> dict[str, Any]:
    """Commits one file at a time for `seconds`: how many, and their latencies."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    number = first_key
    while time.monotonic() < deadline:
        now_ms = int(time.time() * 1000)
        batches = [
            pb.CommitFileRequest.Batch(
                magic=2,
                topic_id=TOPIC_ID,
                partition=0,
                byte_offset=i * BATCH_BYTES,
                size=BATCH_BYTES,
                base_offset=0,
                last_offset=RECORDS_PER_BATCH - 1,
                batch_max_timestamp=now_ms,
                timestamp_type=pb.CREATE_TIME,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                last_sequence=-1,
            )
            for i in range(COMMIT_BATCHES)
        ]
        request = pb.CommitFileRequest(
            object_key=f"bench/{number}",
            object_format=1, file_size=COMMIT_BATCHES * BATCH_BYTES, uploader_broker_id=1,
            owner_ids=[0], batches=batches, timeout_ms=30_000,
        )  # fmt: skip
        number += 1
        started = time.perf_counter()
        response = await stub.CommitFile(request, timeout=60)
        latencies.append(time.perf_counter() - started)
        if any(b.error_code != pb.NONE for b in response.batches):
            raise AssertionError(f"a commit failed: {response.batches[0]}")
    return {
        "commits": len(latencies),
        "commits_per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(percentile_ms(latencies, 0.5), 2),
        "p99_ms": round(percentile_ms(latencies, 0.99), 2),
    }


async def measure(args: argparse.Namespace, directory: Path, timestamps: list[int]) -> dict[str, Any]:
    settings = {
        "diskless.server.read.processes": "0",
        "diskless.coordinator.snapshot.interval.bytes": "0",  # no snapshot copy of the state mid-measurement
        "diskless.coordinator.snapshot.interval.ms": "0",
    }
    probes = {name: timestamps[int(len(timestamps) * at)] for name, at in POSITIONS.items()}
    probes["max_timestamp"] = MAX_TIMESTAMP
    started = time.monotonic()
    process, address, _ = start_node(directory, 1, settings)
    (directory / "elsewhere").mkdir()
    elsewhere, elsewhere_address, _ = start_node(directory / "elsewhere", 1, settings)
    report: dict[str, Any] = {}
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub: pb_grpc.DisklessCoordinatorAsyncStub = pb_grpc.DisklessCoordinatorStub(channel)
            await wait_serving(stub)
            report["node_serving_s"] = round(time.monotonic() - started, 1)
            report["lookups"] = {
                name: await time_lookups(stub, t, expected_answer(timestamps, t), args.lookups)
                for name, t in probes.items()
            }
            rounds: list[dict[str, Any]] = []
            key = 0
            for _ in range(args.rounds):
                pair: dict[str, Any] = {}
                for how, target, looked_up in (
                    ("alone", address, None),
                    ("with_lookups", address, probes.values()),
                    ("with_latest", address, [LATEST]),
                    ("with_latest_elsewhere", elsewhere_address, [LATEST]),
                ):
                    pair[how] = await _commits_beside(stub, target, args.commit_s, key, looked_up)
                    key += pair[how]["commits"]
                rounds.append(pair)
            report["commit_rounds"] = rounds
    finally:
        stop_node(process)
        stop_node(elsewhere)
    medians = {how: statistics.median(r[how]["p99_ms"] for r in rounds) for how in rounds[0]}
    rates = {how: statistics.median(r[how]["commits_per_s"] for r in rounds) for how in rounds[0]}
    report["commit_p99_ms"] = {
        **medians,
        "ratio": round(medians["with_lookups"] / medians["alone"], 2),
        "ratio_latest": round(medians["with_latest"] / medians["alone"], 2),
        "ratio_latest_elsewhere": round(medians["with_latest_elsewhere"] / medians["alone"], 2),
        "ratio_lookups_to_elsewhere": round(medians["with_lookups"] / medians["with_latest_elsewhere"], 2),
    }
    report["commits_per_s"] = rates
    return report


async def _commits_beside(
    stub: pb_grpc.DisklessCoordinatorAsyncStub,
    address: str,
    seconds: float,
    first_key: int,
    looked_up: Iterable[int] | None,
) -> dict[str, Any]:
    """A commit round, alone (`looked_up` None) or beside a process sending ListOffsets of these back to back."""
    if looked_up is None:
        return await commit_round(stub, seconds, first_key)
    loop = subprocess.Popen(
        [sys.executable, "-c", LOOKUP_LOOP, address, TOPIC_ID.hex(), str(seconds + 1), *map(str, looked_up)],
        stdout=subprocess.PIPE,
        text=True,
    )
    await asyncio.sleep(0.5)  # its channel connected and calling
    figures = await commit_round(stub, seconds, first_key)
    output, _ = loop.communicate(timeout=120)
    figures["lookups_per_s"] = round(int(output.strip()) / (seconds + 1), 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=1_000_000, help="batches in the partition looked up")
    parser.add_argument("--lookups", type=int, default=300, help="timed calls per position")
    parser.add_argument("--commit-s", type=float, default=8.0, help="seconds of each commit round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of commits alone, then with lookups")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--json", action="store_true", help="print the JSON report only")
    args = parser.parse_args()
    timestamps = batch_timestamps(args.batches, args.seed)
    with tempfile.TemporaryDirectory(prefix="diskless-lookups-") as scratch:
        directory = Path(scratch)
        replay_s = build(directory / "data", timestamps)
        report = {
            "batches": args.batches,
            "replay_s": round(replay_s, 1),
            **asyncio.run(measure(args, directory, timestamps)),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.batches:,} batches in partition 0 (replayed in {report['replay_s']} s)")
    for name, figures in report["lookups"].items():
        print(f"  ListOffsets {name:>13}: median {figures['median_ms']:8.3f} ms, p99 {figures['p99_ms']:8.3f} ms")
    for number, pair in enumerate(report["commit_rounds"]):
        for how, figures in pair.items():
            extra = f", {figures['lookups_per_s']} lookups/s" if "lookups_per_s" in figures else ""
            print(
                f"  round {number} commits {how:>12}: {figures['commits_per_s']}/s, p50 {figures['p50_ms']} ms, "
                f"p99 {figures['p99_ms']} ms{extra}"
            )
    p99 = report["commit_p99_ms"]
    print(f"  commit p99 (median of rounds): {p99['alone']} ms alone, {p99['with_lookups']} ms with lookups "
          f"({p99['ratio']}x), {p99['with_latest']} ms with ListOffsets -1 ({p99['ratio_latest']}x), "
          f"{p99['with_latest_elsewhere']} ms with ListOffsets -1 to another process "
          f"({p99['ratio_latest_elsewhere']}x; lookups against it {p99['ratio_lookups_to_elsewhere']}x)")  # fmt: skip


if __name__ == "__main__":
    main()
