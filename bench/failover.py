"""The failover scenario of `coordinator-replicated`: kill -9 a coordinator's leader under a steady commit load.

Brokers commit `100x100` files open-loop (every 250 ms each, at most half the maximum rate measured in the
same run), idempotent, without retried duplicates (a duplicate answered once cannot be answered again as a
retried commit, DESIGN §4, and a commit whose answer a kill lost is retried). Then, `kills` times:

1. the leader of coordinator `kill % coordinators` (as the nodes describe it) is killed with SIGKILL;
2. at that moment a commit of one batch to a partition of that coordinator is sent through a routing client
   of its own (default deadline and backoff, as a broker's): the time until it is acknowledged is the
   failover time, what a broker sees. Beside it: when a surviving node led the coordinator again (the new
   leader says LEADER and ACTIVE), which is what etcd's session and the reload cost without the client;
3. the killed node is restarted on its data directory; the next kill waits until it is back in every
   coordinator's ISR, then until it leads again every coordinator it is the preferred leader of (the first
   replica: the auto leader rebalance, checked every `diskless.cluster.leader.imbalance.check.interval.ms`,
   which the run sets short), and the load has run `settle_s` more. The share of coordinators led by their
   preferred replica is taken when the node is back in sync and again once leadership returned.

At the end every acknowledged batch (the brokers' and the probes') must be found at its acknowledged offset, in
its file, by FindBatches from the leaders.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.acknowledged import AcknowledgedBatches, Verification, verify
from bench.cluster_views import Descriptions, leaders, out_of_sync_problem, preferred_leaders, preferred_share
from bench.coordinator_system import CALL_TIMEOUT_S, MESSAGE_MAX_BYTES, CoordinatorSystem
from bench.driver import LoadPlan, percentile_ms, running_load
from bench.replicated import ReplicatedCluster
from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb

FAILOVER_SHAPE = "100x100"
LEADER_READY_TIMEOUT_S = 60.0  # far above a session timeout plus a reload: past it the run fails
LEADER_RETURN_TIMEOUT_S = 120.0  # far above the leader-imbalance check interval the run sets
IN_SYNC_TIMEOUT_S = 180.0  # for a restarted node to load, catch up and rejoin every ISR
POLL_S = 0.05
PROBE_BROKER_ID = 1_000_000  # the probes' uploader, apart from the load's brokers
PROBE_BYTES = 1000

Progress = Callable[[str], None]


class FailoverError(Exception):
    """A failover did not complete within its bound (no new leader, no acknowledged commit, no rejoin)."""


@dataclass(frozen=True, slots=True)
class Kill:
    number: int  # from 1
    coordinator_id: int  # the coordinator whose leader was killed
    node_id: int  # the node killed
    coordinators_led: int  # coordinators the killed node led when it was killed
    leader_ready_s: float  # kill until a surviving node led the coordinator (LEADER, ACTIVE)
    commit_s: float  # kill until a commit sent at the kill was acknowledged (routing client, its retries)
    back_in_sync_s: float  # restart until the node was in every coordinator's ISR again
    leader_return_s: float  # restart until it led again every coordinator it is the preferred leader of
    preferred_share_in_sync: float  # coordinators led by their preferred replica, when it was back in sync
    preferred_share_returned: float  # the same once leadership returned


@dataclass(slots=True)
class FailoverOutcome:
    kills: list[Kill] = field(default_factory=list)
    load_target_commits_per_s: float = 0.0
    load_commits: int = 0
    load_batches_per_s: float = 0.0
    load_p50_ms: float = 0.0
    load_p99_ms: float = 0.0
    load_max_ms: float = 0.0
    verification: Verification = field(default_factory=Verification)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """What results.json keeps: every kill, and the distribution of each measured time."""
        return {
            "kills": [asdict(k) for k in self.kills],
            "commit_s": distribution([k.commit_s for k in self.kills]),
            "leader_ready_s": distribution([k.leader_ready_s for k in self.kills]),
            "back_in_sync_s": distribution([k.back_in_sync_s for k in self.kills]),
            "leader_return_s": distribution([k.leader_return_s for k in self.kills]),
            "preferred_share_in_sync": distribution([k.preferred_share_in_sync for k in self.kills]),
            "preferred_share_returned": distribution([k.preferred_share_returned for k in self.kills]),
            "load": {
                "shape": FAILOVER_SHAPE,
                "target_commits_per_s": round(self.load_target_commits_per_s, 1),
                "commits": self.load_commits,
                "batches_per_s": round(self.load_batches_per_s, 1),
                "p50_ms": round(self.load_p50_ms, 2),
                "p99_ms": round(self.load_p99_ms, 2),
                "max_ms": round(self.load_max_ms, 2),
            },
            "verification": asdict(self.verification),
            "seconds": round(self.seconds, 1),
        }


def distribution(values: Sequence[float]) -> dict[str, Any]:
    """Median, p90 (nearest rank), min, max and every value, in seconds; empty without values."""
    if not values:
        return {"count": 0, "median": None, "p90": None, "min": None, "max": None, "values": []}
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "median": round(statistics.median(ordered), 3),
        "p90": round(ordered[math.ceil(0.9 * len(ordered)) - 1], 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
        "values": [round(v, 3) for v in values],  # in kill order
    }


async def run_failover(
    cluster: ReplicatedCluster,
    system: CoordinatorSystem,
    plan: LoadPlan,
    kills: int,
    settle_s: float,
    progress: Progress,
) -> FailoverOutcome:
    """Kills a leader `kills` times under `plan`'s load; checks that nothing acknowledged was lost."""
    outcome = FailoverOutcome(load_target_commits_per_s=plan.target_commits_per_s)
    started = time.monotonic()
    topic = await system.create_topic("bench-failover", plan.shape.partitions)
    topic_id = system.topic_id(topic)
    probe_partitions = await _partition_of_each_coordinator(system.client, topic_id, plan.shape.partitions)
    acknowledged = system.acknowledged = AcknowledgedBatches()
    addresses = [node.address for node in cluster.nodes]
    try:
        async with (
            RoutingClient(addresses, message_max_bytes=MESSAGE_MAX_BYTES) as probe_client,
            running_load(system, topic, plan, seed=0, key_prefix="wal/failover") as load,
        ):
            await load.sleep(settle_s)
            begin = time.perf_counter()
            for number in range(1, kills + 1):
                coordinator_id = (number - 1) % len(probe_partitions)
                probe = _probe_request(topic_id, probe_partitions[coordinator_id], coordinator_id, number)
                kill = await _kill_leader(cluster, system, probe_client, probe, acknowledged, number, coordinator_id)
                outcome.kills.append(kill)
                progress(
                    f"{system.name:<22} failover {number}/{kills}: node {kill.node_id} (leading {kill.coordinators_led}"
                    f" coordinators) killed; coordinator {coordinator_id} led again after {kill.leader_ready_s:.2f} s,"
                    f" commits acknowledged after {kill.commit_s:.2f} s; back in every ISR "
                    f"{kill.back_in_sync_s:.1f} s after its restart, leading its preferred coordinators again "
                    f"{kill.leader_return_s:.1f} s after it ({kill.preferred_share_in_sync:.0%} -> "
                    f"{kill.preferred_share_returned:.0%} led by their preferred replica)"
                )
                await load.sleep(settle_s)
            end = time.perf_counter()
            commits = [e for e in load.commits if begin <= e.finished_at < end]
    finally:
        system.acknowledged = None
    latencies = [e.latency_s for e in commits]  # from the intended send: a commit held up by a kill counts its wait
    outcome.load_commits = len(commits)
    outcome.load_batches_per_s = sum(e.batches for e in commits) / (end - begin)
    outcome.load_p50_ms = percentile_ms(latencies, 0.5)
    outcome.load_p99_ms = percentile_ms(latencies, 0.99)
    outcome.load_max_ms = max(latencies, default=0.0) * 1000
    progress(f"{system.name:<22} failover: reading back {acknowledged.batches:,} acknowledged batches")
    outcome.verification = checked = await verify(system.client, topic_id, acknowledged)
    outcome.seconds = time.monotonic() - started
    verdict = "none lost" if not checked.lost else f"{checked.lost:,} LOST: {checked.lost_shown[0]}"
    progress(f"{system.name:<22} failover: {checked.found:,} batches found, {verdict}")
    return outcome


