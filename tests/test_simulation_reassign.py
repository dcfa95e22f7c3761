"""Online reassignment (KIP-455's way) in the simulated cluster, under steady commits: a 4th node registered after the
cluster formed takes a replica (snapshot, then log) and the leadership of a leaving leader; a node lost mid-move; the
driving leader killed mid-move. Nothing acknowledged is lost; removed replicas delete their files.

Each test prints its seed; `pytest tests/test_simulation_reassign.py -k <name>` replays it exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from coordinator.cluster.assignment import CoordinatorAssignment
from coordinator.cluster.placement import plan_rebalance
from coordinator.cluster.reassignment import reassign
from coordinator.config.settings import Settings
from coordinator.machine.topic_names import coordinator_for_new_partition
from coordinator.node.node import coordinator_directory
from coordinator.node.reassignments import alter_reassignments, list_reassignments
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from tests.harness import find_batches_request
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _assignment, _commit, _partition_of, _topic, _until, simulate

SNAPSHOTTING = {  # small segments and snapshots on demand: a new replica starts below the leader's log start
    "diskless.coordinator.log.segment.bytes": "4096",
    "diskless.coordinator.snapshot.interval.bytes": "0",
    "diskless.coordinator.snapshot.interval.ms": "0",
}


@dataclass
class Committer:
    """Commits to one coordinator's partition through whichever node leads it, one at a time, until stopped."""

    sim: SimCluster
    partition: int
    coordinator_id: int
    acknowledged: dict[int, str] = field(default_factory=dict)  # offset -> object key
    refused: int = 0
    last_refusal: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            leaders = [n for n in self.sim.leaders(self.coordinator_id) if n.up]
            if len(leaders) != 1:
                await asyncio.sleep(0.05)
                continue
            key = f"wal/steady/{number:05}"
            number += 1
            offset = await _commit(leaders[0], self.partition, key, timeout_ms=5000)
            if offset >= 0:
                assert offset not in self.acknowledged, f"offset {offset} acknowledged twice"
                self.acknowledged[offset] = key
            else:
                self.refused += 1
                self.last_refusal = -offset
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.02)

    def check_found(self, reader: SimNode) -> None:
        """Every acknowledged batch is where it was acknowledged, on `reader`'s replica."""
        assert reader.node is not None
        answer = reader.node.router.find_batches(find_batches_request(TOPIC_ID, self.partition, 0))
        found = pb.FindBatchesResponse.FromString(answer).topics[0].partitions[0]
        by_offset = {b.base_offset: b.object_key for b in found.batches}
        lost = {o: k for o, k in self.acknowledged.items() if by_offset.get(o) != k}
        assert not lost, f"acknowledged batches lost or moved on node {reader.node_id}: {sorted(lost.items())[:5]}"


async def _start(sim: SimCluster, first: int = 3) -> None:
    """The cluster forms over the first `first` nodes; the others register afterwards."""
    await asyncio.gather(*(sim.start(n) for n in range(first)))
    await _topic(sim)
    for node_id in range(first, len(sim.nodes)):
        await sim.start(node_id)


async def _done(sim: SimCluster, coordinator_id: int, target: tuple[int, ...]) -> CoordinatorAssignment:
    async def finished() -> bool:
        now = await _assignment(sim, coordinator_id)
        return now.replicas == target and not now.reassigning and set(now.isr) == set(target)

    await _until(f"coordinator {coordinator_id} moved to {list(target)}", finished, within_s=120)
    return await _assignment(sim, coordinator_id)


async def _files_gone(sim: SimCluster, node_id: int, coordinator_id: int) -> None:
    directory = coordinator_directory(sim.nodes[node_id].data_dir, coordinator_id)
    await _until(f"node {node_id} deleted coordinator {coordinator_id}'s files", lambda: not directory.exists())


async def _with_commits(sim: SimCluster, coordinator_id: int) -> tuple[Committer, asyncio.Task[None]]:
    committer = Committer(sim, _partition_of(sim, coordinator_id), coordinator_id)
    task = asyncio.ensure_future(committer.run())
    await _until(f"commits flow (last refusal {committer.last_refusal})", lambda: len(committer.acknowledged) >= 5)
    return committer, task


