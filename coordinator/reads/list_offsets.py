"""ListOffsets: strict reads, each after everything pending at its arrival is applied (DESIGN §3)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import apsw

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError
from coordinator.machine.state import reads
from coordinator.reads import offset_lookup
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error, wire_code
from protos import coordinator_pb2 as pb

_Pending = tuple[bytes, int, pb.ListOffsetsResponse.PartitionResult]  # (topic id, timestamp, its result)
# list_offset, or list_offset_committed for READ_COMMITTED (DESIGN §4b).
_Lookup = Callable[[apsw.Connection, reads.PartitionOffsets, int], tuple[ErrorCode, int, int]]


async def list_offsets(coordinators: NodeCoordinators, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    response = pb.ListOffsetsResponse()
    pending: dict[int, list[_Pending]] = defaultdict(list)
    for topic in request.topics:
        topic_result = response.topics.add(topic_id=topic.topic_id)
        routes = coordinators.route(topic.topic_id, [item.partition for item in topic.partitions])
        for item, route in zip(topic.partitions, routes, strict=True):
            result = topic_result.partitions.add(partition=item.partition, timestamp=-1, offset=-1)
            if isinstance(route, ItemError):
                set_error(result, route)
            elif (timestamp_problem := offset_lookup.timestamp_problem(item.timestamp)) is not None:
                result.error_code, result.error_message = pb.UNSUPPORTED_VERSION, timestamp_problem
            else:
                pending[route].append((topic.topic_id, item.timestamp, result))
    lookup = (
        offset_lookup.list_offset_committed
        if request.isolation_level == pb.READ_COMMITTED
        else offset_lookup.list_offset
    )
    barriers = await coordinators.wait_all_applied(list(pending), request.timeout_ms, leader_only=True)
    for coordinator_id, its in pending.items():
        failure = barriers.get(coordinator_id)
        if failure is not None:
            for _, _, result in its:
                set_error(result, failure)
            continue
        _read_offsets(coordinators, coordinator_id, its, lookup)
    return response


def _read_offsets(coordinators: NodeCoordinators, coordinator_id: int, its: list[_Pending], lookup: _Lookup) -> None:
    """Answers one coordinator's items from one read transaction of its committed state."""
    shard = coordinators.shard(coordinator_id)
    try:
        with shard.read_transaction() as db:
            for topic_id, timestamp, result in its:
                found = reads.partition_offsets(db, topic_id, result.partition)
                if found is None:
                    result.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION
                    result.error_message = f"partition {result.partition} of the topic is unknown"
                    continue
                code, result.timestamp, result.offset = lookup(db, found, timestamp)
                result.error_code = wire_code(code)
    except reads.DAMAGE_ERRORS as error:
        damaged = coordinators.damaged(shard, error)
        for _, _, result in its:
            set_error(result, damaged)
            result.timestamp = result.offset = -1
