"""Tiered-storage offload (KIP-405) and its disablement (KIP-950) through the real socket (DESIGN §4a):
CommitRemoteLogSegments' rules and answers, FindBatches and ListOffsets below the local log start, DeleteRecords
below it, `remote.log.copy.disable` and `remote.storage.enable=false` with its remote data deleted, the bound on the
batches one call removes, and the positions across a restart, a log replay and a snapshot restore."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from coordinator.client.routing_client import RoutingClient
from coordinator.config.settings import Settings
from coordinator.reads.find_batches import find_batches
from coordinator.reads.readers.board import Status, StatusBoard
from coordinator.reads.readers.state_files import reader_coordinators
from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    assert_state_equals_log_rebuild,
    batch,
    coordinator_state_files,
    delete_records,
    describe_file,
    fetch,
    list_offset,
    new_topic_id,
    topic_name,
)
from tests.in_process import InProcessNode
from tests.snapshot_helpers import MANUAL_SNAPSHOTS, create_snapshots

Segment = tuple[int, int]  # (start offset, end offset)
TIMESTAMP = 1_700_000_000_000


def tiered_topic(broker: Broker, partitions: int = 1, **configs: str) -> bytes:
    topic_id = new_topic_id()
    given = {"remote.storage.enable": "true", **configs}
    request = pb.CreatePartitionsRequest(topics=[pb.CreatePartitionsRequest.Topic(
        topic_id=topic_id, name=topic_name("tier"), num_partitions=partitions,
        configs=[pb.TopicConfig(name=n, value=v) for n, v in given.items()])])  # fmt: skip
    assert broker.stub.CreatePartitions(request).topics[0].error_code == pb.NONE
    return topic_id


def commit(broker: Broker, topic_id: bytes, records: int, timestamp: int, partition: int = 0) -> str:
    """One batch of `records` offsets in a file of its own; its object key."""
    key = f"wal/tier/{new_topic_id().hex()}"
    answer = broker.commit([batch(topic_id, partition, records, max_timestamp=timestamp)], object_key=key)
    assert answer.batches[0].error_code == pb.NONE, answer
    return key


def offload(
    broker: Broker, topic_id: bytes, *segments: Segment, partition: int = 0
) -> list[pb.CommitRemoteLogSegmentsResponse.PartitionResult]:
    parts = [
        pb.CommitRemoteLogSegmentsRequest.Partition(partition=partition, start_offset=s, end_offset=e)
        for s, e in segments
    ]
    request = pb.CommitRemoteLogSegmentsRequest(
        topics=[pb.CommitRemoteLogSegmentsRequest.Topic(topic_id=topic_id, partitions=parts)]
    )
    return list(broker.stub.CommitRemoteLogSegments(request).topics[0].partitions)


def positions(result: pb.CommitRemoteLogSegmentsResponse.PartitionResult) -> tuple[int, int, int, int]:
    return result.error_code, result.log_start_offset, result.local_log_start_offset, result.remote_log_end_offset


def listed(broker: Broker, topic_id: bytes) -> tuple[int, int, int]:
    """ListOffsets -2, -4, -5: (log start, local log start, remote end)."""
    found = [list_offset(broker.stub, topic_id, 0, t) for t in (-2, -4, -5)]
    assert all(r.error_code == pb.NONE for r in found), found
    return found[0].offset, found[1].offset, found[2].offset


def alter(broker: Broker, topic_id: bytes, values: Mapping[str, str]) -> int:
    topic = pb.AlterTopicConfigsRequest.Topic(
        topic_id=topic_id, set=[pb.TopicConfig(name=n, value=v) for n, v in values.items()]
    )
    return broker.stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(topics=[topic])).topics[0].error_code


def test_an_offload_moves_the_local_start_and_reads_below_it_go_to_remote_storage(broker: Broker) -> None:
    topic_id = tiered_topic(broker)
    keys = [commit(broker, topic_id, 2, TIMESTAMP + i) for i in range(4)]  # offsets 0..7, 2 per batch
    assert listed(broker, topic_id) == (0, 0, -1)
    assert positions(offload(broker, topic_id, (0, 4))[0]) == (pb.NONE, 0, 4, 3)
    assert listed(broker, topic_id) == (0, 4, 3)
    # The offloaded batches left the coordinator: their files go on to deletion (DESIGN §5).
    assert [describe_file(broker.stub, k).state for k in keys] == [pb.FILE_STATE_AWAITING_DELETION] * 2 + [
        pb.FILE_STATE_LIVE
    ] * 2
    below = fetch(broker.stub, topic_id, 0, 1)
    assert (below.error_code, below.log_start_offset, below.local_log_start_offset) == (
        pb.OFFSET_MOVED_TO_TIERED_STORAGE, 0, 4,
    )  # fmt: skip
    at = fetch(broker.stub, topic_id, 0, 4)
    assert (at.error_code, at.local_log_start_offset, [b.base_offset for b in at.batches]) == (pb.NONE, 4, [4, 6])
    # A timestamp remote data may answer is remote storage's; a later one is answered here.
    assert list_offset(broker.stub, topic_id, 0, TIMESTAMP + 1).error_code == pb.OFFSET_MOVED_TO_TIERED_STORAGE
    later = list_offset(broker.stub, topic_id, 0, TIMESTAMP + 2)
    assert (later.error_code, later.timestamp, later.offset) == (pb.NONE, TIMESTAMP + 2, 4)


def test_commit_remote_log_segments_refuses_what_the_rules_refuse_and_a_retry_changes_nothing(broker: Broker) -> None:
    topic_id = tiered_topic(broker)
    for i in range(3):
        commit(broker, topic_id, 3, TIMESTAMP + i)  # offsets 0..8, batches end at 2, 5, 8
    answers = offload(broker, topic_id, (0, 4), (0, 10), (1, 3), (-1, 3), (3, 2), (0, 3), (0, 3), (0, 2), (4, 6))
    assert [a.error_code for a in answers] == [
        pb.INVALID_REQUEST,  # 4 is not one past a batch's last offset
        pb.OFFSET_OUT_OF_RANGE,  # past the high watermark 9
        pb.INVALID_REQUEST,  # starts past the local start 0
        pb.INVALID_REQUEST,  # a negative start
        pb.INVALID_REQUEST,  # end before start
        pb.NONE,  # 0..3: the first batch
        pb.NONE,  # its retry: no change
        pb.NONE,  # a segment already below the local start: no change
        pb.INVALID_REQUEST,  # 4 > local start 3: offsets would be skipped
    ], answers
    assert all(positions(a)[1:] == (-1, -1, -1) for a in answers if a.error_code != pb.NONE)
    assert [positions(a) for a in answers[5:8]] == [(pb.NONE, 0, 3, 2)] * 3
    assert "one past a batch" in answers[0].error_message
    assert listed(broker, topic_id) == (0, 3, 2)
    # A segment may start before the local start (it overlaps what is remote already): from it, on.
    assert positions(offload(broker, topic_id, (1, 9))[0]) == (pb.NONE, 0, 9, 8)
    assert fetch(broker.stub, topic_id, 0, 9).error_code == pb.NONE  # the high watermark: nothing held, no error


def test_delete_records_below_the_local_start_moves_only_the_log_start(broker: Broker) -> None:
    topic_id = tiered_topic(broker)
    for i in range(4):
        commit(broker, topic_id, 1, TIMESTAMP + i)
    assert offload(broker, topic_id, (0, 2))[0].error_code == pb.NONE
    assert delete_records(broker.stub, topic_id, 0, 1).low_watermark == 1  # remote expiry
    assert listed(broker, topic_id) == (1, 2, 1)
    assert fetch(broker.stub, topic_id, 0, 0).error_code == pb.OFFSET_OUT_OF_RANGE
    assert fetch(broker.stub, topic_id, 0, 1).error_code == pb.OFFSET_MOVED_TO_TIERED_STORAGE
    assert delete_records(broker.stub, topic_id, 0, 3).low_watermark == 3  # past the local start: as ever
    assert listed(broker, topic_id) == (3, 3, -1)
    # Nothing remote any more: the old remote timestamps are answered from the batches held.
    found = list_offset(broker.stub, topic_id, 0, 0)
    assert (found.error_code, found.offset) == (pb.NONE, 3)


def test_kip_950_copy_disable_refuses_offloads_and_turning_remote_storage_off_forgets_the_remote_range(
    broker: Broker,
) -> None:
    topic_id = tiered_topic(broker)
    for i in range(6):
        commit(broker, topic_id, 1, TIMESTAMP + i)
    assert offload(broker, topic_id, (0, 2))[0].error_code == pb.NONE
    assert alter(broker, topic_id, {"remote.log.copy.disable": "true"}) == pb.NONE
    refused = offload(broker, topic_id, (2, 3))[0]
    assert refused.error_code == pb.POLICY_VIOLATION and "remote.log.copy.disable" in refused.error_message
    assert listed(broker, topic_id) == (0, 2, 1)  # "retain": the remote data stays readable
    assert alter(broker, topic_id, {"remote.storage.enable": "false"}) == pb.INVALID_CONFIG  # KIP-950's check
    assert alter(broker, topic_id, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}) == 0
    assert listed(broker, topic_id) == (2, 2, -1)  # "delete": the log start moved to the local start
    assert fetch(broker.stub, topic_id, 0, 1).error_code == pb.OFFSET_OUT_OF_RANGE
    assert offload(broker, topic_id, (2, 3))[0].error_code == pb.POLICY_VIOLATION
    assert list_offset(broker.stub, topic_id, 0, 0).offset == 2
    # Re-enabled, offloads go on from the local start, offsets continuous.
    assert alter(broker, topic_id, {"remote.storage.enable": "true", "remote.log.copy.disable": "false"}) == 0
    assert [positions(a) for a in offload(broker, topic_id, (2, 3), (3, 4))] == [(0, 2, 3, 2), (0, 2, 4, 3)]
    assert fetch(broker.stub, topic_id, 0, 3).error_code == pb.OFFSET_MOVED_TO_TIERED_STORAGE
    assert [b.base_offset for b in fetch(broker.stub, topic_id, 0, 4).batches] == [4, 5]


def test_one_call_takes_at_most_the_bound_of_batches_out_of_a_coordinator(tmp_path: Path) -> None:
    node = InProcessNode(
        tmp_path / "data", coordinators=1, settings={"diskless.coordinator.remote.segment.batch.max": "3"}
    ).start()
    try:
        broker = Broker(node.stub, 1)
        topic_id = tiered_topic(broker, partitions=2)
        for partition in (0, 1):
            for i in range(4):
                commit(broker, topic_id, 1, TIMESTAMP + i, partition=partition)
        too_many = offload(broker, topic_id, (0, 4))[0]
        assert too_many.error_code == pb.INVALID_REQUEST
        assert "diskless.coordinator.remote.segment.batch.max" in too_many.error_message
        # Within one call the bound is shared: the second segment passes what the first left.
        parts = [pb.CommitRemoteLogSegmentsRequest.Partition(partition=p, start_offset=0, end_offset=2) for p in (0, 1)]
        request = pb.CommitRemoteLogSegmentsRequest(
            topics=[pb.CommitRemoteLogSegmentsRequest.Topic(topic_id=topic_id, partitions=parts)]
        )
        first, second = node.stub.CommitRemoteLogSegments(request).topics[0].partitions
        assert (first.error_code, second.error_code) == (pb.NONE, pb.INVALID_REQUEST)
        assert positions(offload(broker, topic_id, (0, 2), partition=1)[0]) == (pb.NONE, 0, 2, 1)
        registry = node.node.metrics.registry
        assert registry.get_sample_value("diskless_offloaded_batches_total", {"coordinator": "0"}) == 4
    finally:
        node.stop()


def test_positions_survive_a_restart_a_log_replay_and_a_snapshot_restore(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=1, settings=MANUAL_SNAPSHOTS).start()
    try:
        broker = Broker(node.stub, 1)
        topic_id = tiered_topic(broker)
        for i in range(6):
            commit(broker, topic_id, 1, TIMESTAMP + 10 * i)
        assert offload(broker, topic_id, (0, 3))[0].error_code == pb.NONE
        assert delete_records(broker.stub, topic_id, 0, 1).error_code == pb.NONE
        expected = (1, 3, 2)

        def answers(broker: Broker) -> tuple[tuple[int, int, int], int, int]:
            timestamp_query = list_offset(broker.stub, topic_id, 0, TIMESTAMP + 20).error_code
            return listed(broker, topic_id), timestamp_query, fetch(broker.stub, topic_id, 0, 2).error_code

        seen = answers(broker)
        assert seen == (expected, pb.OFFSET_MOVED_TO_TIERED_STORAGE, pb.OFFSET_MOVED_TO_TIERED_STORAGE)
        node.restart()
        assert answers(Broker(node.stub, 1)) == seen
        node.stop()
        assert_state_equals_log_rebuild(node.data_dir, 1, tmp_path / "rebuilt")  # I1, the positions included
        for path in coordinator_state_files(node.data_dir, 0):
            path.unlink(missing_ok=True)
        node.start()  # the state replayed from the log
        broker = Broker(node.stub, 1)
        assert answers(broker) == seen
        create_snapshots(node)
        assert offload(broker, topic_id, (3, 4))[0].error_code == pb.NONE  # the log's tail after the snapshot
        node.stop()
        for path in coordinator_state_files(node.data_dir, 0):
            path.unlink(missing_ok=True)
        node.start()
        assert "restored snapshot" in "".join(node.output)
        assert listed(Broker(node.stub, 1), topic_id) == (1, 4, 3)
    finally:
        if node.is_running():
            node.stop()


def test_a_reader_process_answers_find_batches_below_the_local_start_as_the_node_does(
    server: InProcessNode, broker: Broker
) -> None:
    """Reader processes run the node's FindBatches over the state files (coordinator/reads/readers): here their view
    of the files, in this process, against the node's own answer."""
    topic_id = tiered_topic(broker)
    for i in range(4):
        commit(broker, topic_id, 1, TIMESTAMP + i)
    assert offload(broker, topic_id, (0, 2))[0].error_code == pb.NONE
    board = StatusBoard.create(server.coordinators)
    for coordinator_id in range(server.coordinators):
        board.publish(coordinator_id, Status(0, 1))
    directories = [server.data_dir / f"coordinator-{c}" for c in range(server.coordinators)]
    request = pb.FindBatchesRequest(
        fetch_max_bytes=1 << 20,
        topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
            pb.FindBatchesRequest.Partition(partition=0, offset=o, max_partition_fetch_bytes=1 << 20)
            for o in (0, 1, 2, 3)])],
    )  # fmt: skip
    with reader_coordinators(Settings(), directories, board, lambda *_: None) as view:
        read = pb.FindBatchesResponse.FromString(find_batches(view, request))
    assert read == server.stub.FindBatches(request)
    results = read.topics[0].partitions
    assert [(r.error_code, r.local_log_start_offset) for r in results] == [
        (pb.OFFSET_MOVED_TO_TIERED_STORAGE, 2), (pb.OFFSET_MOVED_TO_TIERED_STORAGE, 2), (pb.NONE, 2), (pb.NONE, 2),
    ]  # fmt: skip


def test_the_routing_client_offloads_each_partition_at_its_coordinators_leader(
    server: InProcessNode, broker: Broker
) -> None:
    topic_id = tiered_topic(broker, partitions=4)
    for partition in range(4):
        commit(broker, topic_id, 2, TIMESTAMP, partition=partition)
    parts = [pb.CommitRemoteLogSegmentsRequest.Partition(partition=p, start_offset=0, end_offset=2) for p in range(4)]
    request = pb.CommitRemoteLogSegmentsRequest(
        topics=[pb.CommitRemoteLogSegmentsRequest.Topic(topic_id=topic_id, partitions=parts)]
    )

    async def call() -> pb.CommitRemoteLogSegmentsResponse:
        async with RoutingClient(["127.0.0.1:1", server.address], deadline_ms=10_000) as client:
            return await client.commit_remote_log_segments(request)

    answered = asyncio.run(call()).topics[0].partitions
    assert [(r.partition, *positions(r)) for r in answered] == [(p, pb.NONE, 0, 2, 1) for p in range(4)]
    assert {fetch(broker.stub, topic_id, p, 0).error_code for p in range(4)} == {pb.OFFSET_MOVED_TO_TIERED_STORAGE}