async def _stop(committer: Committer, task: asyncio.Task[None]) -> None:
    committer.stop.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _simulate(
    tmp_path: Path, seed: int, work: Callable[[SimCluster], Coroutine[Any, Any, None]], **cluster: Any
) -> None:
    print(f"seed {seed}")
    simulate(tmp_path, seed, work, **cluster)


def test_a_fourth_node_takes_a_replica_and_the_leadership_of_a_leaving_leader_under_steady_commits(
    tmp_path: Path,
) -> None:
    async def work(sim: SimCluster) -> None:
        await _start(sim)
        before = await _assignment(sim, 0)
        assert 3 not in before.replicas  # formed before node 3 registered
        committer, task = await _with_commits(sim, 0)
        leader = before.leader
        await _until("a few segments written", lambda: len(committer.acknowledged) >= 80)
        for _ in range(2):  # the log below the older snapshot goes: node 3 starts from a snapshot
            await sim.nodes[leader].shard(0).create_snapshot()
        assert sim.nodes[leader].shard(0).statistics().log_start_offset > 0, "the whole log kept: nothing to test"
        target = (3, *[n for n in before.replicas if n != leader])
        started = await reassign(sim.nodes[0].store, 0, target, {0, 1, 2, 3}, 2)
        assert started.refusal == ""
        after = await _done(sim, 0, target)
        assert after.leader in target and after.leader_epoch > before.leader_epoch
        assert sim.nodes[3].shard(0).statistics().log_start_offset > 0  # it began from the leader's snapshot
        await _until("commits go on after the move", lambda: len(committer.acknowledged) >= 120)
        await _stop(committer, task)
        await _files_gone(sim, leader, 0)
        # The node that left still routes a broker there: it asks the coordinator's leader about the partition.
        old_node = sim.nodes[leader].node
        assert old_node is not None
        old_node.rebuild_catalog()  # as when another coordinator of the node loads: it forgets coordinator 0's
        assert old_node.router.catalog.coordinator_of(TOPIC_ID, committer.partition) is None
        question = pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=TOPIC_ID, partitions=[committer.partition, 999])]
        )
        found = await old_node.router.find_coordinator(question)
        assert [(p.error_code, p.coordinator_id) for p in found.topics[0].partitions] == [
            (pb.NONE, 0), (pb.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ], found  # fmt: skip
        assert found.coordinators[0].leader_node_id == after.leader
        described = old_node.router.describe_coordinators(pb.DescribeCoordinatorsRequest(coordinator_ids=[0]))
        assert described.coordinators[0].state == "NOT_REPLICA", described  # not "LOADING" for ever
        await asyncio.sleep(1)  # the followers apply up to the high watermark
        for node_id in target:
            committer.check_found(sim.nodes[node_id])
        assert committer.acknowledged, "nothing acknowledged: nothing checked"

    _simulate(tmp_path, 41, work, nodes=4, settings=SNAPSHOTTING)


def test_a_node_lost_mid_reassignment_the_move_ends_and_its_stale_files_go_when_it_returns(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await _start(sim)
        before = await _assignment(sim, 1)
        committer, task = await _with_commits(sim, 1)
        leaving = next(n for n in before.replicas if n != before.leader)
        target = tuple(3 if n == leaving else n for n in before.replicas)
        assert (await reassign(sim.nodes[0].store, 1, target, {0, 1, 2, 3}, 2)).refusal == ""
        await sim.crash(leaving)  # the replica leaving is lost mid-move: the move ends without it
        await _done(sim, 1, target)
        await sim.start(leaving)  # it returns: not a replica any more, it deletes what it held
        await _files_gone(sim, leaving, 1)
        # the node joining is lost mid-move: the reassignment waits for it, and ends once it is back
        now = await _assignment(sim, 1)
        other = next(n for n in target if n != now.leader)
        back = tuple(leaving if n == other else n for n in target)
        assert (await reassign(sim.nodes[0].store, 1, back, {0, 1, 2, 3}, 2)).refusal == ""
        await sim.crash(leaving)
        await asyncio.sleep(3)
        assert (await _assignment(sim, 1)).reassigning, "ended without the replica it adds"
        await sim.start(leaving)
        await _done(sim, 1, back)
        await _stop(committer, task)
        await asyncio.sleep(1)
        for node_id in back:
            committer.check_found(sim.nodes[node_id])

    _simulate(tmp_path, 42, work, nodes=4)


def test_the_driving_leader_killed_mid_move_the_next_leader_finishes_it(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await _start(sim)
        before = await _assignment(sim, 2)
        committer, task = await _with_commits(sim, 2)
        kept = [n for n in before.replicas if n != before.leader]
        target = (before.leader, kept[0], 3)  # the leader stays: it drives the move until it is killed
        assert (await reassign(sim.nodes[0].store, 2, target, {0, 1, 2, 3}, 2)).refusal == ""
        await asyncio.sleep(0.2)
        assert (await _assignment(sim, 2)).reassigning
        await sim.crash(before.leader)  # the controller driving it, gone mid-move
        await _until("another node leads", lambda: any(n.node_id != before.leader for n in sim.leaders(2)))
        await sim.start(before.leader)  # it returns as a follower of the new leader; the new leader finishes
        after = await _done(sim, 2, target)
        assert after.leader_epoch > before.leader_epoch
        await _stop(committer, task)
        await _files_gone(sim, kept[1], 2)
        await asyncio.sleep(1)
        for node_id in target:
            committer.check_found(sim.nodes[node_id])

    _simulate(tmp_path, 43, work, nodes=4)


def test_the_cluster_forms_over_every_node_registered_then_a_rebalance_gives_a_later_node_its_share(
    tmp_path: Path,
) -> None:
    async def work(sim: SimCluster) -> None:
        await _start(sim, first=4)  # four nodes at formation, a fifth registered afterwards
        stored = sim.etcd.get("/diskless/placement")
        assert stored is not None
        formed_over = json.loads(stored.value)["nodes"]
        assert len(formed_over) >= 3 and 4 not in formed_over
        placement = {c: (await _assignment(sim, c)).replicas for c in range(sim.coordinators)}
        assert all(set(r) <= set(formed_over) for r in placement.values())
        _assert_even(placement, formed_over)
        busy = coordinator_for_new_partition(TOPIC_ID, 0, sim.coordinators)  # the topic has 4 partitions
        committer, task = await _with_commits(sim, busy)
        controller = sim.nodes[0].controller
        assert controller is not None
        assignments, live = await controller.placement()
        plan = plan_rebalance({c: v.assignment.replicas for c, v in assignments.items()}, live, 3)
        assert plan and any(4 in r for r in plan.values())
        results = await controller.reassign(sorted(plan.items()))
        assert [r.refusal for r in results] == [""] * len(plan)
        for coordinator_id, target in plan.items():
            await _done(sim, coordinator_id, target)
        after = {c: (await _assignment(sim, c)).replicas for c in range(sim.coordinators)}
        _assert_even(after, live)
        await _stop(committer, task)
        await asyncio.sleep(1)
        for node_id in after[busy]:
            committer.check_found(sim.nodes[node_id])

    _simulate(tmp_path, 44, work, nodes=5, coordinators=8)


def _assert_even(placement: dict[int, tuple[int, ...]], nodes: list[int]) -> None:
    replicas = {n: sum(n in r for r in placement.values()) for n in nodes}
    leaders = {n: sum(r[0] == n for r in placement.values()) for n in nodes}
    assert max(replicas.values()) - min(replicas.values()) <= 1, replicas
    assert max(leaders.values()) - min(leaders.values()) <= 1, leaders


def test_alter_reassignments_answers_each_coordinator_and_list_shows_those_in_progress(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await _start(sim)
        router = sim.nodes[1].node.router  # type: ignore[union-attr]
        current = await _assignment(sim, 0)
        target = [3, *current.replicas[1:]]
        item = admin.AlterReassignmentsRequest.Reassignment
        answer = await router.alter_reassignments(admin.AlterReassignmentsRequest(reassignments=[
            item(coordinator_id=0, replicas=target), item(coordinator_id=1, replicas=[0, 0, 1]),
            item(coordinator_id=2, replicas=[0, 1, 7]), item(coordinator_id=99, replicas=[0, 1, 2]),
            item(coordinator_id=3, replicas=[0]), item(coordinator_id=3, replicas=[0, 1, 2]),
        ]))  # fmt: skip
        assert answer.error_code == pb.NONE, answer
        codes = {r.coordinator_id: (r.error_code, r.error_message) for r in answer.results}
        assert codes[0] == (pb.NONE, "")
        assert codes[1][0] == pb.INVALID_REQUEST and "named more than once" in codes[1][1]
        assert codes[2][0] == pb.INVALID_REQUEST and "node 7 is not registered" in codes[2][1]
        assert codes[99][0] == pb.INVALID_REQUEST and "no coordinator 99" in codes[99][1]
        assert codes[3][0] == pb.INVALID_REQUEST and "named more than once" in codes[3][1]
        for coordinator_id in (1, 2, 3):
            assert not (await _assignment(sim, coordinator_id)).reassigning  # refused: nothing changed
        listed = await router.list_reassignments(admin.ListReassignmentsRequest())
        assert listed.error_code == pb.NONE and list(listed.live_nodes) == [0, 1, 2, 3]
        assert listed.replication_factor == 3
        if listed.coordinators:  # it may have finished already
            (running,) = listed.coordinators
            assert running.coordinator_id == 0 and list(running.target_replicas) == target
            assert list(running.adding_replicas) == [3] and list(running.removing_replicas) == [current.replicas[0]]
        await _done(sim, 0, tuple(target))
        everything = await router.list_reassignments(admin.ListReassignmentsRequest(all_coordinators=True))
        assert [c.coordinator_id for c in everything.coordinators] == list(range(sim.coordinators))
        assert list(everything.coordinators[0].replicas) == target and not everything.coordinators[0].reassigning

    _simulate(tmp_path, 45, work, nodes=4)


def test_a_node_without_a_cluster_refuses_reassignments() -> None:
    alter = asyncio.run(alter_reassignments(None, Settings(), admin.AlterReassignmentsRequest()))
    listed = asyncio.run(list_reassignments(None, admin.ListReassignmentsRequest()))
    for answer in (alter, listed):
        assert answer.error_code == pb.INVALID_REQUEST and "not part of a cluster" in answer.error_message


def test_after_a_rebalance_every_node_changes_topics_though_none_holds_every_coordinator(tmp_path: Path) -> None:
    """Each node asks the leaders of the coordinators it holds no replica of about the topic before the topic rules
    run: creation, a name taken through another node, growth and deletion all answer as on a node holding all."""

    async def work(sim: SimCluster) -> None:
        await _start(sim)
        controller = sim.nodes[0].controller
        assert controller is not None
        assignments, live = await controller.placement()
        plan = plan_rebalance({c: v.assignment.replicas for c, v in assignments.items()}, live, 3)
        await controller.reassign(sorted(plan.items()))
        for coordinator_id, target in plan.items():
            await _done(sim, coordinator_id, target)
        held = {n.node_id: {c for c in range(sim.coordinators) if n.node_id in (await _assignment(sim, c)).replicas}
                for n in sim.nodes}  # fmt: skip
        assert all(len(h) < sim.coordinators for h in held.values()), held

        def create(name: str, topic_id: bytes, partitions: int) -> pb.CreatePartitionsRequest:
            topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)
            return pb.CreatePartitionsRequest(topics=[topic], timeout_ms=5000)

        routers = [n.node.router for n in sim.nodes]  # type: ignore[union-attr]
        for node_id, router in enumerate(routers):
            answer = await router.create_partitions(create(f"t{node_id}", bytes([node_id + 1]) * 16, 8))
            assert answer.topics[0].error_code == pb.NONE, (node_id, answer)
        taken = await routers[3].create_partitions(create("t0", bytes([9]) * 16, 1))
        assert taken.topics[0].error_code == pb.TOPIC_ALREADY_EXISTS, taken
        grown = await routers[2].create_partitions(create("t1", bytes([2]) * 16, 12))
        assert grown.topics[0].error_code == pb.NONE, grown
        shrunk = await routers[0].create_partitions(create("t1", bytes([2]) * 16, 10))
        assert shrunk.topics[0].error_code == pb.INVALID_PARTITIONS, shrunk
        question = pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=bytes([2]) * 16, partitions=list(range(12)))]
        )
        for router in routers:
            found = await router.find_coordinator(question)
            assert {p.error_code for p in found.topics[0].partitions} == {pb.NONE}, found
        deleted = await routers[1].delete_topics(pb.DeleteTopicsRequest(topic_ids=[bytes([1]) * 16], timeout_ms=5000))
        assert deleted.topics[0].error_code == pb.NONE, deleted

    _simulate(tmp_path, 47, work, nodes=4)


