"""Read your writes for DeleteTopics and AlterTopicConfigs across the simulated cluster (DESIGN §6a, issue #30 item 6).

A node that acknowledged DeleteTopics answers every later call with the topic gone, though the replicas it only
follows apply the deletion at their next fetch; a node that acknowledged AlterTopicConfigs answers every later call
(every node does) with the change in place. The reverse holds too: a node whose catalog has not heard of a topic
another node just created deletes it, not a false UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.machine import records
from coordinator.machine.catalog import PlacedPartition, TopicCatalog
from coordinator.node.router import Router
from protos import coordinator_pb2 as pb
from tests.lanes import sized
from tests.simulation.cluster import SimCluster, SimNode
from tests.test_read_your_writes import PARTITIONS, _create, _found
from tests.test_simulation import simulate

SETTLE_S = 2.0  # simulated: every replica has fetched and applied what its leader acknowledged


def _router(node: SimNode) -> Router:
    assert node.node is not None
    return node.node.router


async def _delete(node: SimNode, topic_id: bytes) -> int:
    answer = await _router(node).delete_topics(pb.DeleteTopicsRequest(topic_ids=[topic_id], timeout_ms=5000))
    return int(answer.topics[0].error_code)


async def _describe(node: SimNode, topic_id: bytes) -> tuple[int, dict[str, str]]:
    answer = await _router(node).describe_topic_configs(pb.DescribeTopicConfigsRequest(topic_ids=[topic_id]))
    topic = answer.topics[0]
    return int(topic.error_code), {c.name: c.value for c in topic.configs if not c.is_default}


async def _alter(node: SimNode, topic_id: bytes, **values: str) -> pb.AlterTopicConfigsResponse.TopicResult:
    topic = pb.AlterTopicConfigsRequest.Topic(
        topic_id=topic_id, set=[pb.TopicConfig(name=n.replace("_", "."), value=v) for n, v in values.items()]
    )
    answer = await _router(node).alter_topic_configs(pb.AlterTopicConfigsRequest(topics=[topic], timeout_ms=5000))
    return answer.topics[0]


def _read(node: SimNode, topic_id: bytes) -> list[int]:
    """Each partition's error code as the node answers FindBatches (any replica answers it)."""
    request = pb.FindBatchesRequest(
        fetch_max_bytes=1 << 20,
        topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
            pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1 << 20)
            for p in range(PARTITIONS)])],
    )  # fmt: skip
    answer = pb.FindBatchesResponse.FromString(_router(node).find_batches(request))
    return [p.error_code for p in answer.topics[0].partitions]


def _lagging(node: SimNode, topic_id: bytes) -> list[int]:
    """The coordinators whose replica on `node` (a follower) still holds partitions of the topic."""
    return [
        c
        for c, shard in enumerate(node.node.shards if node.node is not None else [])
        if not shard.leads and shard._view().partitions_of_topic(topic_id)
    ]


