"""Tiered offload (KIP-405) and its disablement (KIP-950) in the simulated cluster (DESIGN §4a): every replica
applies an offload's record alike, a new leader answers from the positions its predecessor moved, and KIP-950's
delete moves the log start on every replica."""

from __future__ import annotations

from pathlib import Path

from coordinator.machine.state import file_reads, reads
from protos import coordinator_pb2 as pb
from tests.harness import find_batches_request
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _commit, _leader, _partition_of, _topic, _until, simulate

Positions = tuple[int, int, int, int]  # (log start, local log start, high watermark, live batches)


def _positions(sim_node: SimNode, partition: int) -> Positions:
    """The partition's positions in coordinator 0's committed state on the node."""
    with sim_node.shard(0).read_transaction() as db:
        found = reads.partition_offsets(db, TOPIC_ID, partition)
        assert found is not None
        live = file_reads.coordinator_counts(db).live_batch_count
        return found.log_start_offset, found.local_log_start_offset, found.high_watermark, live


async def _alter(sim_node: SimNode, values: dict[str, str]) -> int:
    assert sim_node.node is not None
    topic = pb.AlterTopicConfigsRequest.Topic(
        topic_id=TOPIC_ID, set=[pb.TopicConfig(name=n, value=v) for n, v in values.items()]
    )
    answer = await sim_node.node.router.alter_topic_configs(pb.AlterTopicConfigsRequest(topics=[topic]))
    return answer.topics[0].error_code


async def _offload(sim_node: SimNode, partition: int, start: int, end: int) -> pb.CommitRemoteLogSegmentsResponse:
    assert sim_node.node is not None
    part = pb.CommitRemoteLogSegmentsRequest.Partition(partition=partition, start_offset=start, end_offset=end)
    request = pb.CommitRemoteLogSegmentsRequest(
        topics=[pb.CommitRemoteLogSegmentsRequest.Topic(topic_id=TOPIC_ID, partitions=[part])], timeout_ms=5000
    )
    return await sim_node.node.router.commit_remote_log_segments(request)


def _every_replica(sim: SimCluster, partition: int, expected: Positions) -> bool:
    return all(n.up and _positions(n, partition) == expected for n in sim.nodes)


def test_offloads_replicate_survive_a_failover_and_kip_950_delete_moves_the_log_start_everywhere(
    tmp_path: Path,
) -> None:
    batches = 8

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        assert await _alter(leader, {"remote.storage.enable": "true"}) == pb.NONE
        for i in range(batches):
            assert await _commit(leader, partition, f"wal/tier/{i:02}") == i
        result = (await _offload(leader, partition, 0, 5)).topics[0].partitions[0]
        assert (result.error_code, result.local_log_start_offset, result.remote_log_end_offset) == (pb.NONE, 5, 4)
        await _until("every replica applied the offload", lambda: _every_replica(sim, partition, (0, 5, batches, 3)))
        for sim_node in sim.nodes:  # followers serve FindBatches: below the local start is remote storage's
            assert sim_node.node is not None
            answer = sim_node.node.router.find_batches(find_batches_request(TOPIC_ID, partition, 2))
            found = pb.FindBatchesResponse.FromString(answer).topics[0].partitions[0]
            assert (found.error_code, found.local_log_start_offset) == (pb.OFFSET_MOVED_TO_TIERED_STORAGE, 5)

        await sim.crash(leader.node_id)
        await _until("another node leads", lambda: bool(sim.leaders(0)))
        successor = _leader(sim, 0)
        retried = (await _offload(successor, partition, 0, 5)).topics[0].partitions[0]  # the copier's retry
        assert (retried.error_code, retried.local_log_start_offset) == (pb.NONE, 5)
        assert (await _offload(successor, partition, 5, 7)).topics[0].partitions[0].error_code == pb.NONE
        assert await _alter(successor, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}) == 0
        await sim.start(leader.node_id)
        await _until(
            "every replica forgot the remote range", lambda: _every_replica(sim, partition, (7, 7, batches, 1))
        )

    simulate(tmp_path, 31, work)
