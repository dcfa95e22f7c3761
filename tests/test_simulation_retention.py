"""Retention in the simulated cluster (DESIGN §4a): the leader's bounded steps are records every replica applies
alike, and a new leader goes on with retention from the state it took over."""

from __future__ import annotations

from pathlib import Path

from coordinator.machine.state import file_reads, reads
from protos import coordinator_pb2 as pb
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _commit, _leader, _partition_of, _topic, _until, simulate


def test_followers_apply_the_leaders_retention_and_a_new_leader_goes_on(tmp_path: Path) -> None:
    """retention.bytes=250 with batches of 100 bytes keeps a partition's newest three batches: each replica holds
    the same log start and batches at the same applied offset, and after the leader is lost the next one applies
    retention to what was committed since."""
    settings = {
        "diskless.coordinator.retention.check.interval.ms": "5000",
        "diskless.coordinator.retention.batch.max": "2",
    }
    leader_at: dict[int, tuple[int, int]] = {}  # applied offset -> (log start, live batches) there
    followers_at: dict[int, tuple[int, int]] = {}

    def held(sim_node: SimNode, partition: int) -> tuple[int, int, int]:
        """(log start, live batches, applied offset) of the partition on coordinator 0 of the node."""
        with sim_node.shard(0).read_transaction() as db:
            offsets = reads.partition_offsets(db, TOPIC_ID, partition)
            assert offsets is not None
            return (
                offsets.log_start_offset,
                file_reads.coordinator_counts(db).live_batch_count,
                reads.applied_offset(db),
            )

    def watch(sim: SimCluster, partition: int) -> None:
        for sim_node in sim.nodes:
            if sim_node.up:
                log_start, live, applied = held(sim_node, partition)
                (leader_at if sim_node.shard(0).leads else followers_at)[applied] = (log_start, live)

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        partition = _partition_of(sim, 0)
        leader = _leader(sim, 0)
        assert leader.node is not None
        change = pb.AlterTopicConfigsRequest.Topic(
            topic_id=TOPIC_ID, set=[pb.TopicConfig(name="retention.bytes", value="250")]
        )
        altered = await leader.node.router.alter_topic_configs(pb.AlterTopicConfigsRequest(topics=[change]))
        assert altered.topics[0].error_code == pb.NONE, altered
        for i in range(7):
            assert await _commit(leader, partition, f"wal/retention/{i}") == i
        # Seven batches of 100 bytes: four go (in steps of at most two), three are kept.
        await _until("the leader applied retention", lambda: watch(sim, partition) or held(leader, partition)[0] == 4)
        await _until("every replica applied it", lambda: watch(sim, partition) or all(
            held(n, partition)[:2] == (4, 3) for n in sim.running()
        ))  # fmt: skip
        await sim.crash(leader.node_id)
        await _until("another node leads", lambda: bool(sim.leaders(0)))
        successor = _leader(sim, 0)
        for i in range(7, 10):
            assert await _commit(successor, partition, f"wal/retention/{i}") == i
        await _until(
            "the new leader applied retention", lambda: watch(sim, partition) or held(successor, partition)[0] == 7
        )
        await sim.start(leader.node_id)
        await _until("every replica applied it too", lambda: watch(sim, partition) or all(
            n.up and held(n, partition)[:2] == (7, 3) for n in sim.nodes
        ))  # fmt: skip
        for applied, state in followers_at.items():
            if applied in leader_at:
                assert state == leader_at[applied], f"at applied offset {applied}: follower {state}, leader {leader_at}"
        assert any(0 < log_start < 7 for log_start, _ in followers_at.values()), followers_at

    simulate(tmp_path, 28, work, settings=settings)
