"""Read your writes across the cluster (DESIGN §6a, issue #30 item 6): a node that acknowledged CreatePartitions knows
the topic at once, and a node that does not know a partition asks the leader of the coordinator it would be on
before answering UNKNOWN_TOPIC_OR_PARTITION; one it cannot ask answers a retriable error, never a false unknown."""

from __future__ import annotations

import uuid
from pathlib import Path

from coordinator.machine.topic_names import coordinator_for_new_partition
from protos import coordinator_pb2 as pb
from tests.simulation.cluster import SimCluster, SimNode
from tests.test_simulation import simulate

PARTITIONS = 8


async def _create(node: SimNode, topic_id: bytes, name: str, timeout_ms: int = 5000) -> None:
    assert node.node is not None
    topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=PARTITIONS)
    request = pb.CreatePartitionsRequest(topics=[topic], timeout_ms=timeout_ms)
    answer = await node.node.router.create_partitions(request)
    assert answer.topics[0].error_code == pb.NONE, answer


async def _found(node: SimNode, topic_id: bytes, partitions: list[int]) -> list[int]:
    """Each partition's error code as the node answers FindCoordinator."""
    assert node.node is not None
    request = pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id,
                                                                                partitions=partitions)])  # fmt: skip
    answer = await node.node.router.find_coordinator(request)
    return [p.error_code for p in answer.topics[0].partitions]


def test_a_topic_is_known_on_every_node_as_soon_as_one_acknowledged_it(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        for attempt in range(5):  # each node in turn takes the call; the others are asked at once after
            creator = sim.nodes[attempt % len(sim.nodes)]
            topic_id = uuid.uuid4().bytes
            await _create(creator, topic_id, f"ryw-{attempt}")
            for node in (creator, *(n for n in sim.nodes if n is not creator)):
                assert await _found(node, topic_id, list(range(PARTITIONS))) == [pb.NONE] * PARTITIONS, (
                    f"attempt {attempt}: node {node.node_id} did not know a partition of a topic node "
                    f"{creator.node_id} acknowledged"
                )
            assert await _found(sim.nodes[1], topic_id, [PARTITIONS, 10_000]) == [pb.UNKNOWN_TOPIC_OR_PARTITION] * 2
            assert await _found(sim.nodes[2], uuid.uuid4().bytes, [0]) == [pb.UNKNOWN_TOPIC_OR_PARTITION]

    simulate(tmp_path, 31, work)


def test_a_node_that_cannot_ask_answers_a_retriable_error_not_unknown(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        leader = sim.leaders(0)[0]
        cut, creator = [n for n in sim.nodes if n is not leader]
        sim.network.partition(cut.address, leader.address)  # its replica of coordinator 0 cannot fetch, nor ask
        topic_id = uuid.uuid4().bytes
        # The cut-off follower leaves the ISRs of the leader's coordinators only after the lag bound (10 s).
        await _create(creator, topic_id, "unreachable", timeout_ms=30_000)
        codes = await _found(cut, topic_id, list(range(PARTITIONS)))
        led_there = {c for c in range(sim.coordinators) if leader in sim.leaders(c)}
        behind = [
            p for p in range(PARTITIONS) if coordinator_for_new_partition(topic_id, p, sim.coordinators) in led_there
        ]
        assert behind, "no partition on a coordinator whose leader is cut off: nothing tested"
        for partition, code in enumerate(codes):
            expected = pb.COORDINATOR_NOT_AVAILABLE if partition in behind else pb.NONE
            assert code == expected, (partition, codes)
        sim.network.heal()
        assert await _found(cut, topic_id, list(range(PARTITIONS))) == [pb.NONE] * PARTITIONS

    simulate(tmp_path, 32, work)
