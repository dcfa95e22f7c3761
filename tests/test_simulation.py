"""A cluster in one process on one simulated clock (tests/simulation/): seeded randomized runs, and the replication's
rules one scenario at a time (a follower cut off and back, a deposed leader's tail truncated, a follower past the
leader's log start installing a snapshot, the high watermark waiting for the in-sync replicas, DescribeFiles while a
commit waits for them).

A failure names its seed; `DISKLESS_SIM_SEEDS=7 DISKLESS_SIM_STEPS=500 pytest tests/test_simulation.py -k seeded`
replays it exactly (`DISKLESS_SIM_SEEDS=1-200` runs a range).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from coordinator.client.request_parts import merge_file_answers
from coordinator.client.routes import RoutingTable
from coordinator.cluster.assignment import CoordinatorAssignment
from coordinator.machine.topic_names import coordinator_for_new_partition
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from tests.harness import batch, find_batches_request
from tests.lanes import sized
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.loop import SimulatedLoop
from tests.simulation.workload import TOPIC_ID, Acknowledged, RunReport, SimulationFailure, Workload

T = TypeVar("T")
FAST_SEEDS = (1, 2, 3)[: sized(3, 2)]  # the fast lane's third seeded run is test_a_seed_replays_exactly's two
FAST_STEPS = 300
SLOW_SEEDS = tuple(range(100, 110))
SLOW_STEPS = 1000


def _seeds(default: tuple[int, ...]) -> tuple[int, ...]:
    text = os.environ.get("DISKLESS_SIM_SEEDS")
    if not text:
        return default
    first, _, last = text.partition("-")
    return tuple(range(int(first), int(last or first) + 1))


def _steps(default: int) -> int:
    return int(os.environ.get("DISKLESS_SIM_STEPS", default))


def simulate(root: Path, seed: int, work: Callable[[SimCluster], Coroutine[Any, Any, T]], **cluster: Any) -> T:
    """Runs `work` on a fresh cluster, on a simulated loop of its own; every node is crashed at the end."""
    loop = SimulatedLoop()

    async def run() -> T:
        sim = SimCluster(root, loop, seed, **cluster)
        try:
            return await work(sim)
        finally:
            await sim.close()

    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def _run(root: Path, seed: int, steps: int) -> RunReport:
    report = simulate(root, seed, lambda sim: Workload(sim, seed, steps).run())
    print(
        f"seed {seed}: {report.steps} steps in {report.wall_s:.2f} s ({report.steps_per_s:.0f} steps/s, "
        f"{report.simulated_s:.0f} s simulated), {report.acknowledged} batches acknowledged, {report.refused} refused"
    )
    return report


# ---------------------------------------------------------------------------- seeded runs


@pytest.mark.parametrize("seed", _seeds(FAST_SEEDS))
def test_seeded_run_loses_no_acknowledged_batch_and_replicas_converge(tmp_path: Path, seed: int) -> None:
    report = _run(tmp_path, seed, _steps(FAST_STEPS))
    assert report.acknowledged > 0, "the run acknowledged nothing: it checked nothing"


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_seeded_long_run_loses_no_acknowledged_batch_and_replicas_converge(tmp_path: Path, seed: int) -> None:
    report = _run(tmp_path, seed, SLOW_STEPS)
    assert report.acknowledged > 0, "the run acknowledged nothing: it checked nothing"


def test_a_seed_replays_exactly(tmp_path: Path) -> None:
    steps = sized(150, 100)
    first = _run(tmp_path / "first", 11, steps)
    second = _run(tmp_path / "second", 11, steps)
    assert first.trace == second.trace
    assert any(line.startswith("commit ") for line in first.trace), "the trace holds no commit"


def test_the_checks_fail_on_an_offset_acknowledged_twice_or_by_two_leaders_of_one_epoch(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        workload = Workload(sim, 5, 0)
        workload._acknowledge(Acknowledged(0, 1, 7, "wal/a", 0, 3, 1))
        with pytest.raises(SimulationFailure, match=r"seed 5.*acknowledged twice"):
            workload._acknowledge(Acknowledged(0, 1, 7, "wal/b", 0, 3, 2))
        with pytest.raises(SimulationFailure, match="nodes 0 and 2 both acknowledged in leader epoch 3"):
            workload._acknowledge(Acknowledged(1, 1, 9, "wal/c", 2, 3, 2))

    simulate(tmp_path, 5, work)


def test_the_end_check_fails_on_a_batch_that_is_not_where_it_was_acknowledged(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        workload = Workload(sim, 6, 5)
        await workload.run()
        acked = next(iter(workload.acknowledged.values()))
        moved = Acknowledged(acked.partition, acked.coordinator_id, acked.offset, "wal/elsewhere", 0, 1, 0)
        with pytest.raises(SimulationFailure, match="lost or moved"):
            workload._check_found(moved, required=True)

    simulate(tmp_path, 6, work)


# ---------------------------------------------------------------------------- replication, one rule at a time


async def _topic(sim: SimCluster) -> None:
    node = sim.running()[0].node
    assert node is not None
    topic = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC_ID, name="orders", num_partitions=4)
    answer = await node.router.create_partitions(pb.CreatePartitionsRequest(topics=[topic], timeout_ms=5000))
    assert answer.topics[0].error_code == pb.NONE, answer
    await asyncio.sleep(1)


def _partition_of(sim: SimCluster, coordinator_id: int) -> int:
    return next(p for p in range(64) if coordinator_for_new_partition(TOPIC_ID, p, sim.coordinators) == coordinator_id)


async def _commit(sim_node: SimNode, partition: int, key: str, timeout_ms: int = 3000) -> int:
    """The offset acknowledged, or the error code's negative."""
    assert sim_node.node is not None
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=100, uploader_broker_id=1,
        owner_ids=[sim_node.node.router.catalog.coordinator_of(TOPIC_ID, partition) or 0],
        batches=[batch(TOPIC_ID, partition)], timeout_ms=timeout_ms,
    )  # fmt: skip
    result = (await sim_node.node.router.commit_file(request)).batches[0]
    return result.assigned_base_offset if result.error_code == pb.NONE else -result.error_code


