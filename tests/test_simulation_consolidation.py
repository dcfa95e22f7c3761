"""Object consolidation in the simulated three-node cluster (DESIGN §4c, §6a): a ReplaceBatches is a record like any
other, so the followers answer FindBatches at the new positions once they apply it, and it survives its leader's
crash: the new leader answers the new positions, a retry of the call changes nothing, and commits go on."""

from __future__ import annotations

from pathlib import Path

from protos import coordinator_pb2 as pb
from tests.harness import find_batches_request
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _commit, _leader, _partition_of, _topic, _until, simulate

MERGED_KEY = "wal/merged"


def positions(sim_node: SimNode, partition: int) -> list[tuple[str, int, int]]:
    """(object key, byte offset, base offset) of the partition's batches, as this node's FindBatches answers them."""
    if sim_node.node is None:
        return []
    try:
        raw = sim_node.node.router.find_batches(find_batches_request(TOPIC_ID, partition, 0))
    except Exception:  # a replica not serving yet: asked again
        return []
    found = pb.FindBatchesResponse.FromString(raw).topics[0].partitions[0]
    return [(b.object_key, b.byte_offset, b.base_offset) for b in found.batches]


def test_a_replace_is_on_the_followers_and_survives_a_leader_crash(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        assert leader.node is not None
        partition = _partition_of(sim, 0)
        for i in range(3):  # offsets 0, 1, 2: one batch of 100 bytes each, in files of their own
            assert await _commit(leader, partition, f"wal/old-{i}") == i
        request = pb.ReplaceBatchesRequest(
            object_key=MERGED_KEY, object_format=1, file_size=300, uploader_broker_id=1, owner_ids=[0],
            extents=[pb.ReplaceBatchesRequest.Extent(
                topic_id=TOPIC_ID, partition=partition, base_offset=0, last_offset=2, byte_offset=0, size=300)],
            timeout_ms=3000,
        )  # fmt: skip
        answer = await leader.node.router.replace_batches(request)
        assert [e.error_code for e in answer.extents] == [pb.NONE], answer
        moved = [(MERGED_KEY, 0, 0), (MERGED_KEY, 100, 1), (MERGED_KEY, 200, 2)]
        assert positions(leader, partition) == moved
        followers = [n for n in sim.running() if n.node_id != leader.node_id]
        await _until(
            "every follower answers the new positions",
            lambda: all(positions(n, partition) == moved for n in followers),
            within_s=10,
        )

        # The plan is the leader's word: a follower refuses it retriably (the routing client asks the leader).
        asked = pb.GetFileMergeWorkItemRequest(coordinator_id=0)
        for follower in followers:
            assert follower.node is not None
            assert (await follower.node.router.get_file_merge_work_item(asked)).error_code == pb.NOT_COORDINATOR
        planned = await leader.node.router.get_file_merge_work_item(asked)
        assert planned.error_code == pb.NONE and MERGED_KEY in [f.object_key for f in planned.files]

        await sim.crash(leader.node_id)
        await _until(
            "a surviving node leads coordinator 0",
            lambda: any(n.node_id != leader.node_id for n in sim.leaders(0)),
            within_s=10,
        )
        new = _leader(sim, 0)
        assert new.node is not None and new.node_id != leader.node_id
        assert positions(new, partition) == moved
        retried = await new.node.router.replace_batches(request)  # the answer was lost with the old leader
        assert [e.error_code for e in retried.extents] == [pb.NONE] and positions(new, partition) == moved
        assert await _commit(new, partition, "wal/after-crash") == 3
        described = (await new.node.router.describe_files(pb.DescribeFilesRequest(object_keys=[MERGED_KEY]))).files[0]
        assert (described.state, described.has_live_batches) == (pb.FILE_STATE_LIVE, True)

    simulate(tmp_path, 51, work)
