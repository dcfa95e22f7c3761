"""Retention (DESIGN §4a), the pure decision: which oldest batches of a coordinator's partitions expired.

Kafka's way, by whole batches instead of segments: from a partition's log start, a batch goes while it is expired
and the walk stops at the first that is not (Kafka stops at the first segment it keeps). A batch is expired by time
when its effective timestamp (DESIGN §4: LogAppendTime, or none (-1) → its append time) is older than
now - `retention.ms`, by size while the partition's bytes without it stay >= `retention.bytes` (-1: no such limit).
Kafka checks time, then size, then again next round; walking while either holds reaches the same log start. The log
start moves to the first kept batch (the last removed one's last offset + 1: the high watermark when none is kept).

Work is bounded: a step (one RetentionApplied record) takes partitions in key order and, from each, its expired
batches until `diskless.coordinator.retention.batch.max` is spent; a partition costs its removed batches, and at
least one (it was read). The worker (retention_worker.py) chooses from the committed state; `check_retention`
decides again on the speculative view (a pending DeleteRecords may have moved a log start further, a pending
configuration change may have changed the limits), as commits are checked, and the record carries the new log
starts only, so apply never reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import final

from coordinator.base.invariants import check_invariant
from coordinator.base.result import Result
from coordinator.machine import records
from coordinator.machine.view import CoordinatorView, PartitionView
from coordinator.topics.remote_segments import retention_removes_local_batches
from coordinator.topics.topic_configs import ConfigDefaults, TopicConfigs, effective_configs


@final
@dataclass(frozen=True, slots=True)
class StoredBatch:
    """What retention reads of a batch, oldest first."""

    last_offset: int
    size: int
    timestamp: int  # effective (DESIGN §4), its append time where it has none (-1: DESIGN §4a)


@final
@dataclass(frozen=True, slots=True)
class LogStartMove:
    partition_key: int
    topic_id: bytes
    log_start_offset: int  # the first offset kept
    batches: int  # removed, as read when chosen
    bytes: int
    configs: TopicConfigs  # what the decision was made by: the check refuses a move made by other limits


@final
@dataclass(frozen=True, slots=True)
class RetentionStep:
    moves: tuple[LogStartMove, ...]
    defaults: ConfigDefaults
    # The first partition key the next step looks at (inclusive); None: the pass went over every partition.
    resume_key: int | None
    # The partition the budget ran out in (it may hold more expired batches), or None.
    cut_key: int | None


@final
@dataclass(frozen=True, slots=True)
class RetentionOutcome:
    applied_keys: frozenset[int]
    batches: int
    bytes: int


def retention_allowed_below(configs: TopicConfigs, partition: PartitionView) -> int | None:
    """The offset below which retention may remove a partition's batches; None: it removes none of them.

    DESIGN §4a: while tiering is on, retention never removes a batch that is not remote yet (a batch leaves by an
    offload; expiry is the tiered copier's and remote storage's), and with `remote.log.copy.disable=true` it removes
    diskless batches only once nothing is remote (`remote_segments.retention_removes_local_batches`).
    """
    if not retention_removes_local_batches(configs, partition.log_start_offset, partition.local_log_start_offset):
        return None
    return partition.high_watermark


def expired_prefix(
    batches: Iterable[StoredBatch],
    partition_bytes: Callable[[], int],
    configs: TopicConfigs,
    now_ms: int,
    allowed_below: int,
    budget: int,
) -> tuple[int, int, int] | None:
    """(batches, bytes, new log start) of the expired batches at the head of `batches`, at most `budget`; None if none.

    `partition_bytes` is called only when `retention.bytes` limits the partition (a sum over its batches).
    """
    if budget <= 0 or (configs.retention_ms < 0 and configs.retention_bytes < 0):
        return None
    expired_before_ms = now_ms - configs.retention_ms if configs.retention_ms >= 0 else None
    remaining = partition_bytes() if configs.retention_bytes >= 0 else 0
    count = removed_bytes = 0
    log_start = -1
    for batch in batches:
        if count >= budget or batch.last_offset + 1 > allowed_below:
            break
        by_time = expired_before_ms is not None and batch.timestamp < expired_before_ms
        by_size = configs.retention_bytes >= 0 and remaining - batch.size >= configs.retention_bytes
        if not (by_time or by_size):
            break  # Kafka stops at the first segment it keeps
        count += 1
        removed_bytes += batch.size
        remaining -= batch.size
        log_start = batch.last_offset + 1
    return None if count == 0 else (count, removed_bytes, log_start)


# (partition key, from offset, limit) -> its stored batches holding `from offset` or later, oldest first.
ReadBatches = Callable[[int, int, int], Iterable[StoredBatch]]


def select_retention(
    partitions: Sequence[PartitionView],
    configs_of: Mapping[bytes, Mapping[str, str]],
    defaults: ConfigDefaults,
    read_batches: ReadBatches,
    partition_bytes: Callable[[int], int],
    now_ms: int,
    budget: int,
) -> RetentionStep:
    """One step over `partitions` (keys ascending, from where the pass is): at most `budget` batches removed."""
    moves: list[LogStartMove] = []
    left = budget
    for partition in partitions:
        if left <= 0:
            return RetentionStep(tuple(moves), defaults, partition.key, None)
        configs = effective_configs(configs_of.get(partition.topic_id, {}), defaults)
        # A frozen partition (design §5a) is left to its target: no batch of it is read for a step the check drops.
        allowed = None if partition.moving_to >= 0 else retention_allowed_below(configs, partition)
        found = None
        if allowed is not None and allowed > partition.log_start_offset:
            found = expired_prefix(
                read_batches(partition.key, partition.log_start_offset, left),
                partial(partition_bytes, partition.key),
                configs,
                now_ms,
                allowed,
                left,
            )
        if found is None:
            left -= 1
            continue
        count, size, log_start = found
        moves.append(LogStartMove(partition.key, partition.topic_id, max(log_start, partition.log_start_offset),
                                  count, size, configs))  # fmt: skip
        if count >= left:  # the budget ran out here: the next step starts with this partition again
            return RetentionStep(tuple(moves), defaults, partition.key, partition.key)
        left -= count
    return RetentionStep(tuple(moves), defaults, None, None)


def check_retention(view: CoordinatorView, step: RetentionStep, now_ms: int) -> Result[RetentionOutcome]:
    """One RetentionApplied record of the moves the speculative view still allows (none: no record)."""
    starts: list[tuple[int, int]] = []
    batches = size = 0
    for move in step.moves:
        partition = view.partitions_by_key.get(move.partition_key)
        if partition is None or partition.topic_id != move.topic_id:
            continue  # its topic was deleted meanwhile
        if move.log_start_offset <= partition.log_start_offset:
            continue  # DeleteRecords went as far already
        if partition.moving_to >= 0:
            continue  # frozen, moving to another coordinator (design §5a): its retention goes on there
        configs = effective_configs(view.topic_configs(partition.topic_id), step.defaults)
        if configs != move.configs:
            continue  # the limits changed meanwhile: the next pass decides by the new ones
        allowed = retention_allowed_below(configs, partition)
        if allowed is None or move.log_start_offset > allowed:
            continue
        check_invariant(
            move.log_start_offset <= partition.high_watermark,
            f"retention moves partition {move.partition_key}'s log start to {move.log_start_offset}, past its "
            f"high watermark {partition.high_watermark}",
        )
        starts.append((move.partition_key, move.log_start_offset))
        batches += move.batches
        size += move.bytes
    outcome = RetentionOutcome(frozenset(key for key, _ in starts), batches, size)
    if not starts:
        return Result([], outcome)
    return Result([records.retention_applied(starts)], outcome)
