"""Every writing verb refuses the whole call with RESOURCE_EXHAUSTED, before anything is queued, when a coordinator it
needs has a full queue (`NodeCoordinators.require_room`). The flood that fills a real queue is in the slow lane
(tests/test_overload.py, CommitFile only); here the queue is made to say it is full, so that each verb's own call of
the bound is pinned in the fast lane. What the mutation run over coordinator/ found unpinned (issue #40, item 5;
docs/testing.md): `coordinators.require_room(...)` removed from DeleteRecords, CommitRemoteLogSegments and
ReplaceBatches each survived."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from protos import coordinator_pb2 as pb
from tests.harness import Broker, batch, high_watermark, topic_name
from tests.in_process import InProcessNode


def _delete_records(topic_id: bytes) -> Callable[[Broker], Any]:
    request = pb.DeleteRecordsRequest(topics=[pb.DeleteRecordsRequest.Topic(
        topic_id=topic_id, partitions=[pb.DeleteRecordsRequest.Partition(partition=0, offset=1)])])  # fmt: skip
    return lambda broker: broker.stub.DeleteRecords(request, timeout=30)


def _commit_remote_log_segments(topic_id: bytes) -> Callable[[Broker], Any]:
    request = pb.CommitRemoteLogSegmentsRequest(topics=[pb.CommitRemoteLogSegmentsRequest.Topic(
        topic_id=topic_id, partitions=[pb.CommitRemoteLogSegmentsRequest.Partition(
            partition=0, start_offset=0, end_offset=1, remote_log_segment_id="segment-0")])])  # fmt: skip
    return lambda broker: broker.stub.CommitRemoteLogSegments(request, timeout=30)


def _replace_batches(topic_id: bytes) -> Callable[[Broker], Any]:
    request = pb.ReplaceBatchesRequest(
        object_key="wal/merged/queue-full", object_format=1, file_size=1000, uploader_broker_id=1, owner_ids=[0, 1],
        extents=[pb.ReplaceBatchesRequest.Extent(topic_id=topic_id, partition=0, base_offset=0, last_offset=1,
                                                 byte_offset=0, size=100)],
    )  # fmt: skip
    return lambda broker: broker.stub.ReplaceBatches(request, timeout=30)


VERBS = {
    "DeleteRecords": _delete_records,
    "CommitRemoteLogSegments": _commit_remote_log_segments,
    "ReplaceBatches": _replace_batches,
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_full_queue_refuses_the_whole_call_before_anything_is_queued(fresh_node: InProcessNode, verb: str) -> None:
    node = fresh_node.start()
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("full"), 1)
    assert broker.commit([batch(topic_id, 0, 2)]).batches[0].error_code == pb.NONE
    shards = node.node.shards
    for shard in shards:
        shard.has_room = lambda: False  # type: ignore[method-assign]
    try:
        with pytest.raises(grpc.RpcError) as caught:
            VERBS[verb](topic_id)(broker)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value
    finally:
        for shard in shards:
            del shard.has_room
    assert high_watermark(node.stub, topic_id, 0) == 2
    listed = node.stub.ListOffsets(pb.ListOffsetsRequest(topics=[pb.ListOffsetsRequest.Topic(
        topic_id=topic_id, partitions=[pb.ListOffsetsRequest.Partition(partition=0, timestamp=-2)])]))  # fmt: skip
    assert listed.topics[0].partitions[0].offset == 0, "nothing of the refused call was applied"