async def _random_moves(sim: SimCluster, seed: int, moves: int) -> None:
    """Reassignments of random coordinators to random targets (some replacing one still running), one node at a
    time crashed mid-move and restarted, under steady commits on coordinator 0's partition; at the end every
    coordinator is on its last target and every acknowledged batch is read back from each of its replicas."""
    rng = random.Random(seed)
    await _start(sim)
    committer, task = await _with_commits(sim, 0)
    wanted: dict[int, tuple[int, ...]] = {}
    for _ in range(moves):
        coordinator_id = rng.randrange(sim.coordinators)
        target = tuple(rng.sample(range(len(sim.nodes)), 3))
        asked = rng.choice([n for n in sim.nodes if n.up])
        assert asked.controller is not None
        (result,) = await asked.controller.reassign([(coordinator_id, target)])
        if result.refusal:
            assert result.retriable, result  # every target here is valid: only a CAS race may refuse
            continue
        wanted[coordinator_id] = target
        await asyncio.sleep(rng.uniform(0.05, 1.5))
        if rng.random() < 0.4 and all(n.up for n in sim.nodes):
            victim = rng.randrange(len(sim.nodes))
            await sim.crash(victim)
            await asyncio.sleep(rng.uniform(0.5, 4))
            await sim.start(victim)
    for coordinator_id, target in sorted(wanted.items()):
        await _done(sim, coordinator_id, target)
    await _until("commits go on", lambda: committer.refused >= 0 and len(committer.acknowledged) >= 30)
    await _stop(committer, task)
    await asyncio.sleep(2)
    for node_id in (await _assignment(sim, 0)).replicas:
        committer.check_found(sim.nodes[node_id])
    for sim_node in sim.nodes:  # no node keeps files of a coordinator it is not a replica of
        for coordinator_id in range(sim.coordinators):
            if sim_node.node_id not in (await _assignment(sim, coordinator_id)).replicas:
                await _files_gone(sim, sim_node.node_id, coordinator_id)


