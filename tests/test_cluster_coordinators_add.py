"""Coordinators added online to a cluster (CreateCoordinators on any node; coordinator/node/cluster_growth.py).

The count is etcd's (compare-and-set on the `config` key); the added coordinators are placed over the live nodes
like the rest (replica counts even, the others left where they are); every node makes and loads its replicas, the
first replica leads, the ISR forms; new topics spread over every coordinator, existing partitions stay; any node
answers FindCoordinator, DescribeCoordinators and the produce gateways with them. A node killed in the middle of
the add (at a seeded moment) leaves an add that the call retried on another node completes without adding twice, and
the node restarted with the old count takes the recorded one.

Each simulated test prints its seed; `pytest tests/test_cluster_coordinators_add.py -k <name>` replays it exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import pytest

from coordinator.cluster.assignment import CoordinatorAssignment
from coordinator.cluster.placement import leader_counts, place_added, replica_counts
from coordinator.cluster.store import ClusterConfig
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from tests.harness import batch
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _assignment, _until, simulate
from tests.test_simulation_reassign import Committer, _stop

NEW_TOPIC_ID = bytes(range(101, 117))

# ------------------------------------------------------------------ placement (pure)


def test_added_coordinators_go_to_the_nodes_holding_fewest_replicas_and_lead_where_fewest_lead() -> None:
    current = {0: (0, 1, 2), 1: (1, 2, 0), 2: (2, 0, 1), 3: (0, 1, 2)}  # 3 nodes, node 0 leads twice
    added = place_added(current, [4, 5, 6], [0, 1, 2, 3], 3)
    assert sorted(added) == [4, 5, 6]
    assert all(len(set(replicas)) == 3 for replicas in added.values())
    whole = {**current, **added}
    # Node 3 (registered after the formation) is in every added coordinator; the others share the rest evenly.
    # Evening it fully would move existing replicas: that is `diskless rebalance`'s to do.
    assert replica_counts(whole) == {0: 6, 1: 6, 2: 6, 3: 3}
    assert max(leader_counts(whole).values()) - min(leader_counts(whole).values()) <= 1
    assert added[4][0] == 3  # node 3 (new, leading none, holding none) takes the first added coordinator's lead
    assert place_added(current, [2, 3], [0, 1, 2], 3) == {}  # placed already: nothing moves


def test_adding_one_coordinator_to_a_three_node_cluster_of_eight_keeps_leaders_even() -> None:
    current = {c: tuple((c + j) % 3 for j in range(3)) for c in range(8)}  # leaders 3, 3, 2
    added = place_added(current, [8], [0, 1, 2], 3)
    assert added[8][0] == 2 and sorted(added[8]) == [0, 1, 2]
    assert sorted(leader_counts({**current, **added}).values()) == [3, 3, 3]


# ------------------------------------------------------------------ the simulated cluster


async def _add(sim_node: SimNode, count: int, expected: int) -> admin.CreateCoordinatorsResponse:
    assert sim_node.node is not None
    request = admin.CreateCoordinatorsRequest(count=count, expected_count=expected)
    return await sim_node.node.router.create_coordinators(request)


async def _create_topic(sim_node: SimNode, topic_id: bytes, name: str, partitions: int) -> None:
    assert sim_node.node is not None
    topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)
    answer = await sim_node.node.router.create_partitions(pb.CreatePartitionsRequest(topics=[topic], timeout_ms=5000))
    assert answer.topics[0].error_code == pb.NONE, answer


async def _commit_new(sim: SimCluster, coordinator_id: int, partition: int, key: str) -> int:
    """Commits one batch of the new topic through the coordinator's leader; its offset, or -error."""
    leaders = [n for n in sim.leaders(coordinator_id) if n.up]
    if len(leaders) != 1 or leaders[0].node is None:
        return -1
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=100, uploader_broker_id=1, owner_ids=[coordinator_id],
        batches=[batch(NEW_TOPIC_ID, partition)], timeout_ms=3000,
    )  # fmt: skip
    result = (await leaders[0].node.router.commit_file(request)).batches[0]
    return result.assigned_base_offset if result.error_code == pb.NONE else -result.error_code


def _places(sim_node: SimNode, topic_id: bytes, partitions: int) -> dict[int, int | None]:
    assert sim_node.node is not None
    return {p: sim_node.node.router.catalog.coordinator_of(topic_id, p) for p in range(partitions)}


