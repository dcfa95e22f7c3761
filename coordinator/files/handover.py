"""Calls between coordinators (protos/internal.proto): HandOverFiles and KnownFiles (DESIGN §5)."""

from __future__ import annotations

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.files import ownership
from coordinator.files.describe_files import file_state_here
from coordinator.machine.state import reads
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import CoordinatorShard, Operation
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal


async def hand_over_files(
    coordinators: NodeCoordinators, request: internal.HandOverFilesRequest
) -> internal.HandOverFilesResponse:
    """Records the target coordinator as the owner of files its previous owner hands over."""
    coordinators.limit_items(len(request.files), "files")
    target = request.to_coordinator_id
    if not coordinators.hosts(target):
        return internal.HandOverFilesResponse(
            error_code=pb.NOT_COORDINATOR, error_message=f"coordinator {target} is not hosted on this node"
        )
    problem = ownership.hand_over_problem(request, len(coordinators.shards))
    if problem:
        return internal.HandOverFilesResponse(error_code=pb.INVALID_REQUEST, error_message=problem)
    coordinators.require_room([target])
    operation = Operation(ownership.check_receive_files, request)
    outcome = (await coordinators.run_parts({target: operation}, request.timeout_ms))[target]
    return internal.HandOverFilesResponse(error_code=wire_code(outcome.error_code), error_message=outcome.message)


def known_files(coordinators: NodeCoordinators, request: internal.KnownFilesRequest) -> internal.KnownFilesResponse:
    """Which of the given coordinators know each key, and its state there, counting commits not yet applied.

    Only a coordinator's leader answers: a follower cannot see the commits its leader has in flight.
    """
    coordinators.limit_items(len(request.object_keys), "object keys")
    coordinators.limit_items(len(request.coordinator_ids), "coordinator ids")
    shards: list[CoordinatorShard] = []
    for coordinator_id in request.coordinator_ids:
        if not coordinators.hosts(coordinator_id):
            return internal.KnownFilesResponse(
                error_code=pb.NOT_COORDINATOR,
                error_message=f"coordinator {coordinator_id} is not hosted on this node",
            )
        shard = coordinators.shard(coordinator_id)
        try:
            shard.require_leader()
        except CoordinatorUnavailable as error:
            return internal.KnownFilesResponse(error_code=wire_code(error.error_code), error_message=error.message)
        shards.append(shard)
    response = internal.KnownFilesResponse()
    for object_key in request.object_keys:
        found = response.files.add(object_key=object_key)
        for shard in shards:
            try:
                state = file_state_here(shard, object_key)
            except reads.DAMAGE_ERRORS as error:
                damaged = coordinators.damaged(shard, error)
                code = wire_code(damaged.error_code)
                return internal.KnownFilesResponse(error_code=code, error_message=damaged.message)
            if state is not None:
                found.coordinator_ids.append(shard.coordinator_id)
                found.states.append(state)  # type: ignore[arg-type]  # a FileState value
    return response