@pytest.mark.slow
@pytest.mark.parametrize("seed", (51, 52))
def test_seeded_random_reassignments_with_crashes_lose_nothing(tmp_path: Path, seed: int) -> None:
    _simulate(tmp_path, seed, lambda sim: _random_moves(sim, seed, 6), nodes=4)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(60, 70))
def test_seeded_long_random_reassignments_with_crashes_lose_nothing(tmp_path: Path, seed: int) -> None:
    _simulate(tmp_path, seed, lambda sim: _random_moves(sim, seed, 20), nodes=5)


def test_a_node_lost_for_good_is_healed_by_a_rebalance_over_the_live_nodes(tmp_path: Path) -> None:
    """The replicas of a node that never returns move to the live ones: every coordinator has its full replication
    factor in sync again, under commits, with nothing acknowledged lost."""

    async def work(sim: SimCluster) -> None:
        await _start(sim)
        committer, task = await _with_commits(sim, 0)
        lost = (await _assignment(sim, 0)).leader
        await sim.crash(lost)  # for good
        controller = next(n.controller for n in sim.nodes if n.up and n.controller is not None)
        await _until("the lost node's session ended", lambda: len(sim.leaders(0)) == 1)
        assignments, live = await controller.placement()
        assert lost not in live
        plan = plan_rebalance({c: v.assignment.replicas for c, v in assignments.items()}, live, 3)
        assert plan and all(lost in assignments[c].assignment.replicas for c in plan)
        assert [r.refusal for r in await controller.reassign(sorted(plan.items()))] == [""] * len(plan)
        for coordinator_id, target in plan.items():
            after = await _done(sim, coordinator_id, target)
            assert lost not in after.replicas and len(after.isr) == 3
        await _stop(committer, task)
        await asyncio.sleep(1)
        for node_id in (await _assignment(sim, 0)).replicas:
            committer.check_found(sim.nodes[node_id])

    _simulate(tmp_path, 48, work, nodes=4)