async def _assignment(sim: SimCluster, coordinator_id: int) -> CoordinatorAssignment:
    kv = sim.etcd.get(f"/diskless/coordinators/{coordinator_id}")
    assert kv is not None
    return CoordinatorAssignment.from_json(kv.value)


async def _until(what: str, condition: Callable[[], Awaitable[bool] | bool], within_s: float = 60.0) -> None:
    """Lets simulated time pass until `condition` holds; fails after `within_s` of it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        value = condition()
        if value if isinstance(value, bool) else await value:
            return
        assert loop.time() < deadline, f"not within {within_s} s of simulated time: {what}"
        await asyncio.sleep(0.1)


def _leader(sim: SimCluster, coordinator_id: int) -> SimNode:
    leaders = [n for n in sim.leaders(coordinator_id) if not n.paused]
    assert len(leaders) == 1, f"coordinator {coordinator_id}: leaders {[n.node_id for n in leaders]}"
    return leaders[0]


def test_a_follower_cut_off_leaves_the_isr_writes_go_on_and_it_rejoins_once_caught_up(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        follower = next(n for n in sim.nodes if n.node_id != leader.node_id)
        partition = _partition_of(sim, 0)
        sim.network.partition(leader.address, follower.address)
        lag_ms = leader.settings.replica_lag_time_max_ms
        for i in range(3):
            assert await _commit(leader, partition, f"wal/cut/{i}", timeout_ms=lag_ms * 3) == i
        assert follower.node_id not in (await _assignment(sim, 0)).isr
        follower_end = follower.shard(0).statistics().log_end_offset
        assert follower_end < leader.shard(0).statistics().log_end_offset
        sim.network.heal()

        async def back_in_sync() -> bool:
            return follower.node_id in (await _assignment(sim, 0)).isr

        await _until("the follower is back in the ISR", back_in_sync)
        assert follower.shard(0).statistics().log_end_offset == leader.shard(0).statistics().log_end_offset

    simulate(tmp_path, 21, work)


def test_with_every_follower_cut_off_nothing_is_acknowledged_until_they_are_back(tmp_path: Path) -> None:
    """Kafka's rule: the ISR shrinks to the leader, and below min.insync.replicas a write is refused, not lost."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        assert await _commit(leader, partition, "wal/isr/0") == 0
        for other in sim.nodes:
            if other is not leader:
                sim.network.partition(leader.address, other.address)
        refused = await _commit(leader, partition, "wal/isr/1", timeout_ms=60_000)
        assert -refused in (pb.NOT_ENOUGH_REPLICAS, pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND), refused
        assert (await _assignment(sim, 0)).isr == (leader.node_id,)
        assert -(await _commit(leader, partition, "wal/isr/2")) == pb.NOT_ENOUGH_REPLICAS
        sim.network.heal()

        async def in_sync_again() -> bool:
            return len((await _assignment(sim, 0)).isr) >= leader.settings.min_insync_replicas

        await _until("the followers are back in the ISR", in_sync_again)
        assert await _commit(leader, partition, "wal/isr/3") >= 1

    simulate(tmp_path, 22, work)


