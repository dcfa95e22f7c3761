"""DescribeFiles: each key's state over the coordinators of this node (DESIGN §4, §7)."""

from __future__ import annotations

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.machine.object_keys import object_key_problem
from coordinator.machine.state import reads
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from protos import coordinator_pb2 as pb

# The most alive state among the answering coordinators wins.
_STATES_MOST_ALIVE_FIRST = (pb.FILE_STATE_LIVE, pb.FILE_STATE_AWAITING_HANDOVER, pb.FILE_STATE_AWAITING_DELETION)


def describe_files(coordinators: NodeCoordinators, request: pb.DescribeFilesRequest) -> pb.DescribeFilesResponse:
    coordinators.limit_items(len(request.object_keys), "object keys")
    response = pb.DescribeFilesResponse()
    for object_key in request.object_keys:
        result = response.files.add(object_key=object_key)
        problem = object_key_problem(object_key)
        if problem:
            result.error_code, result.error_message = pb.INVALID_REQUEST, problem
            continue
        _describe_file(coordinators, object_key, result)
    return response


def _describe_file(
    coordinators: NodeCoordinators, object_key: str, result: pb.DescribeFilesResponse.FileResult
) -> None:
    states = []
    for shard in coordinators.shards:
        try:
            shard.require_active()
        except CoordinatorUnavailable as error:
            # Without every coordinator's answer nobody may conclude the file is unknown.
            set_error(result, error)
            del result.coordinator_ids[:]
            return
        try:
            facts = shard.file_facts(object_key)
        except reads.DAMAGE_ERRORS as error:
            damaged = coordinators.damaged(shard, error)
            set_error(result, damaged)
            del result.coordinator_ids[:]
            return
        if facts is None:
            continue
        result.coordinator_ids.append(shard.coordinator_id)
        states.append(reads.file_state(facts))
    result.has_live_batches = pb.FILE_STATE_LIVE in states
    result.state = next((s for s in _STATES_MOST_ALIVE_FIRST if s in states), pb.FILE_STATE_UNKNOWN)
