"""CommitRemoteLogSegments (DESIGN §4a, KIP-405): a broker's tiered-storage copier reports a partition's batches
below an offset as held in remote log segments.

Only the refusals are built so far: a malformed topic id (INVALID_REQUEST), an unknown topic or partition
(UNKNOWN_TOPIC_OR_PARTITION), and a topic whose configuration does not allow offloads, `remote.storage.enable=false`
or `remote.log.copy.disable=true` (POLICY_VIOLATION), each decided by the coordinator's leader on its view. The
offload itself (the batches leaving the coordinator, the local log start moving) is not built yet: a partition of a
topic that allows it is answered INVALID_REQUEST saying so, and nothing changes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from coordinator.runtime.shard import Operation
from coordinator.topics.topic_configs import (
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_STORAGE_ENABLE,
    ConfigDefaults,
    effective_configs,
)
from protos import coordinator_pb2 as pb

NOT_BUILT = "tiered offload is not implemented yet: the batches stay in the coordinator"

PartitionResult = pb.CommitRemoteLogSegmentsResponse.PartitionResult


@dataclass(frozen=True, slots=True)
class RemoteSegments:
    items: tuple[tuple[bytes, int, int, int], ...]  # (topic id, partition, start offset, end offset), in request order
    defaults: ConfigDefaults


def check_commit_remote_log_segments(
    view: CoordinatorView, request: RemoteSegments, now_ms: int
) -> Result[list[ItemError]]:
    """Per item, why the offload is refused (nothing is recorded yet: see the module's note)."""
    outcomes = []
    for topic_id, partition_index, _start, _end in request.items:
        if view.partition(topic_id, partition_index) is None:
            outcomes.append(
                ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {partition_index} of the topic is unknown")
            )
            continue
        configs = effective_configs(view.topic_configs(topic_id), request.defaults)
        if not configs.remote_storage_enable:
            outcomes.append(ItemError(ErrorCode.POLICY_VIOLATION, f"{REMOTE_STORAGE_ENABLE} is false for this topic"))
        elif configs.remote_log_copy_disable:
            outcomes.append(ItemError(ErrorCode.POLICY_VIOLATION, f"{REMOTE_LOG_COPY_DISABLE} is true for this topic"))
        else:
            outcomes.append(ItemError(ErrorCode.INVALID_REQUEST, NOT_BUILT))
    return Result([], outcomes)


async def commit_remote_log_segments(
    coordinators: NodeCoordinators, request: pb.CommitRemoteLogSegmentsRequest
) -> pb.CommitRemoteLogSegmentsResponse:
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    defaults = ConfigDefaults.from_settings(coordinators.settings)
    response = pb.CommitRemoteLogSegmentsResponse()
    items: dict[int, list[tuple[bytes, int, int, int]]] = defaultdict(list)
    slots: dict[int, list[PartitionResult]] = defaultdict(list)
    for topic in request.topics:
        topic_result = response.topics.add(topic_id=topic.topic_id)
        routes = coordinators.route(topic.topic_id, [item.partition for item in topic.partitions])
        for item, route in zip(topic.partitions, routes, strict=True):
            result = topic_result.partitions.add(
                partition=item.partition, log_start_offset=-1, local_log_start_offset=-1, remote_log_end_offset=-1
            )
            if isinstance(route, ItemError):
                set_error(result, route)
                continue
            items[route].append((topic.topic_id, item.partition, item.start_offset, item.end_offset))
            slots[route].append(result)
    coordinators.require_room(items)
    operations = {
        c: Operation(check_commit_remote_log_segments, RemoteSegments(tuple(its), defaults)) for c, its in items.items()
    }
    for coordinator_id, outcome in (await coordinators.run_parts(operations, request.timeout_ms)).items():
        for index, result in enumerate(slots[coordinator_id]):
            set_error(result, outcome if isinstance(outcome, CoordinatorUnavailable) else outcome[index])
    return response
