"""CommitFile (DESIGN §4): the request's own checks, then one part per coordinator, committed atomically each."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, final

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, MalformedRequest
from coordinator.base.result import ItemError
from coordinator.commits import rules
from coordinator.commits.parts import BatchOutcome, CommitPart, RequestBatch, request_batches
from coordinator.config.settings import property_name
from coordinator.runtime.node_coordinators import NodeCoordinators
from coordinator.runtime.shard import Operation
from protos import coordinator_pb2 as pb


@final
class CommitFiles:
    def __init__(self, coordinators: NodeCoordinators, clock: Clock) -> None:
        self._coordinators = coordinators
        self._clock = clock
        self._in_flight = 0  # CommitFile calls between arrival and answer
        # Each coordinator's commit counters (batches, bytes, duplicates, retries), looked up once: `.labels()` per
        # part (its lock, its key checks) cost more than the counting.
        self._counters: dict[int, tuple[Any, Any, Any, Any]] = {}

    async def commit_file(self, request: pb.CommitFileRequest) -> pb.CommitFileResponse:
        self._in_flight += 1
        try:
            return await self._commit_file(request)
        finally:
            self._in_flight -= 1

    async def _commit_file(self, request: pb.CommitFileRequest) -> pb.CommitFileResponse:
        settings = self._coordinators.settings
        if not request.batches:
            raise MalformedRequest("CommitFile needs at least one batch")
        if len(request.batches) > settings.commit_max_batches:
            raise MalformedRequest(
                f"{len(request.batches)} batches in one CommitFile, more than "
                f"{property_name('commit_max_batches')} ({settings.commit_max_batches})"
            )
        response = pb.CommitFileResponse()
        problem = rules.commit_request_problem(request, len(self._coordinators.shards))
        if problem:
            for _ in request.batches:
                response.batches.add(
                    error_code=pb.INVALID_REQUEST,
                    error_message=problem,
                    assigned_base_offset=-1,
                    log_append_time=-1,
                    log_start_offset=-1,
                )
            return response
        batches = request_batches(request.batches)
        problems = rules.batch_structure_problems(batches, request.file_size)
        outcomes: list[BatchOutcome | None] = [None] * len(batches)
        by_coordinator = self._split(batches, problems, outcomes)
        self._coordinators.require_room(by_coordinator)
        owners = tuple(request.owner_ids)
        # One append time for the whole commit, whichever coordinators its batches reach (DESIGN §4).
        append_time_ms = self._clock.now_ms()
        operations = {
            coordinator_id: Operation(
                rules.check_commit_part,
                CommitPart(
                    request.object_key,
                    request.file_size,
                    request.uploader_broker_id,
                    owners,
                    tuple([batches[i] for i in indexes]),
                    tuple([problems[i] for i in indexes]),
                ),
                append_time_ms,
                object_key=request.object_key,  # known to DescribeFiles from the moment it is queued
            )
            for coordinator_id, indexes in by_coordinator.items()
        }
        # Other brokers' commits under way: their parts will follow, so the coordinators may group them.
        may_linger = self._in_flight > 1
        parts = await self._coordinators.run_parts(operations, request.timeout_ms, may_linger)
        for coordinator_id, outcome in parts.items():
            indexes = by_coordinator[coordinator_id]
            if isinstance(outcome, CoordinatorUnavailable):
                for index in indexes:
                    outcomes[index] = BatchOutcome(outcome.error_code, outcome.message)
            else:
                for index, batch_outcome in zip(indexes, outcome, strict=True):
                    outcomes[index] = batch_outcome
                self._count_commit(coordinator_id, [batches[i] for i in indexes], outcome)
        self._answer(outcomes, response)
        return response

    def _split(
        self,
        batches: Sequence[RequestBatch],
        problems: Sequence[ItemError | None],
        outcomes: list[BatchOutcome | None],
    ) -> dict[int, list[int]]:
        """Batch indexes by coordinator; batches that reach none get their outcome now."""
        by_coordinator: dict[int, list[int]] = defaultdict(list)
        catalog = self._coordinators.catalog
        assignments: dict[bytes, dict[int, int]] = {}  # topic id -> partition -> coordinator, per topic once
        for index, batch in enumerate(batches):
            item_problem = problems[index]
            if item_problem is not None and item_problem.error_code == ErrorCode.INVALID_REQUEST:
                outcomes[index] = BatchOutcome(item_problem.error_code, item_problem.message)
                continue
            assignment = assignments.get(batch.topic_id)
            if assignment is None:
                entry = catalog.topic(batch.topic_id)
                assignment = assignments[batch.topic_id] = {} if entry is None else entry.partitions
            coordinator_id = assignment.get(batch.partition)
            if coordinator_id is None:
                # A malformed batch is INVALID_RECORD even where its partition is unknown.
                unknown = item_problem or self._coordinators.unknown_partition(batch.partition)
                outcomes[index] = BatchOutcome(unknown.error_code, unknown.message)
                continue
            by_coordinator[coordinator_id].append(index)
        return by_coordinator

    def _answer(self, outcomes: Sequence[BatchOutcome | None], response: pb.CommitFileResponse) -> None:
        add = response.batches.add
        rejected = self._coordinators.metrics.rejected_batches
        for outcome in outcomes:
            assert outcome is not None
            code, message, base_offset, append_time, log_start_offset, duplicate, _ = outcome
            if code == ErrorCode.NONE and not duplicate:  # the common case, with the fewest fields to set
                add(assigned_base_offset=base_offset, log_append_time=append_time, log_start_offset=log_start_offset)
                continue
            if code != ErrorCode.NONE:
                rejected.labels(pb.ErrorCode.Name(code)).inc()
            add(
                error_code=code,
                error_message=message,
                assigned_base_offset=base_offset,
                log_append_time=append_time,
                log_start_offset=log_start_offset,
                is_duplicate=duplicate,
            )

    def _count_commit(
        self,
        coordinator_id: int,
        batches: Sequence[RequestBatch],
        outcomes: Sequence[BatchOutcome],
    ) -> None:
        counters = self._counters.get(coordinator_id)
        if counters is None:
            metrics, label = self._coordinators.metrics, str(coordinator_id)
            counters = self._counters[coordinator_id] = (
                metrics.committed_batches.labels(label),
                metrics.committed_bytes.labels(label),
                metrics.duplicate_batches.labels(label),
                metrics.retried_commits.labels(label),
            )
        committed_batches, committed_bytes, duplicate_batches, retried_commits = counters
        # One pass over the part, by position (error_code 0, is_duplicate 5, is_retry 6): this runs per part of
        # every commit, and a NamedTuple's field by name is a descriptor call.
        accepted = accepted_bytes = duplicates = 0
        for batch, outcome in zip(batches, outcomes, strict=True):
            if outcome[6]:  # the first answer again: its batches were counted then
                retried_commits.inc()
                return
            if outcome[5]:
                duplicates += 1
            elif outcome[0] == 0:
                accepted += 1
                accepted_bytes += batch.size
        if accepted:
            committed_batches.inc(accepted)
            committed_bytes.inc(accepted_bytes)
        if duplicates:
            duplicate_batches.inc(duplicates)
