"""`python -m bench.coordinators_add`: a coordinator added to a 3-node cluster holding 8 (issue #39's third figure).

The run: a local etcd and three `diskless serve --etcd` nodes with 8 coordinators (replication factor 3), each
coordinator led with its full ISR. Then CreateCoordinators (count 9, expected 8) goes to node 0, as
`diskless coordinators add --count 1` sends it, and the clock runs from the call:

- every node describes 9 coordinators, the added one with one leader and every replica in its ISR (polled while
  the call runs);
- a commit to a partition of the added coordinator acknowledged (a 9-partition topic is created once every node
  serves it; the commit is sent to each node until its leader acknowledges it);
- the call answered (the count in etcd, the added coordinator placed, node 0's replica loaded, then node 0's reader
  processes started again over 9 coordinators).

Then 100 new topics of one partition each are created and FindCoordinator counts their partitions per coordinator.

Writes results.json and results.md under --out (default bench/results/coordinators_add).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.replicated import ReplicatedCluster
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

COORDINATORS = 8
NEW_TOPICS = 100
POLL_S = 0.02
WAIT_MAX_S = 120.0
CALL_TIMEOUT_S = 10.0
OUT_DEFAULT = Path("bench/results/coordinators_add")


@dataclass(slots=True)
class Outcome:
    about: str
    answered_s: float = 0.0  # CreateCoordinators returned
    every_node_serves_s: float = 0.0  # every node: 9 coordinators, the added one led with its full ISR
    first_commit_s: float = 0.0  # a commit to the added coordinator acknowledged (topic creation included)
    added_replicas: list[int] = field(default_factory=list)
    added_leader: int = -1
    topics_per_coordinator: dict[int, int] = field(default_factory=dict)


async def _wait(what: str, probe: Any) -> Any:
    deadline = time.perf_counter() + WAIT_MAX_S
    while True:
        try:
            found = await probe()
        except grpc.aio.AioRpcError:
            found = None
        if found:
            return found
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what}: not within {WAIT_MAX_S:.0f} s")
        await asyncio.sleep(POLL_S)


async def _led_in_sync(
    stubs: list[pb_grpc.DisklessCoordinatorAsyncStub], count: int
) -> pb.CoordinatorDescription | None:
    """The leader's description of coordinator count-1 once every node describes `count` coordinators and it has one
    leader serving with every replica in its ISR; else None."""
    leaders = []
    for stub in stubs:
        answer = await stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=CALL_TIMEOUT_S)
        if len(answer.coordinators) != count:
            return None
        last = next(c for c in answer.coordinators if c.coordinator_id == count - 1)
        if last.role == "LEADER" and last.state == "ACTIVE" and last.error_code == pb.NONE:
            leaders.append(last)
    if len(leaders) != 1 or sorted(leaders[0].isr) != sorted(leaders[0].replica_node_ids):
        return None
    return leaders[0]


async def _create(stub: pb_grpc.DisklessCoordinatorAsyncStub, name: str, partitions: int) -> bytes:
    topic_id = uuid.uuid4().bytes
    request = pb.CreatePartitionsRequest(
        topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
    )

    async def created() -> bool:
        answer = await stub.CreatePartitions(request, timeout=CALL_TIMEOUT_S)
        return answer.topics[0].error_code == pb.NONE

    await _wait(f"topic {name} created", created)
    return topic_id


async def _coordinators_of(stub: pb_grpc.DisklessCoordinatorAsyncStub, topic_id: bytes, partitions: int) -> list[int]:
    topic = pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(partitions))
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(topics=[topic]), timeout=CALL_TIMEOUT_S)
    return [p.coordinator_id for p in found.topics[0].partitions]


async def _committed(stubs: list[pb_grpc.DisklessCoordinatorAsyncStub], topic_id: bytes, partition: int) -> bool:
    """One batch committed to the partition through whichever node leads its coordinator."""
    for stub in stubs:
        request = pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100, uploader_broker_id=1,
            owner_ids=[COORDINATORS],
            batches=[pb.CommitFileRequest.Batch(
                topic_id=topic_id, partition=partition, byte_offset=0, size=100, base_offset=0, last_offset=0,
                magic=2, timestamp_type=pb.CREATE_TIME, batch_max_timestamp=int(time.time() * 1000), producer_id=-1,
                producer_epoch=-1, base_sequence=-1, last_sequence=-1,
            )],
        )  # fmt: skip
        answer = await stub.CommitFile(request, timeout=CALL_TIMEOUT_S)
        if answer.batches and answer.batches[0].error_code == pb.NONE:
            return True
    return False


async def measure(cluster: ReplicatedCluster, about: str) -> Outcome:
    outcome = Outcome(about)
    channels = [grpc.aio.insecure_channel(node.address) for node in cluster.nodes]
    stubs = [pb_grpc.DisklessCoordinatorStub(channel) for channel in channels]
    try:
        await _wait("the cluster formed: every coordinator led with its full ISR", lambda: _all_led(stubs))
        started = time.perf_counter()
        call = asyncio.ensure_future(
            admin_pb2_grpc.CoordinatorAdminStub(channels[0]).CreateCoordinators(
                admin.CreateCoordinatorsRequest(count=COORDINATORS + 1, expected_count=COORDINATORS), timeout=120
            )
        )
        call.add_done_callback(lambda _: setattr(outcome, "answered_s", round(time.perf_counter() - started, 3)))
        # Measured from the call's start, not its answer: the call also waits for node 0's reader processes to start
        # again over 9 coordinators, which commits do not need.
        leader = await _wait("every node serves the added coordinator", lambda: _led_in_sync(stubs, COORDINATORS + 1))
        outcome.every_node_serves_s = round(time.perf_counter() - started, 3)
        outcome.added_replicas, outcome.added_leader = list(leader.replica_node_ids), leader.node_id
        probe = await _create(stubs[0], "probe-added", COORDINATORS + 1)
        partition = (await _coordinators_of(stubs[0], probe, COORDINATORS + 1)).index(COORDINATORS)
        await _wait("a commit to the added coordinator", lambda: _committed(stubs, probe, partition))
        outcome.first_commit_s = round(time.perf_counter() - started, 3)
        answer = await call
        if answer.error_code != pb.NONE:
            raise RuntimeError(f"CreateCoordinators: {pb.ErrorCode.Name(answer.error_code)} {answer.error_message}")
        placed: Counter[int] = Counter()
        for i in range(NEW_TOPICS):
            topic_id = await _create(stubs[i % len(stubs)], f"after-add-{i:03}", 1)
            placed.update(await _coordinators_of(stubs[(i + 1) % len(stubs)], topic_id, 1))
        outcome.topics_per_coordinator = {c: placed.get(c, 0) for c in range(COORDINATORS + 1)}
    finally:
        for channel in channels:
            await channel.close()
    return outcome


async def _all_led(stubs: list[pb_grpc.DisklessCoordinatorAsyncStub]) -> bool:
    """Every node describes the formation's coordinators, each led by one node with its full ISR."""
    described = [await s.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=CALL_TIMEOUT_S) for s in stubs]
    for c in range(COORDINATORS):
        leaders = [
            d for answer in described for d in answer.coordinators if d.coordinator_id == c and d.role == "LEADER"
        ]
        if len(leaders) != 1 or sorted(leaders[0].isr) != sorted(leaders[0].replica_node_ids):
            return False
    return True


