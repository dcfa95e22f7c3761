"""Checks of the partition-level operations: CreatePartitions, DeleteTopics, DeleteRecords.

Topic-wide rules (names, ids, counts) are the router's, which sees every
coordinator of the node; what reaches a coordinator here is its own share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine import records
from coordinator.machine.view import CoordinatorView

LATEST_OFFSET = -1


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    topic_id: bytes
    topic_name: str
    partitions: tuple[int, ...]
    # The topic's configurations (set on it, canonical): recorded with its first partitions on this coordinator.
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    topic_id: bytes


@dataclass(frozen=True, slots=True)
class DeleteRecords:
    items: tuple[tuple[bytes, int, int], ...]  # (topic_id, partition, offset), in request order


@dataclass(frozen=True, slots=True)
class DeleteRecordsOutcome:
    error_code: ErrorCode
    message: str
    low_watermark: int


def check_create_partitions(view: CoordinatorView, request: CreatePartitions, now_ms: int) -> Result[None]:
    """Creates the partitions this coordinator does not have yet (a retry creates nothing twice).

    The topic's first partitions here come with its configurations, so that every coordinator holding one of its
    partitions holds them too (DESIGN §4a); a coordinator that holds the topic already keeps its own.
    """
    created = []
    first_here = not view.partitions_of_topic(request.topic_id)
    key = view.next_partition_key
    for partition in request.partitions:
        existing = view.partition(request.topic_id, partition)
        if existing is not None:
            continue
        created.append(records.partition_created(key, request.topic_id, request.topic_name, partition))
        key += 1
    if created and first_here and request.configs:
        created.append(records.topic_configs_changed(request.topic_id, dict(request.configs)))
    return Result(created, None)


def check_delete_topic(view: CoordinatorView, request: DeleteTopic, now_ms: int) -> Result[bool | ItemError]:
    """Deletes the topic's partitions here; answers whether this coordinator held any (a topic none held is unknown),
    or why not now."""
    partitions = view.partitions_of_topic(request.topic_id)
    if not partitions:
        return Result([], False)
    moving = [p.partition for p in partitions if p.moving_to >= 0]
    if moving:
        # Never deleted on one side of a move only (design §5a): retriable, until the move ends.
        message = f"partitions {sorted(moving)} of the topic are moving to another coordinator"
        return Result([], ItemError(ErrorCode.REQUEST_TIMED_OUT, message))
    return Result([records.topic_deleted(request.topic_id)], True)


def check_delete_records(
    view: CoordinatorView, request: DeleteRecords, now_ms: int
) -> Result[list[DeleteRecordsOutcome]]:
    """Moves log starts forward; never back, never past the high watermark."""
    new_log_starts: dict[int, int] = {}
    outcomes = []
    for topic_id, partition_index, offset in request.items:
        partition = view.partition(topic_id, partition_index)
        if partition is None:
            outcomes.append(
                DeleteRecordsOutcome(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {partition_index} of the topic is unknown", -1
                )
            )
            continue
        if partition.moving_to >= 0:  # frozen (design §5a): the client finds the coordinator again
            outcomes.append(
                DeleteRecordsOutcome(
                    ErrorCode.NOT_COORDINATOR,
                    f"partition {partition_index} of the topic moves to coordinator {partition.moving_to}",
                    -1,
                )
            )
            continue
        log_start = new_log_starts.get(partition.key, partition.log_start_offset)
        high_watermark = partition.high_watermark
        target = high_watermark if offset == LATEST_OFFSET else offset
        if target < 0 or target > high_watermark:
            outcomes.append(
                DeleteRecordsOutcome(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"offset {offset} is outside 0..{high_watermark} (the high watermark) or -1",
                    -1,
                )
            )
            continue
        if target > log_start:
            new_log_starts[partition.key] = log_start = target
        outcomes.append(DeleteRecordsOutcome(ErrorCode.NONE, "", log_start))
    deleted = [records.records_deleted(key, start) for key, start in new_log_starts.items()]
    return Result(deleted, outcomes)


def missing_partitions(existing: Sequence[int], wanted: int) -> list[int]:
    """Partitions of [0, wanted) not in `existing` (a partial earlier creation leaves holes)."""
    have = set(existing)
    return [p for p in range(wanted) if p not in have]
