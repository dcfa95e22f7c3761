"""CommitRemoteLogSegments (DESIGN §4a, KIP-405): a broker's tiered-storage copier reports a partition's batches
below an offset as held in remote log segments; the coordinator forgets them.

Per partition three positions (coordinator.machine.view.PartitionView): the log start (earliest anywhere), the local
log start (the first batch held here) and the remote end (local start - 1 while anything is remote, else -1). The
rules, in order: an unknown partition; a topic whose configuration does not allow offloads (`remote.storage.enable`
false or `remote.log.copy.disable` true: POLICY_VIOLATION); a malformed range (start < 0 or end < start:
INVALID_REQUEST); `end <= local start`: OK, no change (a retry); `end > high watermark`: OFFSET_OUT_OF_RANGE;
`end > last stable offset` (a transaction still open, DESIGN §4b): INVALID_REQUEST;
`start > local start` (offsets would be skipped) or `end` not one past a batch's last offset: INVALID_REQUEST;
otherwise one RemoteLogSegmentsCommitted record: the batches below `end` leave (their files follow DESIGN §5) and the
local start becomes `end`.

The batches one call takes out of a coordinator are bounded by `diskless.coordinator.remote.segment.batch.max`
(one apply removes them all): a segment past what is left of that bound in its call is refused with INVALID_REQUEST
saying so, rather than removed in later passes, so that a segment is remote-only exactly when its call answers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine import records
from coordinator.machine.view import CoordinatorView, PartitionView
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from coordinator.runtime.shard import Operation
from coordinator.topics.topic_configs import (
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_STORAGE_ENABLE,
    ConfigDefaults,
    TopicConfigs,
    effective_configs,
)
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec

BATCH_MAX_SETTING = "diskless.coordinator.remote.segment.batch.max"

PartitionResult = pb.CommitRemoteLogSegmentsResponse.PartitionResult


@dataclass(frozen=True, slots=True)
class RemoteSegments:
    items: tuple[tuple[bytes, int, int, int], ...]  # (topic id, partition, start offset, end offset), in request order
    defaults: ConfigDefaults
    batch_max: int  # batches the call may take out of the coordinator at most


@dataclass(frozen=True, slots=True)
class SegmentOutcome:
    error_code: ErrorCode
    message: str
    log_start_offset: int = -1
    local_log_start_offset: int = -1
    remote_log_end_offset: int = -1
    offloaded_batches: int = 0  # the batches this item takes out of the coordinator


def _positions(log_start: int, local_start: int, offloaded_batches: int = 0) -> SegmentOutcome:
    remote_end = local_start - 1 if log_start < local_start else -1
    return SegmentOutcome(ErrorCode.NONE, "", log_start, local_start, remote_end, offloaded_batches)


def retention_removes_local_batches(configs: TopicConfigs, log_start_offset: int, local_log_start_offset: int) -> bool:
    """Whether the coordinator's retention may remove a partition's batches (DESIGN §4a): the hook retention consults.

    Tiering on: never (a batch leaves only once remote, by an offload; expiry is the copier's and remote storage's).
    Copies disabled with remote storage on (KIP-950 "retain"): only once nothing is remote, so offsets stay continuous
    for a re-enable. Otherwise (never tiered, or tiering disabled with its remote data deleted): as any topic, once
    the classic log below a switched partition's seal (design §4d) is gone too.
    """
    if configs.tiering_on:
        return False
    # Otherwise only once nothing is below the local start either: with remote storage on, nothing remote; for a
    # partition switched from a classic log (design §4d), nothing classic, which expires first (Kafka's oldest-first
    # order), by the classic log's own retention and the broker's DeleteRecords.
    return log_start_offset >= local_log_start_offset


@dataclass(slots=True)
class _Call:
    """What one call's earlier items changed: local starts moved, and the batches it may still take out."""

    local_starts: dict[int, int]
    batches_left: int


