"""DescribeProducers (KIP-664, DESIGN §4b): each partition's producers as its coordinator's leader holds them, after
everything pending at the call's arrival is applied (a strict read, as ListOffsets).

Kafka's answer from its ProducerStateManager: every producer with state in the partition, its epoch, last sequence
and timestamp, the coordinator epoch of its last marker and the first offset of its open transaction. An open
transaction's first offset far below the high watermark is a hanging transaction (`diskless transactions
find-hanging`).
"""

from __future__ import annotations

from collections import defaultdict

import apsw

from coordinator.base.result import ItemError
from coordinator.machine.producers import decode_window
from coordinator.machine.state import reads
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from protos import coordinator_pb2 as pb

_Result = pb.DescribeProducersResponse.PartitionResult
_Pending = tuple[bytes, _Result]  # (topic id, its result)
# Every producer of the partition with its transaction state (a producer may have only a marker's coordinator epoch).
_PRODUCERS = (
    "SELECT p.producer_id, p.producer_epoch, p.window, p.last_timestamp, "
    "coalesce(t.coordinator_epoch, -1), coalesce(t.first_offset, -1) "
    "FROM producers AS p LEFT JOIN producer_transactions AS t "
    "ON t.partition_key = p.partition_key AND t.producer_id = p.producer_id "
    "WHERE p.partition_key = ? ORDER BY p.producer_id"
)


async def describe_producers(
    coordinators: NodeCoordinators, request: pb.DescribeProducersRequest
) -> pb.DescribeProducersResponse:
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    response = pb.DescribeProducersResponse()
    pending: dict[int, list[_Pending]] = defaultdict(list)
    for topic in request.topics:
        topic_result = response.topics.add(topic_id=topic.topic_id)
        routes = coordinators.route(topic.topic_id, list(topic.partitions))
        for partition, route in zip(topic.partitions, routes, strict=True):
            result = topic_result.partitions.add(partition=partition)
            if isinstance(route, ItemError):
                set_error(result, route)
            else:
                pending[route].append((topic.topic_id, result))
    barriers = await coordinators.wait_all_applied(list(pending), 0, leader_only=True)
    for coordinator_id, its in pending.items():
        failure = barriers.get(coordinator_id)
        if failure is not None:
            for _, result in its:
                set_error(result, failure)
            continue
        shard = coordinators.shard(coordinator_id)
        try:
            with shard.read_transaction() as db:
                for topic_id, result in its:
                    _describe(db, topic_id, result)
        except reads.DAMAGE_ERRORS as error:
            damaged = coordinators.damaged(shard, error)
            for _, result in its:
                result.ClearField("active_producers")
                set_error(result, damaged)
    return response


def _describe(db: apsw.Connection, topic_id: bytes, result: _Result) -> None:
    found = reads.partition_offsets(db, topic_id, result.partition)
    if found is None:
        result.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION
        result.error_message = f"partition {result.partition} of the topic is unknown"
        return
    for producer_id, epoch, packed, last_timestamp, coordinator_epoch, first_offset in db.execute(
        _PRODUCERS, (found.partition_key,)
    ):
        window = decode_window(epoch, packed, last_timestamp)
        result.active_producers.add(
            producer_id=producer_id,
            producer_epoch=epoch,
            last_sequence=window.entries[-1].last_sequence if window.entries else -1,
            last_timestamp=last_timestamp,
            coordinator_epoch=coordinator_epoch,
            current_txn_start_offset=first_offset,
        )