def test_a_deposed_leader_truncates_what_it_appended_alone_at_the_epoch_boundary(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        old = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        assert await _commit(old, partition, "wal/trunc/0") == 0
        sim.pause(old.node_id)  # cut off from the followers and etcd: its appends stay its own
        alone = asyncio.ensure_future(_commit(old, partition, "wal/trunc/alone", timeout_ms=60_000))
        await asyncio.sleep(0.5)
        appended_alone = old.shard(0).statistics().log_end_offset
        await _until("another node leads", lambda: any(n is not old for n in sim.leaders(0)))
        new = next(n for n in sim.leaders(0) if n is not old)
        assert new.shard(0).leader_epoch > 1
        assert await _commit(new, partition, "wal/trunc/1") == 1
        assert await alone < 0, "the deposed leader acknowledged a write it holds alone"
        sim.resume_all()
        await _until("the old leader follows and caught up", lambda: (
            not old.shard(0).leads
            and old.shard(0).statistics().log_end_offset == new.shard(0).statistics().log_end_offset
        ))  # fmt: skip
        assert old.shard(0).statistics().log_end_offset <= max(appended_alone, new.shard(0).statistics().log_end_offset)
        assert new.node is not None
        answer = new.node.router.find_batches(find_batches_request(TOPIC_ID, partition, 0))
        found = pb.FindBatchesResponse.FromString(answer).topics[0].partitions[0]
        assert [b.object_key for b in found.batches] == ["wal/trunc/0", "wal/trunc/1"]

    simulate(tmp_path, 23, work)


def test_a_follower_behind_the_leaders_log_start_installs_the_leaders_snapshot(tmp_path: Path) -> None:
    settings = {
        "diskless.coordinator.log.segment.bytes": "4096",
        "diskless.coordinator.snapshot.interval.bytes": "0",
        "diskless.coordinator.snapshot.interval.ms": "0",
    }

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        behind = next(n for n in sim.nodes if n is not leader)
        partition = _partition_of(sim, 0)
        await sim.crash(behind.node_id)
        for i in range(120):
            assert await _commit(leader, partition, f"wal/snap/{i:03}") == i
        for _ in range(2):  # the snapshots kept: the log below the oldest of them goes
            await leader.shard(0).create_snapshot()
        log_start = leader.shard(0).statistics().log_start_offset
        assert log_start > 0, "the leader kept its whole log: nothing to test"
        await sim.start(behind.node_id)
        await _until("the follower caught up", lambda: (
            behind.up and behind.shard(0).statistics().log_end_offset == leader.shard(0).statistics().log_end_offset
        ))  # fmt: skip
        assert behind.shard(0).statistics().log_start_offset >= log_start
        assert behind.shard(0).statistics().applied_offset == leader.shard(0).statistics().applied_offset

    simulate(tmp_path, 24, work, settings=settings)


def test_the_in_memory_cluster_keeps_its_assignment_as_etcd_does(tmp_path: Path) -> None:
    """The simulation's etcd holds what a real one would: the JSON the etcd store writes, one key per coordinator."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        kv = sim.etcd.get("/diskless/coordinators/0")
        assert kv is not None
        value = json.loads(kv.value)
        assert sorted(value["replicas"]) == [0, 1, 2] and value["leader"] in (0, 1, 2)

    simulate(tmp_path, 25, work)


def test_produce_gateways_follow_the_leaders_and_their_changes(tmp_path: Path) -> None:
    """In a cluster the gateways group each node's coordinators, and follow leadership when a leader is lost."""
    brokers = [pb.DescribeProduceGatewaysRequest.Broker(broker_id=b, rack="a") for b in range(1, 4)]

    def gateways(sim_node: SimNode) -> dict[int, tuple[int, ...]]:
        assert sim_node.node is not None
        answer = sim_node.node.router.describe_produce_gateways(pb.DescribeProduceGatewaysRequest(brokers=brokers))
        return {g.coordinator_id: tuple(g.broker_ids) for g in answer.gateways}

    def by_leader(sim: SimCluster, asked: SimNode) -> dict[int, set[tuple[int, ...]]]:
        grouped: dict[int, set[tuple[int, ...]]] = {}
        for coordinator_id, broker_ids in gateways(asked).items():
            leader = asked.shard(coordinator_id).role
            assert leader is not None
            grouped.setdefault(leader.leader_node_id, set()).add(broker_ids)
        return grouped

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        asked = sim.nodes[0]
        # 6 coordinators, 2 led by each of 3 nodes, 3 brokers of one rack: each broker takes one node's pair.
        grouped = by_leader(sim, asked)
        assert len(grouped) == 3 and all(len(sets) == 1 for sets in grouped.values()), grouped
        assert gateways(asked) == gateways(sim.nodes[1]) == gateways(sim.nodes[2])  # every node answers alike
        victim = next(n for n in sim.nodes if n is not asked)
        await sim.crash(victim.node_id)
        await _until("the lost node's coordinators are led elsewhere", lambda: all(
            asked.shard(c).role is not None and asked.shard(c).role.leader_node_id != victim.node_id  # type: ignore[union-attr]
            for c in range(sim.coordinators)
        ))  # fmt: skip
        regrouped = by_leader(sim, asked)
        assert victim.node_id not in regrouped and sum(len(s) for s in regrouped.values()) >= 2

    simulate(tmp_path, 26, work, coordinators=6)


async def _describe(sim_node: SimNode, key: str) -> pb.DescribeFilesResponse.FileResult:
    assert sim_node.node is not None
    return (await sim_node.node.router.describe_files(pb.DescribeFilesRequest(object_keys=[key]))).files[0]


async def _describe_routed(sim: SimCluster, read_node: SimNode, key: str) -> pb.DescribeFilesResponse.FileResult:
    """As the routing client asks (coordinator/client/routing_client.py): a replica of every coordinator, preferring
    `read_node`, from a route table learned from DescribeCoordinators; the answers merged per key."""
    assert read_node.node is not None
    table = RoutingTable(read_node_id=read_node.node_id)
    described = read_node.node.router.describe_coordinators(pb.DescribeCoordinatorsRequest())
    table.learn_described(described, read_node.address)
    addresses = table.cover()
    assert addresses, f"no replica of every coordinator in {table.routes}"
    by_address = {n.address: n for n in sim.running()}
    return merge_file_answers([await _describe(by_address[a], key) for a in addresses])


def test_describe_files_never_answers_unknown_while_a_commit_awaits_its_in_sync_replicas(tmp_path: Path) -> None:
    """Issue #29: the commit is written on the leader and one follower; the other follower, cut off from the leader,
    holds the high watermark back until it leaves the ISR. Asked meanwhile, no node says FILE_STATE_UNKNOWN."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        cut, fetching = (n for n in sim.nodes if n is not leader)
        partition = _partition_of(sim, 0)
        key = "wal/awaiting-isr"
        sim.network.partition(leader.address, cut.address)
        lag_ms = leader.settings.replica_lag_time_max_ms
        end = leader.shard(0).statistics().log_end_offset
        commit = asyncio.ensure_future(_commit(leader, partition, key, timeout_ms=lag_ms * 3))
        await _until("the commit is on the leader's and one follower's log", lambda: (
            leader.shard(0).statistics().log_end_offset > end
            and fetching.shard(0).statistics().log_end_offset == leader.shard(0).statistics().log_end_offset
        ))  # fmt: skip
        assert not commit.done() and cut.node_id in (await _assignment(sim, 0)).isr
        # The leader knows the commit it accepted; the follower that fetched it knows it from its log.
        for knowing in (leader, fetching):
            answer = await _describe(knowing, key)
            assert (answer.error_code, answer.state, list(answer.coordinator_ids)) == (
                pb.NONE, pb.FILE_STATE_LIVE, [0]
            ), (knowing.node_id, answer)  # fmt: skip
        # The follower cut off from its leader cannot ask it: a retriable error, never UNKNOWN.
        answer = await _describe(cut, key)
        assert answer.error_code == pb.COORDINATOR_NOT_AVAILABLE, answer
        for read_node in sim.nodes:
            routed = await _describe_routed(sim, read_node, key)
            assert routed.error_code != pb.NONE or routed.state != pb.FILE_STATE_UNKNOWN, (read_node.node_id, routed)
        assert (await _describe_routed(sim, fetching, key)).state == pb.FILE_STATE_LIVE
        # Only the leader answers KnownFiles: a follower cannot see the commits in flight.
        assert fetching.node is not None
        request = internal.KnownFilesRequest(coordinator_ids=[0], object_keys=[key])
        refused = await fetching.node.router.known_files(request)
        assert refused.error_code == pb.NOT_COORDINATOR, refused
        # The cut-off follower leaves the ISR, the commit lands; once healed every node describes it as committed.
        assert await commit == 0
        sim.network.heal()

        async def everywhere_live() -> bool:
            answers = [await _describe(n, key) for n in sim.nodes]
            return all(a.error_code == pb.NONE and a.state == pb.FILE_STATE_LIVE for a in answers)

        await _until("every node describes the landed commit", everywhere_live)
        assert (await _describe_routed(sim, cut, key)).state == pb.FILE_STATE_LIVE

    simulate(tmp_path, 27, work)


def test_topic_configs_are_changed_through_any_node_and_kept_by_every_replica_across_a_failover(tmp_path: Path) -> None:
    """DESIGN §4a in a cluster: a change taken by any node reaches every coordinator's leader, even one the node's
    catalog does not know holds the topic yet; every node then describes it (read your writes) and every replica
    holds it; after a failover the new leader holds it, and KIP-950's check reads it there."""

    async def describe(sim_node: SimNode) -> dict[str, str] | None:
        assert sim_node.node is not None
        request = pb.DescribeTopicConfigsRequest(topic_ids=[TOPIC_ID])
        (result,) = (await sim_node.node.router.describe_topic_configs(request)).topics
        return None if result.error_code != pb.NONE else {e.name: e.value for e in result.configs if not e.is_default}

    async def alter(sim_node: SimNode, **values: str) -> pb.AlterTopicConfigsResponse.TopicResult:
        assert sim_node.node is not None
        change = [pb.TopicConfig(name=name.replace("_", "."), value=value) for name, value in values.items()]
        topic = pb.AlterTopicConfigsRequest.Topic(topic_id=TOPIC_ID, set=change)
        request = pb.AlterTopicConfigsRequest(topics=[topic], timeout_ms=5000)
        return (await sim_node.node.router.alter_topic_configs(request)).topics[0]

    def held(sim: SimCluster) -> set[tuple[tuple[str, str], ...]]:
        """What every live replica of every coordinator holds for the topic."""
        return {
            tuple(sorted(n.shard(c).topic_configs(TOPIC_ID).items()))
            for n in sim.running()
            for c in range(sim.coordinators)
        }

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        first, other = sim.nodes[0], sim.nodes[1]
        assert first.node is not None
        topic = pb.CreatePartitionsRequest.Topic(
            topic_id=TOPIC_ID, name="orders", num_partitions=6,
            configs=[pb.TopicConfig(name="remote.storage.enable", value="true")],
        )  # fmt: skip
        answer = await first.node.router.create_partitions(pb.CreatePartitionsRequest(topics=[topic], timeout_ms=5000))
        assert answer.topics[0].error_code == pb.NONE, answer
        # At once, through another node: it leads some coordinators and sends the others' parts to their leaders.
        assert (await alter(other, retention_ms="60000")).error_code == pb.NONE
        wanted = {"remote.storage.enable": "true", "retention.ms": "60000"}
        assert [await describe(n) for n in sim.running()] == [wanted] * 3
        await _until("every replica holds it", lambda: held(sim) == {tuple(sorted(wanted.items()))})

        victim = _leader(sim, 0)
        await sim.crash(victim.node_id)
        await _until("coordinator 0 has a new leader", lambda: len([n for n in sim.leaders(0) if n.running]) == 1)
        survivor = next(n for n in sim.running() if n.node_id != victim.node_id)
        refused = await alter(survivor, remote_storage_enable="false")
        assert refused.error_code == pb.INVALID_CONFIG, refused  # the new leader holds remote.storage.enable=true
        done = await alter(survivor, remote_storage_enable="false", remote_log_delete_on_disable="true")
        assert done.error_code == pb.NONE, done
        after = {**wanted, "remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
        assert [await describe(n) for n in sim.running()] == [after] * 2
        await _until("every live replica holds it", lambda: held(sim) == {tuple(sorted(after.items()))})

    simulate(tmp_path, 27, work, coordinators=3)