async def _found(sim_node: SimNode, topic_id: bytes, partitions: int) -> dict[int, int]:
    """Each partition's coordinator as FindCoordinator on the node answers it (asking other nodes where it must)."""
    assert sim_node.node is not None
    topic = pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(partitions))
    found = await sim_node.node.router.find_coordinator(pb.FindCoordinatorRequest(topics=[topic]))
    assert all(p.error_code == pb.NONE for p in found.topics[0].partitions), found
    return {p.partition: p.coordinator_id for p in found.topics[0].partitions}


async def _served(sim: SimCluster, count: int) -> bool:
    """Every running node holds `count` coordinators; each has one leader, and its live replicas are in its ISR."""
    running = [n for n in sim.nodes if n.up]
    if any(n.node is None or len(n.node.shards) != count for n in running):
        return False
    live = {n.node_id for n in running}
    for c in range(count):
        kv = sim.etcd.get(f"/diskless/coordinators/{c}")
        if kv is None or len(sim.leaders(c)) != 1:
            return False
        assignment = CoordinatorAssignment.from_json(kv.value)
        if not set(assignment.replicas) & live <= set(assignment.isr):
            return False
    return True


STEPS = ("after-the-count", "after-placing", "while-loading")  # where the adding node dies (by seed)


def _dies_after(sim_node: SimNode, step: str) -> asyncio.Event:
    """The node is cut off from etcd (as dead: its next request fails) right after the step; the event is set then."""
    died = asyncio.Event()
    store = sim_node.store
    raise_count, compare_and_set = store.change_coordinator_count, store.compare_and_set

    def die() -> None:
        store.reachable = False
        died.set()

    async def counted(expected: int, count: int) -> ClusterConfig:
        config = await raise_count(expected, count)
        if step == STEPS[0]:
            die()
        return config

    async def placed(coordinator_id: int, expected_revision: int, assignment: CoordinatorAssignment) -> bool:
        written = await compare_and_set(coordinator_id, expected_revision, assignment)
        if step == STEPS[1] and coordinator_id == 5 and expected_revision == 0:
            die()
        return written

    store.change_coordinator_count = counted  # type: ignore[method-assign]
    store.compare_and_set = placed  # type: ignore[method-assign]
    return died