def markdown(outcome: Outcome) -> str:
    counts = outcome.topics_per_coordinator
    return "\n".join([
        "# A coordinator added to a 3-node cluster holding 8",
        "",
        outcome.about + " (a loaded machine: other work shares its cores)",
        "",
        "| from CreateCoordinators (count 9, expected 8) sent | seconds |",
        "|---|---:|",
        f"| every node serves 9, the added one led with its full ISR | {outcome.every_node_serves_s:.3f} |",
        f"| a commit to the added coordinator acknowledged (a topic created first) | {outcome.first_commit_s:.3f} |",
        f"| the call answered (node 0's reader processes started again too) | {outcome.answered_s:.3f} |",
        "",
        f"The added coordinator's replicas: nodes {outcome.added_replicas}, led by node {outcome.added_leader}.",
        "",
        f"{NEW_TOPICS} new topics of one partition, per coordinator:",
        "",
        "| coordinator | " + " | ".join(str(c) for c in counts) + " |",
        "|---|" + "---:|" * len(counts),
        "| partitions | " + " | ".join(str(n) for n in counts.values()) + " |",
    ]) + "\n"  # fmt: skip


def run(args: argparse.Namespace) -> int:
    about = (
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}; load average "
        f"{os.getloadavg()[0]:.2f} at the start; 3 nodes, {COORDINATORS} coordinators then {COORDINATORS + 1}, "
        "replication factor 3"
    )
    with tempfile.TemporaryDirectory(prefix="diskless-coordinators-add-") as scratch:
        cluster = ReplicatedCluster(Path(scratch), COORDINATORS, {}, install=not args.no_install)
        cluster.start()
        try:
            outcome = asyncio.run(measure(cluster, about))
        finally:
            cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(asdict(outcome), indent=2, sort_keys=True) + "\n")
    text = markdown(outcome)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coordinators_add", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"output directory (default {OUT_DEFAULT})")
    parser.add_argument("--no-install", action="store_true", help="do not apt-get install etcd if it is missing")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