async def _kill_leader(
    cluster: ReplicatedCluster,
    system: CoordinatorSystem,
    probe_client: RoutingClient,
    probe: pb.CommitFileRequest,
    acknowledged: AcknowledgedBatches,
    number: int,
    coordinator_id: int,
) -> Kill:
    leaders = await _leaders(system, cluster)
    if coordinator_id not in leaders:
        raise FailoverError(f"kill {number}: coordinator {coordinator_id} has no leader before the kill: {leaders}")
    node_id = leaders[coordinator_id]
    await asyncio.to_thread(cluster.kill, node_id)
    killed_at = time.monotonic()
    committed = asyncio.create_task(_commit_probe(probe_client, probe, acknowledged))
    try:
        ready_at = await _wait_leader_ready(system, cluster, coordinator_id, node_id, killed_at)
        committed_at = await asyncio.wait_for(committed, CALL_TIMEOUT_S)
    finally:
        committed.cancel()
    await asyncio.to_thread(cluster.restart, node_id)
    restarted_at = time.monotonic()
    await _wait_back_in_sync(system, node_id, restarted_at)
    in_sync_at = time.monotonic()
    share_in_sync = preferred_share(await system.described())
    await _wait_leader_return(system, node_id, restarted_at)
    returned_at = time.monotonic()
    return Kill(
        number, coordinator_id, node_id, sum(1 for n in leaders.values() if n == node_id),
        ready_at - killed_at, committed_at - killed_at, in_sync_at - restarted_at, returned_at - restarted_at,
        share_in_sync, preferred_share(await _every_coordinator_led(system)),
    )  # fmt: skip


