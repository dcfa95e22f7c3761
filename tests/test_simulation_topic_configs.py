"""AlterTopicConfigs at once through several nodes of a simulated cluster (DESIGN §4a,
coordinator/topics/config_admin.py): changes are serialized cluster-wide by compare-and-set on each coordinator, so
that after every round of concurrent changes every replica of every coordinator holds one configuration, the result of
a change that succeeded, and every node describes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from protos import coordinator_pb2 as pb
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _until, simulate

ROUNDS = 6


async def alter(sim_node: SimNode, **values: str) -> pb.AlterTopicConfigsResponse.TopicResult:
    assert sim_node.node is not None
    change = [pb.TopicConfig(name=name.replace("_", "."), value=value) for name, value in values.items()]
    request = pb.AlterTopicConfigsRequest(
        topics=[pb.AlterTopicConfigsRequest.Topic(topic_id=TOPIC_ID, set=change)], timeout_ms=5000
    )
    return (await sim_node.node.router.alter_topic_configs(request)).topics[0]


async def describe(sim_node: SimNode) -> dict[str, str]:
    assert sim_node.node is not None
    request = pb.DescribeTopicConfigsRequest(topic_ids=[TOPIC_ID])
    (result,) = (await sim_node.node.router.describe_topic_configs(request)).topics
    assert result.error_code == pb.NONE, result
    return {e.name: e.value for e in result.configs if not e.is_default}


def held(sim: SimCluster) -> set[tuple[tuple[str, str], ...]]:
    """What every replica of every coordinator holds for the topic (each coordinator holds some of its partitions)."""
    return {
        tuple(sorted(n.shard(c).topic_configs(TOPIC_ID).items()))
        for n in sim.running()
        for c in range(sim.coordinators)
    }


def test_changes_at_once_through_every_node_leave_every_coordinator_agreeing(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        first = sim.nodes[0]
        assert first.node is not None
        topic = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC_ID, name="orders", num_partitions=9)
        created = await first.node.router.create_partitions(pb.CreatePartitionsRequest(topics=[topic], timeout_ms=5000))
        assert created.topics[0].error_code == pb.NONE, created
        successes = 0
        for round_ in range(ROUNDS):
            # Each node changes retention.ms and its own name, at the same simulated moment.
            wanted = [
                {"retention.ms": str(1000 * (round_ + 1) + i), ("retention.bytes", "remote.storage.enable")[i % 2]: v}
                for i, v in enumerate(("100", "true", "300"))
            ]
            answers = await asyncio.gather(*(alter(n, **{k.replace(".", "_"): v for k, v in w.items()})
                                             for n, w in zip(sim.nodes, wanted, strict=True)))  # fmt: skip
            results = [
                {c.name: c.value for c in a.configs if c.name in w} for a, w in zip(answers, wanted, strict=True)
            ]
            for answer in answers:  # a change that met another one fails whole, retriable
                assert answer.error_code in (pb.NONE, pb.COORDINATOR_NOT_AVAILABLE), answer
            succeeded = [r for a, r in zip(answers, results, strict=True) if a.error_code == pb.NONE]
            successes += len(succeeded)
            await _until(f"round {round_}: every replica holds one configuration", lambda: len(held(sim)) == 1)
            (agreed,) = held(sim)
            assert [await describe(n) for n in sim.nodes] == [dict(agreed)] * len(sim.nodes)
            assert not succeeded or any(r.items() <= dict(agreed).items() for r in succeeded), (succeeded, agreed)
        print(f"{successes} of {ROUNDS * len(sim.nodes)} concurrent changes went through")
        assert successes >= ROUNDS  # at least one change of every round goes through

    simulate(tmp_path, 31, work, coordinators=3)