def test_a_node_that_acknowledged_a_deletion_answers_every_later_call_with_the_topic_gone(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        lagged = 0
        for attempt in range(3):
            deleter = sim.nodes[attempt % len(sim.nodes)]
            topic_id = uuid.uuid4().bytes
            name = f"deleted-{attempt}"
            await _create(sim.nodes[(attempt + 1) % len(sim.nodes)], topic_id, name)
            await asyncio.sleep(SETTLE_S)  # every node knows the topic from its own replicas
            assert await _found(deleter, topic_id, list(range(PARTITIONS))) == [pb.NONE] * PARTITIONS
            assert await _delete(deleter, topic_id) == pb.NONE
            lagged += len(_lagging(deleter, topic_id))
            # At once, on the node that acknowledged it: no partition found, no configuration, the name free again.
            codes = await _found(deleter, topic_id, list(range(PARTITIONS)))
            assert codes == [pb.UNKNOWN_TOPIC_OR_PARTITION] * PARTITIONS, (attempt, codes)
            assert (await _describe(deleter, topic_id))[0] == pb.UNKNOWN_TOPIC_OR_PARTITION
            # No batch served from a lagging replica either.
            assert _read(deleter, topic_id) == [pb.UNKNOWN_TOPIC_OR_PARTITION] * PARTITIONS
            assert await _delete(deleter, topic_id) == pb.UNKNOWN_TOPIC_ID
            await _create(deleter, uuid.uuid4().bytes, name)  # not TOPIC_ALREADY_EXISTS from a lagging replica
            # Later, once its replicas applied the deletion, still gone.
            await asyncio.sleep(SETTLE_S)
            assert not _lagging(deleter, topic_id)
            codes = await _found(deleter, topic_id, list(range(PARTITIONS)))
            assert codes == [pb.UNKNOWN_TOPIC_OR_PARTITION] * PARTITIONS, (attempt, codes)
        assert lagged, "no follower replica lagged the deletion when asked: nothing tested"

    simulate(tmp_path, 41, work)


def test_a_node_that_has_not_heard_of_a_new_topic_deletes_it_rather_than_call_it_unknown(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        unheard = 0
        for attempt in range(3):
            creator, deleter = sim.nodes[attempt % 3], sim.nodes[(attempt + 1) % 3]
            topic_id = uuid.uuid4().bytes
            await _create(creator, topic_id, f"fresh-{attempt}")
            known = _router(deleter).catalog.topic(topic_id)
            unheard += known is None or len(known.partitions) < PARTITIONS
            assert await _delete(deleter, topic_id) == pb.NONE, attempt  # before its replicas applied the creation
            codes = await _found(deleter, topic_id, list(range(PARTITIONS)))
            assert codes == [pb.UNKNOWN_TOPIC_OR_PARTITION] * PARTITIONS, (attempt, codes)
            await asyncio.sleep(SETTLE_S)
            for node in sim.nodes:  # every coordinator deleted its part: the topic is gone everywhere
                assert await _found(node, topic_id, list(range(PARTITIONS))) == [pb.UNKNOWN_TOPIC_OR_PARTITION] * (
                    PARTITIONS
                ), (attempt, node.node_id)
                assert node.node is not None
                held = [c for c, shard in enumerate(node.node.shards) if shard._view().partitions_of_topic(topic_id)]
                assert not held, (attempt, node.node_id, held)
        assert unheard, "every deleter's catalog knew the whole topic already: nothing tested"

    simulate(tmp_path, 42, work)


def test_a_configuration_change_is_in_place_on_every_node_once_acknowledged(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        topic_id = uuid.uuid4().bytes
        await _create(sim.nodes[0], topic_id, "configured")
        for attempt in range(6):
            changer = sim.nodes[attempt % 3]
            retention = str(60_000 * (attempt + 1))
            result = await _alter(changer, topic_id, retention_ms=retention)
            assert result.error_code == pb.NONE, result
            for node in (changer, *(n for n in sim.nodes if n is not changer)):  # at once, the changer first
                code, configs = await _describe(node, topic_id)
                assert (code, configs.get("retention.ms")) == (pb.NONE, retention), (attempt, node.node_id, configs)

    simulate(tmp_path, 43, work)


# ---------------------------------------------------------------- the catalog's rule, alone


def test_the_catalog_takes_no_creation_a_lagging_replica_applies_after_a_deletion_acknowledged_here() -> None:
    topic, name = uuid.uuid4().bytes, "lagging"
    created = [records.partition_created(p, topic, name, p) for p in range(2)]
    catalog = TopicCatalog(forgotten_max=2)
    catalog.apply_records(0, created[:1])  # coordinator 0's replica here applied the creation, 1's not yet
    catalog.learn(topic, name, {0: 0, 1: 1})
    catalog.forget(topic, [0, 1])
    assert catalog.topic(topic) is None and catalog.topic_id_of(name) is None
    catalog.apply_records(1, created[1:])  # the lagging replica catches up: creation first, then the deletion
    catalog.rebuild([PlacedPartition(1, topic, name, 1)])  # or reloads meanwhile
    assert catalog.topic(topic) is None
    catalog.apply_records(0, [records.topic_deleted(topic)])
    catalog.apply_records(1, [records.topic_deleted(topic)])
    catalog.apply_records(1, created[1:])  # created again (same id) elsewhere, after the deletion: taken
    assert catalog.coordinator_of(topic, 1) == 1
    # Learned again (this node created it anew, or its leader said so): taken whatever lagged.
    catalog.forget(topic, [0])
    catalog.learn(topic, name, {0: 0})
    catalog.apply_records(0, created[:1])
    assert catalog.coordinator_of(topic, 0) == 0
    # Bounded: the oldest entries go first.
    others = [uuid.uuid4().bytes for _ in range(3)]
    for other in others:
        catalog.forget(other, [0])
    catalog.apply_records(0, [records.partition_created(9, others[0], "oldest", 0)])
    catalog.apply_records(0, [records.partition_created(9, others[2], "newest", 0)])
    assert catalog.topic(others[0]) is not None and catalog.topic(others[2]) is None


@settings(max_examples=sized(200, 50), deadline=None)
@given(
    applied_before=st.lists(st.integers(0, 2), max_size=6),
    applied_after=st.lists(st.one_of(st.integers(0, 2), st.just(-1)), max_size=10),
)
def test_a_topic_deleted_here_never_comes_back_from_replicas_applying_late(
    applied_before: list[int], applied_after: list[int]
) -> None:
    """Model: each coordinator's replica here applies its log (the creation, then the deletion) one record at a
    time, in any interleaving, with reloads (-1: the catalog rebuilt from what the replicas applied); the node
    acknowledged the creation (learned) and then the deletion (forgot). From then on the topic is never found."""
    topic, name = b"\x01" * 16, "model"
    logs = {c: [records.partition_created(c, topic, name, c), records.topic_deleted(topic)] for c in range(3)}
    applied = dict.fromkeys(range(3), 0)
    catalog = TopicCatalog()

    def apply(c: int) -> None:
        if applied[c] < len(logs[c]):
            catalog.apply_records(c, [logs[c][applied[c]]])
            applied[c] += 1

    for c in applied_before:
        if applied[c] == 0:  # before the deletion is acknowledged, a replica here may have applied the creation only
            apply(c)
    catalog.learn(topic, name, {c: c for c in range(3)})
    catalog.forget(topic, [c for c in range(3) if applied[c] < len(logs[c])])
    for step in applied_after:
        if step < 0:
            catalog.rebuild(PlacedPartition(c, topic, name, c) for c in range(3) if applied[c] == 1)
        else:
            apply(step)
        assert catalog.topic(topic) is None and catalog.topic_id_of(name) is None, (applied, step)