def _offload(
    view: CoordinatorView, partition: PartitionView, start: int, end: int, call: _Call
) -> tuple[SegmentOutcome, rec.MetadataRecord | None]:
    """One item of a partition that allows offloads: its outcome, and its record if it moves the local start."""
    log_start = partition.log_start_offset
    local_start = call.local_starts.get(partition.key, partition.local_log_start_offset)
    if start < 0 or end < start:
        return SegmentOutcome(ErrorCode.INVALID_REQUEST, f"start offset {start} and end offset {end}: no segment"), None
    if end <= local_start:  # a retry of a segment already committed (or of one that expired since)
        return _positions(log_start, local_start), None
    if end > partition.high_watermark:
        message = f"end offset {end} is past the high watermark {partition.high_watermark}"
        return SegmentOutcome(ErrorCode.OFFSET_OUT_OF_RANGE, message), None
    stable = view.last_stable_offset(partition)
    if end > stable:  # KIP-405 copies only below the LSO (DESIGN §4b)
        message = f"end offset {end} is past the last stable offset {stable}: a transaction is still open there"
        return SegmentOutcome(ErrorCode.INVALID_REQUEST, message), None
    if start > local_start:
        message = f"start offset {start} is past the local log start {local_start}: offsets would be skipped"
        return SegmentOutcome(ErrorCode.INVALID_REQUEST, message), None
    last_offsets = view.last_offsets_between(partition.key, local_start, end, call.batches_left + 1)
    if len(last_offsets) > call.batches_left:
        message = (
            f"the segment {start}..{end} takes more batches out of the coordinator than the {call.batches_left} left "
            f"to this call by {BATCH_MAX_SETTING}: commit smaller segments (or this one in a call of its own)"
        )
        return SegmentOutcome(ErrorCode.INVALID_REQUEST, message), None
    if not last_offsets or last_offsets[-1] != end - 1:
        message = f"end offset {end} is not one past a batch's last offset (the segment must end with a batch)"
        return SegmentOutcome(ErrorCode.INVALID_REQUEST, message), None
    call.local_starts[partition.key] = end
    call.batches_left -= len(last_offsets)
    return _positions(log_start, end, len(last_offsets)), records.remote_log_segments_committed(partition.key, end)


def _policy_problem(configs: TopicConfigs) -> SegmentOutcome | None:
    if not configs.remote_storage_enable:
        return SegmentOutcome(ErrorCode.POLICY_VIOLATION, f"{REMOTE_STORAGE_ENABLE} is false for this topic")
    if configs.remote_log_copy_disable:
        return SegmentOutcome(ErrorCode.POLICY_VIOLATION, f"{REMOTE_LOG_COPY_DISABLE} is true for this topic")
    return None


def check_commit_remote_log_segments(
    view: CoordinatorView, request: RemoteSegments, now_ms: int
) -> Result[list[SegmentOutcome]]:
    """Per item, its outcome; one record per item that moves a local start, in request order."""
    outcomes: list[SegmentOutcome] = []
    written: list[rec.MetadataRecord] = []
    call = _Call({}, request.batch_max)
    for topic_id, partition_index, start, end in request.items:
        partition = view.partition(topic_id, partition_index)
        if partition is None:
            message = f"partition {partition_index} of the topic is unknown"
            outcomes.append(SegmentOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
            continue
        if partition.moving_to >= 0:  # frozen (design §5a): the broker finds the coordinator again
            message = f"partition {partition_index} of the topic moves to coordinator {partition.moving_to}"
            outcomes.append(SegmentOutcome(ErrorCode.NOT_COORDINATOR, message))
            continue
        problem = _policy_problem(effective_configs(view.topic_configs(topic_id), request.defaults))
        if problem is not None:
            outcomes.append(problem)
            continue
        outcome, record = _offload(view, partition, start, end, call)
        outcomes.append(outcome)
        if record is not None:
            written.append(record)
    return Result(written, outcomes)


async def commit_remote_log_segments(
    coordinators: NodeCoordinators, request: pb.CommitRemoteLogSegmentsRequest
) -> pb.CommitRemoteLogSegmentsResponse:
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    defaults = ConfigDefaults.from_settings(coordinators.settings)
    batch_max = coordinators.settings.remote_segment_batch_max
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
        c: Operation(check_commit_remote_log_segments, RemoteSegments(tuple(its), defaults, batch_max))
        for c, its in items.items()
    }
    offloaded = coordinators.metrics.offloaded_batches
    for coordinator_id, outcome in (await coordinators.run_parts(operations, request.timeout_ms)).items():
        for index, result in enumerate(slots[coordinator_id]):
            if isinstance(outcome, CoordinatorUnavailable):
                set_error(result, outcome)
                continue
            answer = outcome[index]
            offloaded.labels(str(coordinator_id)).inc(answer.offloaded_batches)
            set_error(result, answer)
            result.log_start_offset = answer.log_start_offset
            result.local_log_start_offset = answer.local_log_start_offset
            result.remote_log_end_offset = answer.remote_log_end_offset
    return response