def _probe_request(topic_id: bytes, partition: int, coordinator_id: int, number: int) -> pb.CommitFileRequest:
    """One batch of a producer without an id (nothing of the load's idempotent producers) to the coordinator."""
    return pb.CommitFileRequest(
        object_key=f"wal/failover/probe-{number}", object_format=1, file_size=PROBE_BYTES,
        uploader_broker_id=PROBE_BROKER_ID, owner_ids=[coordinator_id],
        batches=[pb.CommitFileRequest.Batch(
            magic=2, topic_id=topic_id, partition=partition, byte_offset=0, size=PROBE_BYTES, base_offset=0,
            last_offset=0, batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, last_sequence=-1,
        )],
    )  # fmt: skip


async def _commit_probe(client: RoutingClient, probe: pb.CommitFileRequest, acknowledged: AcknowledgedBatches) -> float:
    """The monotonic time the probe was acknowledged; raises on anything else (after the client's retries)."""
    answer = (await client.commit_file(probe)).batches[0]
    if answer.error_code != pb.NONE:
        raise FailoverError(
            f"{probe.object_key}: {pb.ErrorCode.Name(answer.error_code)} {answer.error_message} "
            f"after the routing client's {client.deadline_ms} ms"
        )
    at = time.monotonic()
    acknowledged.add(probe.object_key, [(probe.batches[0].partition, answer.assigned_base_offset)])
    return at


async def _partition_of_each_coordinator(client: RoutingClient, topic_id: bytes, partitions: int) -> list[int]:
    """For coordinator c, the topic's first partition that c holds (every coordinator holds one)."""
    owners = await client.coordinators_of(topic_id, range(partitions))
    first: dict[int, int] = {}
    for partition, coordinator_id in enumerate(owners):
        first.setdefault(coordinator_id, partition)
    if sorted(first) != list(range(len(first))) or -1 in first:
        raise FailoverError(f"the failover topic's partitions are not on coordinators 0..N-1: {sorted(first)}")
    return [first[c] for c in range(len(first))]


async def _leaders(system: CoordinatorSystem, cluster: ReplicatedCluster) -> dict[int, int]:
    """Coordinator id -> the node that leads it and says so, among the nodes running."""
    return leaders(await system.described([n for n, node in enumerate(cluster.nodes) if node.running]))


async def _wait_leader_ready(
    system: CoordinatorSystem, cluster: ReplicatedCluster, coordinator_id: int, killed: int, killed_at: float
) -> float:
    """The monotonic time a surviving node first said it leads the coordinator and is ACTIVE."""
    while time.monotonic() - killed_at < LEADER_READY_TIMEOUT_S:
        leader = (await _leaders(system, cluster)).get(coordinator_id)
        if leader is not None and leader != killed:
            return time.monotonic()
        await asyncio.sleep(POLL_S)
    raise FailoverError(
        f"coordinator {coordinator_id}: no surviving node leads it {LEADER_READY_TIMEOUT_S:.0f} s after node "
        f"{killed} was killed"
    )


async def _wait_leader_return(system: CoordinatorSystem, node_id: int, restarted_at: float) -> None:
    """Until the restarted node leads (LEADER, ACTIVE) every coordinator whose preferred replica it is."""
    missing: list[int] = []
    while time.monotonic() - restarted_at < LEADER_RETURN_TIMEOUT_S:
        described = await system.described()
        led = leaders(described)
        missing = sorted(c for c, preferred in preferred_leaders(described).items()
                         if preferred == node_id and led.get(c) != node_id)  # fmt: skip
        if not missing:
            return
        await asyncio.sleep(POLL_S)
    raise FailoverError(
        f"node {node_id} does not lead coordinators {missing} (their preferred replica) "
        f"{LEADER_RETURN_TIMEOUT_S:.0f} s after its restart"
    )


async def _every_coordinator_led(system: CoordinatorSystem) -> Descriptions:
    """The nodes' descriptions once every coordinator has a leader serving (LEADER, ACTIVE): a preferred election
    of another coordinator may be under way when the restarted node's own ones are done."""
    deadline = time.monotonic() + LEADER_READY_TIMEOUT_S
    while True:
        described = await system.described()
        if len(leaders(described)) == len(preferred_leaders(described)) or time.monotonic() > deadline:
            return described
        await asyncio.sleep(POLL_S)


async def _wait_back_in_sync(system: CoordinatorSystem, node_id: int, restarted_at: float) -> None:
    """Until every node says the restarted node is in every coordinator's ISR (the node itself ACTIVE)."""
    problem = "not asked yet"
    while time.monotonic() - restarted_at < IN_SYNC_TIMEOUT_S:
        problem = out_of_sync_problem(await system.described(), node_id)
        if not problem:
            return
        await asyncio.sleep(POLL_S)
    raise FailoverError(f"node {node_id} not back in every ISR {IN_SYNC_TIMEOUT_S:.0f} s after its restart: {problem}")
