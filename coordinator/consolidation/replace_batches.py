"""ReplaceBatches (DESIGN §4c): the request's own checks, then one part per coordinator, each one record.

As CommitFile: the request as a whole first (every extent INVALID_REQUEST), each extent's structure over the whole
request, then the extents split by their partition's coordinator, each coordinator's part checked and recorded
atomically (`rules.check_replace_part`); answers in request order. A coordinator not led here answers its extents
with its retriable error (the routing client sends them to its leader).
"""

from __future__ import annotations

from collections import defaultdict

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.result import ItemError
from coordinator.consolidation import rules
from coordinator.consolidation.prefetch import prefetch_replace_part
from coordinator.consolidation.rules import ExtentOutcome, ReplacePart
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import Operation
from protos import coordinator_pb2 as pb


class ReplaceCalls:
    """The node's ReplaceBatches calls. A job may send the calls whose runs share source files together
    (diskless.consolidation.replace.group.batches, spark/consolidation_tasks.py), so each coordinator's parts of
    them may wait for the process's append tick and share one group commit: one SQLite transaction then writes
    each source file's row and index pages once for all of them, not once per call (docs/benchmarks.md)."""

    def __init__(self, coordinators: NodeCoordinators) -> None:
        self._coordinators = coordinators
        self._in_flight = 0

    async def replace_batches(self, request: pb.ReplaceBatchesRequest) -> pb.ReplaceBatchesResponse:
        self._in_flight += 1
        try:
            # Other calls under way: their parts will follow, so the coordinators may group them (as CommitFile).
            return await replace_batches(self._coordinators, request, may_linger=self._in_flight > 1)
        finally:
            self._in_flight -= 1


async def replace_batches(
    coordinators: NodeCoordinators, request: pb.ReplaceBatchesRequest, may_linger: bool = False
) -> pb.ReplaceBatchesResponse:
    coordinators.limit_items(len(request.extents), "extents")
    extents = rules.request_extents(request)
    outcomes: list[ExtentOutcome | None] = [None] * len(extents)
    problem = rules.replace_request_problem(request, len(coordinators.shards))
    if problem:
        return _answer([ExtentOutcome(ErrorCode.INVALID_REQUEST, problem)] * len(extents))
    problems = rules.extent_structure_problems(extents, request.file_size)
    by_coordinator: dict[int, list[int]] = defaultdict(list)
    for index, extent in enumerate(extents):
        route = coordinators.route(extent.topic_id, [extent.partition])[0]
        if isinstance(route, ItemError):  # a malformed topic id, or a partition no coordinator holds
            outcomes[index] = ExtentOutcome(route.error_code, route.message)
        else:
            by_coordinator[route].append(index)
    coordinators.require_room(by_coordinator)
    owners = tuple(request.owner_ids)
    batch_max = coordinators.settings.replace_batch_max
    operations = {
        coordinator_id: Operation(
            rules.check_replace_part,
            ReplacePart(
                request.object_key,
                request.file_size,
                request.uploader_broker_id,
                owners,
                tuple(extents[i] for i in indexes),
                tuple(problems[i] for i in indexes),
                batch_max,
            ),
            object_key=request.object_key,  # known to DescribeFiles from the moment it is queued
            prefetch=prefetch_replace_part,  # the oldest rows of the state: read off the loop first
        )
        for coordinator_id, indexes in by_coordinator.items()
    }
    parts = await coordinators.run_parts(operations, request.timeout_ms, may_linger)
    moved = coordinators.metrics.replaced_batches
    for coordinator_id, part in parts.items():
        indexes = by_coordinator[coordinator_id]
        if isinstance(part, CoordinatorUnavailable):
            for index in indexes:
                outcomes[index] = ExtentOutcome(part.error_code, part.message)
            continue
        for index, outcome in zip(indexes, part, strict=True):
            outcomes[index] = outcome
        moved.labels(str(coordinator_id)).inc(sum(outcome.moved_batches for outcome in part))
    return _answer(outcomes)


def _answer(outcomes: list[ExtentOutcome | None] | list[ExtentOutcome]) -> pb.ReplaceBatchesResponse:
    response = pb.ReplaceBatchesResponse()
    for outcome in outcomes:
        assert outcome is not None  # every extent is answered: by the router, or by its coordinator
        response.extents.add(error_code=wire_code(outcome.error_code), error_message=outcome.message)
    return response