@pytest.mark.parametrize("seed", [61, 62, 63])
def test_two_added_under_commits_with_the_adding_node_killed_mid_add_the_retry_completes_it(
    tmp_path: Path, seed: int
) -> None:
    print(f"seed {seed}")
    rng = random.Random(seed)

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        first = sim.nodes[0]
        await _create_topic(first, TOPIC_ID, "orders", 8)
        await asyncio.sleep(1)
        old_places = _places(first, TOPIC_ID, 8)
        committers = [Committer(sim, p, c) for p, c in sorted(old_places.items())[:2] if c is not None]
        tasks = [asyncio.ensure_future(committer.run()) for committer in committers]
        await _until("commits flow", lambda: all(len(c.acknowledged) >= 5 for c in committers))

        adder = sim.nodes[rng.randrange(len(sim.nodes))]
        step = STEPS[seed % len(STEPS)]
        died = _dies_after(adder, step)
        adding = asyncio.ensure_future(_add(adder, 6, 4))
        if step == "while-loading":  # the node dies while it makes its replicas, at a seeded moment
            await asyncio.sleep(rng.choice([0.0005, 0.002, 0.01]))
        else:
            await died.wait()
        placed = sum(sim.etcd.get(f"/diskless/coordinators/{c}") is not None for c in (4, 5))
        await sim.crash(adder.node_id)
        with contextlib.suppress(BaseException):
            await adding  # cut short, or done before the crash: either way the retry below must complete it
        config = sim.etcd.get("/diskless/config")
        print(f"node {adder.node_id} killed {step}: etcd's config {config and config.value!r}, {placed} of 2 placed")
        retrier = next(n for n in sim.nodes if n.up)
        retried = await _add(retrier, 6, 4)  # the operator's `--count 2` again: the count it read was 4
        assert (retried.error_code, retried.count) == (pb.NONE, 6), retried
        revisions = {c: sim.etcd.get(f"/diskless/coordinators/{c}") for c in range(6)}
        again = await _add(retrier, 6, 4)
        assert (again.error_code, again.previous_count, again.count) == (pb.NONE, 6, 6), again
        assert {c: sim.etcd.get(f"/diskless/coordinators/{c}") for c in range(6)} == revisions, "added twice"
        stale = await _add(retrier, 7, 4)
        assert stale.error_code == pb.INVALID_REQUEST and "not the 4 expected" in stale.error_message, stale
        assert sim.etcd.get("/diskless/coordinators/6") is None

        await _until("the live nodes serve 6 coordinators", lambda: _served(sim, 6))
        await sim.start(adder.node_id)  # back with its old settings (4 coordinators): it takes etcd's 6
        await _until("every node serves 6 coordinators", lambda: _served(sim, 6))
        placement = {c: (await _assignment(sim, c)).replicas for c in range(6)}
        # Placed like the rest (`place_added`), over the nodes live then: with the adder if it placed before dying.
        existing = {c: placement[c] for c in range(4)}
        added = {c: placement[c] for c in (4, 5)}
        everyone = [n.node_id for n in sim.nodes]
        without_adder = [n for n in everyone if n != adder.node_id]
        assert added in (place_added(existing, [4, 5], everyone, 3), place_added(existing, [4, 5], without_adder, 3))

        # Existing partitions stay; a new topic of 12 partitions spreads over all 6, and the new ones take commits.
        assert _places(first, TOPIC_ID, 8) == old_places
        await _create_topic(retrier, NEW_TOPIC_ID, "fresh", 12)
        await asyncio.sleep(1)
        new_places = await _found(retrier, NEW_TOPIC_ID, 12)
        assert sorted(set(new_places.values())) == [0, 1, 2, 3, 4, 5], new_places
        on_added = {p: c for p, c in new_places.items() if c >= 4}
        for partition, coordinator_id in on_added.items():

            async def acknowledged(c: int = coordinator_id, p: int = partition) -> bool:
                return await _commit_new(sim, c, p, f"wal/new/{c}-{p}-{asyncio.get_running_loop().time()}") >= 0

            await _until(f"a commit to coordinator {coordinator_id}", acknowledged)

        for sim_node in sim.nodes:  # any node finds and describes the new coordinators; the gateways count them
            assert sim_node.node is not None
            router = sim_node.node.router
            described = router.describe_coordinators(pb.DescribeCoordinatorsRequest())
            assert sorted(c.coordinator_id for c in described.coordinators) == [0, 1, 2, 3, 4, 5]
            assert await _found(sim_node, NEW_TOPIC_ID, 12) == new_places, sim_node.node_id
            brokers = [pb.DescribeProduceGatewaysRequest.Broker(broker_id=b) for b in (1, 2)]
            gateways = router.describe_produce_gateways(pb.DescribeProduceGatewaysRequest(brokers=brokers))
            assert sorted({g.coordinator_id for g in gateways.gateways}) == [0, 1, 2, 3, 4, 5]

        for committer, task in zip(committers, tasks, strict=True):
            await _stop(committer, task)
        await asyncio.sleep(1)  # the followers apply up to the high watermark
        for committer in committers:
            for node_id in (await _assignment(sim, committer.coordinator_id)).replicas:
                committer.check_found(sim.nodes[node_id])
        assert all(committer.acknowledged for committer in committers), "nothing acknowledged: nothing checked"

    simulate(tmp_path, seed, work, nodes=4)


def test_an_add_needs_enough_live_nodes_to_place_and_completes_once_they_are_back(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await sim.crash(2)
        await _until("node 2's session expired", lambda: sim.etcd.get("/diskless/nodes/2") is None)
        answer = await _add(sim.nodes[0], 5, 4)  # 2 live nodes, replication factor 3: recorded, not placed
        assert answer.error_code == pb.COORDINATOR_NOT_AVAILABLE and "recorded" in answer.error_message, answer
        assert sim.etcd.get("/diskless/coordinators/4") is None
        node = sim.nodes[0].node
        assert node is not None and len(node.shards) == 4  # not placed: not made
        # A call to coordinator 4 meanwhile (a file hand-over) is sent to this node, which refuses it as not hosted.
        assert node._peer_address(4).port == node.router.endpoint.port
        await sim.start(2)  # back: a refresh places the added coordinator, every node makes it
        await _until("every node serves 5 coordinators", lambda: _served(sim, 5))
        assert (await _add(sim.nodes[1], 5, 4)).error_code == pb.NONE

    simulate(tmp_path, 64, work, nodes=3)
