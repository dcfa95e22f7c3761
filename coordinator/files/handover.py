"""Calls between coordinators (protos/internal.proto): HandOverFiles and KnownFiles (DESIGN §5)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.files import ownership
from coordinator.files.describe_files import file_states_here, prefetch_files_facts
from coordinator.machine.state import reads
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import Operation
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


async def known_files(
    coordinators: NodeCoordinators, request: internal.KnownFilesRequest
) -> internal.KnownFilesResponse:
    """Which of the given coordinators know each key, and its state there, counting commits not yet applied.

    Only a coordinator's leader answers: a follower cannot see the commits its leader has in flight. The keys are
    looked up in steps of `diskless.coordinator.known.files.step.lookups` (keys times coordinators), yielding to
    the node's other work between steps: a file worker asks about up to a step of files at once, several workers
    at a time after a consolidation job, and one call holding the loop for all of them made commits wait. Within
    a step nothing else runs, so each key's answer is of one moment, as when every key was its own read; the
    coordinators are checked to be led here again at each step.
    """
    coordinators.limit_items(len(request.object_keys), "object keys")
    coordinators.limit_items(len(request.coordinator_ids), "coordinator ids")
    for coordinator_id in request.coordinator_ids:
        if not coordinators.hosts(coordinator_id):
            return internal.KnownFilesResponse(
                error_code=pb.NOT_COORDINATOR,
                error_message=f"coordinator {coordinator_id} is not hosted on this node",
            )
    keys = list(request.object_keys)
    step_keys = max(1, coordinators.settings.known_files_step_lookups // max(1, len(request.coordinator_ids)))
    response = internal.KnownFilesResponse()
    for start in range(0, len(keys), step_keys):
        if start:
            await asyncio.sleep(0)  # the node's commits and reads run between steps
        step = keys[start : start + step_keys]
        # The keys of files emptied long ago (a consolidation's): their rows' pages may have left the OS cache, and
        # the step's read on the loop would wait for the disk with every coordinator's commits. So the same read
        # first runs off the loop, its answer dropped; the step's own read stays on the loop, where nothing runs
        # between it and the look at the commits in flight (each key's answer of one moment).
        await prefetch_files_facts([coordinators.shard(i) for i in request.coordinator_ids], step)
        refused = _known_step(coordinators, request.coordinator_ids, step, response)
        if refused is not None:
            return refused
    return response


def _known_step(
    coordinators: NodeCoordinators,
    coordinator_ids: Sequence[int],
    keys: Sequence[str],
    response: internal.KnownFilesResponse,
) -> internal.KnownFilesResponse | None:
    """Adds the keys' answers to `response`, one read transaction per coordinator; a refusal instead, if any."""
    found = [response.files.add(object_key=key) for key in keys]
    for coordinator_id in coordinator_ids:
        shard = coordinators.shard(coordinator_id)
        try:
            shard.require_leader()
        except CoordinatorUnavailable as error:
            return internal.KnownFilesResponse(error_code=wire_code(error.error_code), error_message=error.message)
        try:
            states = file_states_here(shard, keys)
        except reads.DAMAGE_ERRORS as error:
            damaged = coordinators.damaged(shard, error)
            return internal.KnownFilesResponse(error_code=wire_code(damaged.error_code), error_message=damaged.message)
        for answer, state in zip(found, states, strict=True):
            if state is not None:
                answer.coordinator_ids.append(coordinator_id)
                answer.states.append(state)  # type: ignore[arg-type]  # a FileState value
    return None
