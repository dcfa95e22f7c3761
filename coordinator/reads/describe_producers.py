"""DescribeProducers (KIP-664, DESIGN §4b): each partition's producers as its coordinator's leader holds them, after
everything pending at the call's arrival is applied (a strict read, as ListOffsets).

Kafka's answer from its ProducerStateManager: every producer with state in the partition, its epoch, last sequence
and timestamp, the coordinator epoch of its last marker and the first offset of its open transaction. An open
transaction's first offset far below the high watermark is a hanging transaction (`diskless transactions
find-hanging`).
"""

from __future__ import annotations

import apsw

from coordinator.machine.producers import decode_window
from coordinator.machine.state import reads
from coordinator.runtime.node_coordinators import NodeCoordinators
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
    response = pb.DescribeProducersResponse()
    await coordinators.read_at_leaders(
        request.topics,
        lambda topic_id: response.topics.add(topic_id=topic_id),
        _describe,
        lambda result: result.ClearField("active_producers"),
    )
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
