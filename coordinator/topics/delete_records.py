"""DeleteRecords: moves partitions' log starts forward, one part per coordinator."""

from __future__ import annotations

from collections import defaultdict

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.base.result import ItemError
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from coordinator.runtime.shard import Operation
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb


async def delete_records(coordinators: NodeCoordinators, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    response = pb.DeleteRecordsResponse()
    items: dict[int, list[tuple[bytes, int, int]]] = defaultdict(list)
    slots: dict[int, list[pb.DeleteRecordsResponse.PartitionResult]] = defaultdict(list)
    for topic in request.topics:
        topic_result = response.topics.add(topic_id=topic.topic_id)
        routes = coordinators.route(topic.topic_id, [item.partition for item in topic.partitions])
        for item, route in zip(topic.partitions, routes, strict=True):
            result = topic_result.partitions.add(partition=item.partition, low_watermark=-1)
            if isinstance(route, ItemError):
                set_error(result, route)
                continue
            items[route].append((topic.topic_id, item.partition, item.offset))
            slots[route].append(result)
    coordinators.require_room(items)
    operations = {
        c: Operation(partition_checks.check_delete_records, partition_checks.DeleteRecords(tuple(its)))
        for c, its in items.items()
    }
    for coordinator_id, outcome in (await coordinators.run_parts(operations, request.timeout_ms)).items():
        for index, result in enumerate(slots[coordinator_id]):
            if isinstance(outcome, CoordinatorUnavailable):
                set_error(result, outcome)
            else:
                answer = outcome[index]
                set_error(result, answer)
                result.low_watermark = answer.low_watermark
    return response
