"""The node's router: splits each request by coordinator, runs the parts, assembles the answer.

Every list in a request gets one result per item, in request order. Items
whose coordinator is not here, or cannot serve now, get that coordinator's
error; the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator import commits, fetch, offsets, partitions, wal_files
from coordinator.catalog import TopicCatalog
from coordinator.clock import Clock
from coordinator.errors import CoordinatorUnavailable, ErrorCode, MalformedRequest, Overloaded
from coordinator.logs import EveryInterval
from coordinator.metrics import Metrics
from coordinator.settings import Settings, property_name
from coordinator.shard import CoordinatorShard, ShardState
from coordinator.state import reads
from coordinator.topics import coordinator_for_new_partition, topic_id_problem, topic_name_problem
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal

log = logging.getLogger(__name__)
OVERLOAD_LOG_INTERVAL_S = 10.0  # one overload line per coordinator per interval, with the count it stood for
REQUEST_TIMED_OUT_MESSAGE = "the operation did not complete within the request's timeout; it may still complete"


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


class Router:
    def __init__(
        self, shards: Sequence[CoordinatorShard], settings: Settings, clock: Clock, metrics: Metrics | None = None
    ) -> None:
        self.shards = list(shards)
        self._clock = clock
        self._metrics = metrics or Metrics()
        self._overload_log = EveryInterval(OVERLOAD_LOG_INTERVAL_S)
        self.settings = settings
        self.catalog = TopicCatalog()
        self.endpoint = Endpoint("127.0.0.1", 0)
        self._admin_lock = asyncio.Lock()  # topic creation and deletion are serialised node-wide
        self._commits_in_flight = 0  # CommitFile calls between arrival and answer

    def rebuild_catalog(self) -> None:
        """Reads every loaded coordinator's partitions into the catalog."""
        self.catalog = TopicCatalog()
        for shard in self.shards:
            if shard.state is ShardState.ACTIVE:
                for partition in shard.view.partitions():
                    self.catalog.add_partitions(
                        partition.topic_id, partition.topic_name, {partition.partition: shard.coordinator_id}
                    )

    # ------------------------------------------------------------------ helpers

    def _timeout_s(self, timeout_ms: int) -> float:
        chosen = timeout_ms if timeout_ms > 0 else self.settings.request_timeout_ms
        return min(chosen, self.settings.request_timeout_max_ms) / 1000

    def _limit_items(self, count: int, what: str) -> None:
        if count > self.settings.request_max_items:
            raise MalformedRequest(
                f"{count} {what} in one call, more than {property_name('request_max_items')} "
                f"({self.settings.request_max_items})"
            )

    def _shard(self, coordinator_id: int) -> CoordinatorShard:
        return self.shards[coordinator_id]

    def _unknown_partition(self, partition: int) -> tuple[ErrorCode, str]:
        """A partition the catalog lacks is unknown only if every coordinator could say so.

        While a coordinator is out of service its partitions are missing from the catalog; a broker told
        UNKNOWN_TOPIC_OR_PARTITION would tell its clients the topic does not exist, so it gets that
        coordinator's retriable error instead.
        """
        for shard in self.shards:
            if shard.state is not ShardState.ACTIVE:
                try:
                    shard.require_active()
                except CoordinatorUnavailable as error:
                    return error.error_code, f"partition {partition} may be on a coordinator not in service: {error}"
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {partition} of the topic is unknown"

    def _damaged(self, shard: CoordinatorShard, error: Exception) -> CoordinatorUnavailable:
        """A read met damage in a coordinator's state: out of service it goes, to rebuild (DESIGN §6)."""
        shard.report_damage(error)
        return CoordinatorUnavailable(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"coordinator {shard.coordinator_id} found its state damaged ({type(error).__name__}: {error}) and is "
            "rebuilding it; retry",
        )

    def _require_room(self, coordinator_ids: Sequence[int]) -> None:
        """Refuses the call before anything is queued when any coordinator's queue is full."""
        for coordinator_id in coordinator_ids:
            shard = self._shard(coordinator_id)
            if shard.state is ShardState.ACTIVE and not shard.has_room():
                self._metrics.overloaded_calls.labels(str(coordinator_id)).inc()
                if self._overload_log.allow(coordinator_id):
                    log.warning(
                        "coordinator %d overloaded: queue full (%d), refusing calls with RESOURCE_EXHAUSTED "
                        "(%d more refusals since the last line)",
                        coordinator_id,
                        self.settings.queue_max_operations,
                        self._overload_log.take_suppressed(coordinator_id),
                    )
                raise Overloaded(
                    f"coordinator {coordinator_id}'s queue is full ({property_name('queue_max_operations')}="
                    f"{self.settings.queue_max_operations}); retry with backoff"
                )

    async def _run_parts(self, checks: dict[int, Any], timeout_ms: int, may_linger: bool = False) -> dict[int, Any]:
        """Submits one check per coordinator; returns per coordinator the response or the error."""
        futures: dict[int, asyncio.Future[Any]] = {}
        outcomes: dict[int, Any] = {}
        for coordinator_id, check in checks.items():
            try:
                futures[coordinator_id] = self._shard(coordinator_id).submit(check, may_linger)
            except CoordinatorUnavailable as error:
                outcomes[coordinator_id] = error
        if futures:
            await asyncio.wait(futures.values(), timeout=self._timeout_s(timeout_ms))
        for coordinator_id, future in futures.items():
            if not future.done():
                outcomes[coordinator_id] = CoordinatorUnavailable(
                    ErrorCode.REQUEST_TIMED_OUT, REQUEST_TIMED_OUT_MESSAGE
                )
                future.add_done_callback(_consume)
            elif future.exception() is not None:
                error = future.exception()
                outcomes[coordinator_id] = (
                    error
                    if isinstance(error, CoordinatorUnavailable)
                    else CoordinatorUnavailable(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(error).__name__}: {error}")
                )
            else:
                outcomes[coordinator_id] = future.result()
        return outcomes

    # ------------------------------------------------------------------ CreatePartitions

    async def create_partitions(self, request: pb.CreatePartitionsRequest) -> pb.CreatePartitionsResponse:
        self._limit_items(len(request.topics), "topics")
        response = pb.CreatePartitionsResponse()
        async with self._admin_lock:
            for topic in request.topics:
                code, message = await self._create_topic_partitions(topic, request.timeout_ms)
                response.topics.add(topic_id=topic.topic_id, error_code=code, error_message=message)
        return response

    def _admin_unavailable(self) -> tuple[int, str] | None:
        """Topic-wide rules need every coordinator's partitions: refuse while one is not serving."""
        for shard in self.shards:
            try:
                shard.require_active()
            except CoordinatorUnavailable as error:
                return int(error.error_code), f"topic changes wait for every coordinator: {error.message}"
        return None

    async def _create_topic_partitions(
        self, topic: pb.CreatePartitionsRequest.Topic, timeout_ms: int
    ) -> tuple[int, str]:
        problem = topic_id_problem(topic.topic_id)
        if problem:
            return pb.INVALID_REQUEST, problem
        problem = topic_name_problem(topic.name)
        if problem:
            return pb.INVALID_TOPIC_EXCEPTION, problem
        unavailable = self._admin_unavailable()
        if unavailable:
            return unavailable
        # Identity before counts, as Kafka's controller: a clash is reported whatever the count asked for.
        entry = self.catalog.topic(topic.topic_id)
        if entry is not None and entry.name != topic.name:
            return pb.INCONSISTENT_TOPIC_ID, f"topic id belongs to topic {entry.name!r}, not {topic.name!r}"
        owner_of_name = self.catalog.topic_id_of(topic.name)
        if owner_of_name is not None and owner_of_name != topic.topic_id:
            return pb.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} exists with id {owner_of_name.hex()}"
        wanted = topic.num_partitions
        if wanted <= 0 or wanted > self.settings.topic_partitions_max:
            return pb.INVALID_PARTITIONS, (
                f"num_partitions must be 1..{self.settings.topic_partitions_max} "
                f"({property_name('topic_partitions_max')}), got {wanted}"
            )
        existing = entry.partitions if entry is not None else {}
        current = max(existing) + 1 if existing else 0
        if wanted < current:
            return pb.INVALID_PARTITIONS, f"topic {topic.name!r} has {current} partitions; cannot go down to {wanted}"
        missing = partitions.missing_partitions(list(existing), wanted)
        if not missing:
            return pb.NONE, ""
        coordinators = len(self.shards)
        by_coordinator: dict[int, list[int]] = defaultdict(list)
        for partition in missing:
            by_coordinator[coordinator_for_new_partition(topic.topic_id, partition, coordinators)].append(partition)
        try:
            self._require_room(list(by_coordinator))
        except Overloaded as error:
            return pb.COORDINATOR_NOT_AVAILABLE, str(error)
        checks = {
            coordinator_id: _bind(
                partitions.check_create_partitions,
                partitions.CreatePartitions(topic.topic_id, topic.name, tuple(wanted_here)),
            )
            for coordinator_id, wanted_here in by_coordinator.items()
        }
        outcomes = await self._run_parts(checks, timeout_ms)
        first_error: tuple[int, str] | None = None
        for coordinator_id, outcome in outcomes.items():
            if isinstance(outcome, CoordinatorUnavailable):
                first_error = first_error or (int(outcome.error_code), outcome.message)
            else:
                self.catalog.add_partitions(
                    topic.topic_id, topic.name, {p: coordinator_id for p in by_coordinator[coordinator_id]}
                )
        return first_error or (pb.NONE, "")

    # ------------------------------------------------------------------ DeleteTopics

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        self._limit_items(len(request.topic_ids), "topics")
        response = pb.DeleteTopicsResponse()
        async with self._admin_lock:
            for topic_id in request.topic_ids:
                code, message = await self._delete_topic(topic_id, request.timeout_ms)
                response.topics.add(topic_id=topic_id, error_code=code, error_message=message)
        return response

    async def _delete_topic(self, topic_id: bytes, timeout_ms: int) -> tuple[int, str]:
        problem = topic_id_problem(topic_id)
        if problem:
            return pb.INVALID_REQUEST, problem
        unavailable = self._admin_unavailable()
        if unavailable:
            return unavailable
        entry = self.catalog.topic(topic_id)
        if entry is None:
            return pb.UNKNOWN_TOPIC_ID, f"topic id {topic_id.hex()} is unknown"
        holders = sorted(set(entry.partitions.values()))
        try:
            self._require_room(holders)
        except Overloaded as error:
            return pb.COORDINATOR_NOT_AVAILABLE, str(error)
        request = partitions.DeleteTopic(topic_id)
        outcomes = await self._run_parts(
            {c: _bind(partitions.check_delete_topic, request) for c in holders}, timeout_ms
        )
        done = [c for c, outcome in outcomes.items() if not isinstance(outcome, CoordinatorUnavailable)]
        self.catalog.remove_partitions(topic_id, done)
        for outcome in outcomes.values():
            if isinstance(outcome, CoordinatorUnavailable):
                return int(outcome.error_code), outcome.message
        return pb.NONE, ""

    # ------------------------------------------------------------------ CommitFile

    async def commit_file(self, request: pb.CommitFileRequest) -> pb.CommitFileResponse:
        self._commits_in_flight += 1
        try:
            return await self._commit_file(request)
        finally:
            self._commits_in_flight -= 1

    async def _commit_file(self, request: pb.CommitFileRequest) -> pb.CommitFileResponse:
        batches = request.batches
        if not batches:
            raise MalformedRequest("CommitFile needs at least one batch")
        if len(batches) > self.settings.commit_max_batches:
            raise MalformedRequest(
                f"{len(batches)} batches in one CommitFile, more than {property_name('commit_max_batches')} "
                f"({self.settings.commit_max_batches})"
            )
        response = pb.CommitFileResponse()
        results = response.batches
        problem = commits.commit_request_problem(request, len(self.shards))
        if problem:
            for _ in batches:
                results.add(error_code=pb.INVALID_REQUEST, error_message=problem, **_NO_OFFSETS)
            return response
        batches = commits.request_batches(batches)
        problems = commits.batch_structure_problems(batches, request.file_size)
        outcomes: list[commits.BatchOutcome | None] = [None] * len(batches)
        by_coordinator: dict[int, list[int]] = defaultdict(list)
        assignments: dict[bytes, dict[int, int]] = {}  # topic id -> partition -> coordinator, per topic once
        for index, batch in enumerate(batches):
            item_problem = problems[index]
            if item_problem is not None and item_problem.error_code == ErrorCode.INVALID_REQUEST:
                outcomes[index] = commits.BatchOutcome(item_problem.error_code, item_problem.message)
                continue
            assignment = assignments.get(batch.topic_id)
            if assignment is None:
                entry = self.catalog.topic(batch.topic_id)
                assignment = assignments[batch.topic_id] = {} if entry is None else entry.partitions
            coordinator_id = assignment.get(batch.partition)
            if coordinator_id is None:
                outcomes[index] = (
                    commits.BatchOutcome(item_problem.error_code, item_problem.message)
                    if item_problem is not None
                    else commits.BatchOutcome(*self._unknown_partition(batch.partition))
                )
                continue
            by_coordinator[coordinator_id].append(index)
        self._require_room(list(by_coordinator))
        owners = tuple(request.owner_ids)
        # One append time for the whole commit, whichever coordinators its batches reach (DESIGN §4).
        append_time_ms = self._clock.now_ms()
        checks = {
            coordinator_id: _bind_time(
                append_time_ms,
                commits.check_commit_part,
                commits.CommitPart(
                    request.object_key,
                    request.file_size,
                    request.uploader_broker_id,
                    owners,
                    tuple([batches[i] for i in indexes]),
                    tuple([problems[i] for i in indexes]),
                ),
            )
            for coordinator_id, indexes in by_coordinator.items()
        }
        # Other brokers' commits under way: their parts will follow, so the coordinators may group them.
        may_linger = self._commits_in_flight > 1
        for coordinator_id, outcome in (await self._run_parts(checks, request.timeout_ms, may_linger)).items():
            indexes = by_coordinator[coordinator_id]
            if isinstance(outcome, CoordinatorUnavailable):
                for index in indexes:
                    outcomes[index] = commits.BatchOutcome(outcome.error_code, outcome.message)
            else:
                for index, batch_outcome in zip(indexes, outcome, strict=True):
                    outcomes[index] = batch_outcome
                self._count_commit(coordinator_id, [batches[i] for i in indexes], outcome)
        add = results.add
        rejected = self._metrics.rejected_batches
        for outcome in outcomes:
            assert outcome is not None
            code, message, base_offset, append_time, log_start_offset, duplicate = outcome
            if code == ErrorCode.NONE and not duplicate:  # the common case, with the fewest fields to set
                add(assigned_base_offset=base_offset, log_append_time=append_time, log_start_offset=log_start_offset)
                continue
            if code != ErrorCode.NONE:
                rejected.labels(code.name).inc()
            add(
                error_code=code,
                error_message=message,
                assigned_base_offset=base_offset,
                log_append_time=append_time,
                log_start_offset=log_start_offset,
                is_duplicate=duplicate,
            )
        return response

    def _count_commit(
        self,
        coordinator_id: int,
        batches: Sequence[commits.RequestBatch],
        outcomes: Sequence[commits.BatchOutcome],
    ) -> None:
        label = str(coordinator_id)
        accepted = [b.size for b, o in zip(batches, outcomes, strict=True) if o.error_code == 0 and not o.is_duplicate]
        duplicates = sum(1 for o in outcomes if o.is_duplicate)
        if accepted:
            self._metrics.committed_batches.labels(label).inc(len(accepted))
            self._metrics.committed_bytes.labels(label).inc(sum(accepted))
        if duplicates:
            self._metrics.duplicate_batches.labels(label).inc(duplicates)

    # ------------------------------------------------------------------ DeleteRecords

    async def delete_records(self, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
        self._limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
        response = pb.DeleteRecordsResponse()
        items: dict[int, list[tuple[bytes, int, int]]] = defaultdict(list)
        slots: dict[int, list[pb.DeleteRecordsResponse.PartitionResult]] = defaultdict(list)
        for topic in request.topics:
            topic_result = response.topics.add(topic_id=topic.topic_id)
            problem = topic_id_problem(topic.topic_id)
            for item in topic.partitions:
                result = topic_result.partitions.add(partition=item.partition, low_watermark=-1)
                coordinator_id = None if problem else self.catalog.coordinator_of(topic.topic_id, item.partition)
                if problem:
                    result.error_code, result.error_message = pb.INVALID_REQUEST, problem
                elif coordinator_id is None:
                    result.error_code, result.error_message = self._unknown_partition(item.partition)
                else:
                    items[coordinator_id].append((topic.topic_id, item.partition, item.offset))
                    slots[coordinator_id].append(result)
        self._require_room(list(items))
        checks = {
            c: _bind(partitions.check_delete_records, partitions.DeleteRecords(tuple(its))) for c, its in items.items()
        }
        for coordinator_id, outcome in (await self._run_parts(checks, request.timeout_ms)).items():
            for index, result in enumerate(slots[coordinator_id]):
                if isinstance(outcome, CoordinatorUnavailable):
                    result.error_code, result.error_message = outcome.error_code, outcome.message
                else:
                    answer = outcome[index]
                    result.error_code, result.error_message = answer.error_code, answer.message
                    result.low_watermark = answer.low_watermark
        return response

    # ------------------------------------------------------------------ ListOffsets

    async def list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        self._limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
        response = pb.ListOffsetsResponse()
        pending: dict[int, list[tuple[bytes, int, pb.ListOffsetsResponse.PartitionResult]]] = defaultdict(list)
        for topic in request.topics:
            topic_result = response.topics.add(topic_id=topic.topic_id)
            problem = topic_id_problem(topic.topic_id)
            for item in topic.partitions:
                result = topic_result.partitions.add(partition=item.partition, timestamp=-1, offset=-1)
                coordinator_id = None if problem else self.catalog.coordinator_of(topic.topic_id, item.partition)
                if problem:
                    result.error_code, result.error_message = pb.INVALID_REQUEST, problem
                elif coordinator_id is None:
                    result.error_code, result.error_message = self._unknown_partition(item.partition)
                elif (timestamp_problem := offsets.timestamp_problem(item.timestamp)) is not None:
                    result.error_code, result.error_message = pb.UNSUPPORTED_VERSION, timestamp_problem
                else:
                    pending[coordinator_id].append((topic.topic_id, item.timestamp, result))
        barriers = await self._wait_all_applied(list(pending), request.timeout_ms)
        for coordinator_id, its in pending.items():
            failure = barriers.get(coordinator_id)
            if failure is not None:
                for _, _, result in its:
                    result.error_code, result.error_message = failure.error_code, failure.message
                continue
            shard = self._shard(coordinator_id)
            try:
                with shard.store.read_snapshot() as db:
                    for topic_id, timestamp, result in its:
                        found = reads.partition_offsets(db, topic_id, result.partition)
                        if found is None:
                            result.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION
                            result.error_message = f"partition {result.partition} of the topic is unknown"
                            continue
                        code, result.timestamp, result.offset = offsets.list_offset(db, found, timestamp)
                        result.error_code = code
            except reads.DAMAGE_ERRORS as error:
                damaged = self._damaged(shard, error)
                for _, _, result in its:
                    result.error_code, result.error_message = damaged.error_code, damaged.message
                    result.timestamp = result.offset = -1

        return response

    async def _wait_all_applied(
        self, coordinator_ids: Sequence[int], timeout_ms: int
    ) -> dict[int, CoordinatorUnavailable]:
        """Waits until each coordinator has applied what was pending now; returns the ones that could not."""
        failures: dict[int, CoordinatorUnavailable] = {}
        waits: dict[int, asyncio.Task[None]] = {}
        for coordinator_id in coordinator_ids:
            shard = self._shard(coordinator_id)
            try:
                shard.require_active()
            except CoordinatorUnavailable as error:
                failures[coordinator_id] = error
                continue
            waits[coordinator_id] = asyncio.ensure_future(shard.wait_applied(shard.speculative_end_offset))
        if waits:
            await asyncio.wait(waits.values(), timeout=self._timeout_s(timeout_ms))
        for coordinator_id, task in waits.items():
            if not task.done():
                task.cancel()
                failures[coordinator_id] = CoordinatorUnavailable(
                    ErrorCode.REQUEST_TIMED_OUT, REQUEST_TIMED_OUT_MESSAGE
                )
            elif (error := task.exception()) is not None:
                failures[coordinator_id] = (
                    error
                    if isinstance(error, CoordinatorUnavailable)
                    else CoordinatorUnavailable(ErrorCode.UNKNOWN_SERVER_ERROR, str(error))
                )
            else:
                try:
                    self._shard(coordinator_id).require_active()
                except CoordinatorUnavailable as unavailable:
                    failures[coordinator_id] = unavailable
        return failures

    # ------------------------------------------------------------------ FindBatches

    def find_batches(self, request: pb.FindBatchesRequest) -> pb.FindBatchesResponse:
        self._limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
        budget = fetch.FetchBudget(
            request.fetch_max_bytes, request.max_batches_per_partition, self.settings.find_batches_max_results
        )
        response = pb.FindBatchesResponse()
        with contextlib.ExitStack() as snapshots:
            opened: dict[int, Any] = {}
            for topic in request.topics:
                topic_result = response.topics.add(topic_id=topic.topic_id)
                problem = topic_id_problem(topic.topic_id)
                for item in topic.partitions:
                    result = topic_result.partitions.add(
                        partition=item.partition, log_start_offset=-1, high_watermark=-1
                    )
                    coordinator_id = None if problem else self.catalog.coordinator_of(topic.topic_id, item.partition)
                    if problem:
                        result.error_code, result.error_message = pb.INVALID_REQUEST, problem
                        continue
                    if coordinator_id is None:
                        result.error_code, result.error_message = self._unknown_partition(item.partition)
                        continue
                    shard = self._shard(coordinator_id)
                    try:
                        shard.require_active()
                        db = opened.get(coordinator_id)
                        if db is None:
                            db = opened[coordinator_id] = snapshots.enter_context(shard.store.read_snapshot())
                        found = reads.partition_offsets(db, topic.topic_id, item.partition)
                        if found is None:
                            result.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION
                            result.error_message = f"partition {item.partition} of the topic is unknown"
                            continue
                        fetch.fetch_partition(db, found, item.offset, item.max_partition_fetch_bytes, budget, result)
                    except CoordinatorUnavailable as error:
                        result.error_code, result.error_message = error.error_code, error.message
                    except reads.DAMAGE_ERRORS as error:
                        damaged = self._damaged(shard, error)
                        del result.batches[:]
                        result.error_code, result.error_message = damaged.error_code, damaged.message
                        result.log_start_offset = result.high_watermark = -1
        return response

    # ------------------------------------------------------------------ DescribeFiles

    def describe_files(self, request: pb.DescribeFilesRequest) -> pb.DescribeFilesResponse:
        self._limit_items(len(request.object_keys), "object keys")
        response = pb.DescribeFilesResponse()
        for object_key in request.object_keys:
            result = response.files.add(object_key=object_key)
            problem = commits.object_key_problem(object_key)
            if problem:
                result.error_code, result.error_message = pb.INVALID_REQUEST, problem
                continue
            self._describe_file(object_key, result)
        return response

    def _describe_file(self, object_key: str, result: pb.DescribeFilesResponse.FileResult) -> None:
        states = []
        for shard in self.shards:
            try:
                shard.require_active()
            except CoordinatorUnavailable as error:
                # Without every coordinator's answer nobody may conclude the file is unknown.
                result.error_code, result.error_message = error.error_code, error.message
                del result.coordinator_ids[:]
                return
            try:
                facts = reads.file_facts(shard.store.reader, object_key)
            except reads.DAMAGE_ERRORS as error:
                damaged = self._damaged(shard, error)
                result.error_code, result.error_message = damaged.error_code, damaged.message
                del result.coordinator_ids[:]
                return
            if facts is None:
                continue
            result.coordinator_ids.append(shard.coordinator_id)
            states.append(reads.file_state(facts))
        result.has_live_batches = pb.FILE_STATE_LIVE in states
        for state in (pb.FILE_STATE_LIVE, pb.FILE_STATE_AWAITING_HANDOVER, pb.FILE_STATE_AWAITING_DELETION):
            if state in states:
                result.state = state
                return
        result.state = pb.FILE_STATE_UNKNOWN

    # ------------------------------------------------------------------ between coordinators (protos/internal.proto)

    async def hand_over_files(self, request: internal.HandOverFilesRequest) -> internal.HandOverFilesResponse:
        """Records the target coordinator as the owner of files its previous owner hands over."""
        self._limit_items(len(request.files), "files")
        target = request.to_coordinator_id
        if not 0 <= target < len(self.shards):
            return internal.HandOverFilesResponse(
                error_code=pb.NOT_COORDINATOR, error_message=f"coordinator {target} is not hosted on this node"
            )
        problem = wal_files.hand_over_problem(request, len(self.shards))
        if problem:
            return internal.HandOverFilesResponse(error_code=pb.INVALID_REQUEST, error_message=problem)
        self._require_room([target])
        outcome = (await self._run_parts({target: _bind(wal_files.check_receive_files, request)}, request.timeout_ms))[
            target
        ]
        return internal.HandOverFilesResponse(error_code=outcome.error_code, error_message=outcome.message)

    def known_files(self, request: internal.KnownFilesRequest) -> internal.KnownFilesResponse:
        """Which of the given coordinators know each key, counting commits not yet applied."""
        self._limit_items(len(request.object_keys), "object keys")
        self._limit_items(len(request.coordinator_ids), "coordinator ids")
        shards = []
        for coordinator_id in request.coordinator_ids:
            if not 0 <= coordinator_id < len(self.shards):
                return internal.KnownFilesResponse(
                    error_code=pb.NOT_COORDINATOR,
                    error_message=f"coordinator {coordinator_id} is not hosted on this node",
                )
            shard = self._shard(coordinator_id)
            try:
                shard.require_active()
            except CoordinatorUnavailable as error:
                return internal.KnownFilesResponse(error_code=error.error_code, error_message=error.message)
            shards.append(shard)
        response = internal.KnownFilesResponse()
        for object_key in request.object_keys:
            known = [shard.coordinator_id for shard in shards if shard.view.file_known(object_key)]
            response.files.add(object_key=object_key, coordinator_ids=known)
        return response

    # ------------------------------------------------------------------ FindCoordinator, DescribeCoordinators

    def _endpoint(self, coordinator_id: int) -> pb.CoordinatorEndpoint:
        shard = self._shard(coordinator_id)
        active = shard.state is ShardState.ACTIVE
        return pb.CoordinatorEndpoint(
            coordinator_id=coordinator_id,
            leader_node_id=self.settings.node_id if active else -1,
            host=self.endpoint.host,
            port=self.endpoint.port,
            leader_epoch=shard.view.leader_epoch if active else -1,
        )

    def find_coordinator(self, request: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
        self._limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
        response = pb.FindCoordinatorResponse()
        named: list[int] = []
        for topic in request.topics:
            topic_result = response.topics.add(topic_id=topic.topic_id)
            problem = topic_id_problem(topic.topic_id)
            for partition in topic.partitions:
                coordinator_id = None if problem else self.catalog.coordinator_of(topic.topic_id, partition)
                if problem:
                    topic_result.partitions.add(partition=partition, error_code=pb.INVALID_REQUEST, coordinator_id=-1)
                elif coordinator_id is None:
                    code, _ = self._unknown_partition(partition)
                    topic_result.partitions.add(partition=partition, error_code=code, coordinator_id=-1)
                else:
                    topic_result.partitions.add(partition=partition, error_code=pb.NONE, coordinator_id=coordinator_id)
                    if coordinator_id not in named:
                        named.append(coordinator_id)
        response.coordinators.extend(self._endpoint(c) for c in sorted(named))
        return response

    def describe_coordinators(self, request: pb.DescribeCoordinatorsRequest) -> pb.DescribeCoordinatorsResponse:
        self._limit_items(len(request.coordinator_ids), "coordinator ids")
        wanted = list(request.coordinator_ids) or [s.coordinator_id for s in self.shards]
        response = pb.DescribeCoordinatorsResponse()
        for coordinator_id in wanted:
            description = response.coordinators.add(coordinator_id=coordinator_id, last_snapshot_end_offset=-1)
            if not 0 <= coordinator_id < len(self.shards):
                description.error_code = pb.NOT_COORDINATOR
                description.error_message = f"coordinator {coordinator_id} is not hosted on this node"
                continue
            self._describe_coordinator(self._shard(coordinator_id), description)
        return response

    def _describe_coordinator(self, shard: CoordinatorShard, description: pb.CoordinatorDescription) -> None:
        statistics = shard.statistics()
        description.state = statistics.state
        description.queued_operations = statistics.queued_operations
        try:
            shard.require_active()
        except CoordinatorUnavailable as error:
            description.error_code, description.error_message = error.error_code, error.message
            description.oldest_live_file_timestamp = -1
            return
        description.leader.CopyFrom(self._endpoint(shard.coordinator_id))
        try:
            with shard.store.read_snapshot() as db:
                counts = reads.coordinator_counts(db)
        except reads.DAMAGE_ERRORS as error:
            damaged = self._damaged(shard, error)
            description.error_code, description.error_message = damaged.error_code, damaged.message
            description.oldest_live_file_timestamp = -1
            return
        description.partition_count = counts.partition_count
        description.live_file_count = counts.live_file_count
        description.live_batch_count = counts.live_batch_count
        description.oldest_live_file_timestamp = counts.oldest_live_file_timestamp
        description.files_awaiting_deletion = counts.files_awaiting_deletion
        description.files_awaiting_handover = counts.files_awaiting_handover
        description.log_start_offset = statistics.log_start_offset
        description.log_end_offset = statistics.log_end_offset
        description.high_watermark = statistics.high_watermark
        description.applied_offset = statistics.applied_offset
        description.log_flush_count = statistics.log_flush_count
        description.log_append_count = statistics.log_append_count
        description.last_snapshot_end_offset = statistics.last_snapshot_end_offset


_NO_OFFSETS = {"assigned_base_offset": -1, "log_append_time": -1, "log_start_offset": -1}


def _bind(check: Any, request: Any) -> Any:
    """A shard check of (view, now_ms) for one request."""
    return lambda view, now_ms: check(view, request, now_ms)


def _bind_time(now_ms: int, check: Any, request: Any) -> Any:
    """A shard check that uses a time read once for the whole call instead of the shard's clock."""
    return lambda view, _shard_now_ms: check(view, request, now_ms)


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieves a late future's outcome so a timed-out caller leaves no unobserved exception."""
    if not future.cancelled():
        future.exception()
