"""DeleteTopics in bounded passes in the simulated cluster (DESIGN §4a): each pass is a record every replica applies,
and a new leader finishes a purge its predecessor started."""

from __future__ import annotations

from pathlib import Path

from coordinator.machine.state import file_reads, reads
from protos import coordinator_pb2 as pb
from tests.harness import find_batches_request
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _commit, _leader, _partition_of, _topic, _until, simulate


def test_a_deleted_topics_batches_leave_in_passes_that_followers_apply_and_a_new_leader_goes_on(
    tmp_path: Path,
) -> None:
    """DeleteTopics in bounded passes (DESIGN §4a) on three nodes: each pass is a record every replica applies, so a
    follower at an applied offset holds what the leader held there; when the leader is lost mid-purge, the next one
    finishes the purge."""
    settings = {
        "diskless.coordinator.topic.purge.batch.max": "4",
        "diskless.coordinator.topic.purge.interval.ms": "500",
    }
    batches = 18
    leader_at: dict[int, tuple[int, int]] = {}  # applied offset -> (live batches, topics awaiting purge) there
    followers_at: dict[int, tuple[int, int]] = {}

    def counts(sim_node: SimNode) -> tuple[int, int, int]:
        """(live batches, topics awaiting purge, applied offset) of coordinator 0 on the node."""
        with sim_node.shard(0).read_transaction() as db:
            return (
                file_reads.coordinator_counts(db).live_batch_count,
                reads.topics_awaiting_purge(db),
                reads.applied_offset(db),
            )

    def watch(sim: SimCluster) -> None:
        for sim_node in sim.nodes:
            if sim_node.up:
                live, awaiting, applied = counts(sim_node)
                (leader_at if sim_node.shard(0).leads else followers_at)[applied] = (live, awaiting)

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        for i in range(batches):
            assert await _commit(leader, partition, f"wal/purge/{i:02}") == i
        assert leader.node is not None
        deleted = await leader.node.router.delete_topics(pb.DeleteTopicsRequest(topic_ids=[TOPIC_ID], timeout_ms=5000))
        assert deleted.topics[0].error_code == pb.NONE
        assert counts(leader)[:2] == (batches, 1)  # unknown at once, its batches all still there
        await _until("every node applied the deletion", lambda: all(
            n.node is not None and n.node.catalog.topic(TOPIC_ID) is None for n in sim.nodes
        ))  # fmt: skip
        for sim_node in sim.nodes:
            assert sim_node.node is not None
            answer = sim_node.node.router.find_batches(find_batches_request(TOPIC_ID, partition, 0))
            found = pb.FindBatchesResponse.FromString(answer).topics[0].partitions[0]
            assert found.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
        # Passes of at most four batches, one per interval: the leader is lost after two of them.
        await _until("two passes ran", lambda: watch(sim) or counts(leader)[0] <= batches - 8, within_s=10)
        await _until("a follower applied them", lambda: watch(sim) or min(followers_at.values())[0] <= batches - 8)
        await sim.crash(leader.node_id)
        await _until("another node leads", lambda: bool(sim.leaders(0)))
        successor = _leader(sim, 0)
        await _until("the new leader finished the purge", lambda: watch(sim) or counts(successor)[:2] == (0, 0))
        await sim.start(leader.node_id)
        await _until("every replica finished it too", lambda: watch(sim) or all(
            n.up and counts(n)[:2] == (0, 0) for n in sim.nodes
        ))  # fmt: skip
        assert {batches - live for live, _ in leader_at.values()} <= {0, 4, 8, 12, 16, 18}, leader_at
        for applied, held in followers_at.items():
            if applied in leader_at:
                assert held == leader_at[applied], f"at applied offset {applied}: follower {held}, leader {leader_at}"
        assert any(0 < live < batches and applied in leader_at for applied, (live, _) in followers_at.items())

    simulate(tmp_path, 27, work, settings=settings)
