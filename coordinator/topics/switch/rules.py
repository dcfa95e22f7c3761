"""The classic -> diskless switch's rules (design §4d): InitDisklessLog and RepairDisklessLog, pure checks.

A classic partition's leader seals its log at its high watermark and sends, per partition, the classic log start, the
seal, its leader epoch, the classic log's highest timestamp and its producers' state. The partition was created as
diskless beforehand (CreatePartitions, as for any diskless topic: the catalog places it) and has had no diskless
commit. The rules of an InitDisklessLog item, in order:

- an unknown partition: UNKNOWN_TOPIC_OR_PARTITION; a malformed item: INVALID_REQUEST saying what;
- a switched partition and an epoch below the sealing leader's: FENCED_LEADER_EPOCH (a stale classic leader);
- the same switch again (classic start, seal, epoch as recorded): NONE, nothing written; once diskless commits
  exist, any call with the recorded seal is that (a later leader of the partition asking again);
- a different seal once diskless commits exist, or any switch of a partition with diskless commits and no seal:
  INVALID_REQUEST (the offsets above the old seal are diskless already; only a repair before them moves a seal);
- a switched partition with nothing diskless yet: a later leader (higher epoch) seals again, its state replacing the
  earlier one (Inkless's re-init while nothing was appended); the same epoch with another seal is refused;
- otherwise one DisklessLogInit in the call's one record.

RepairDisklessLog (Inkless's repairDisklessLog, after an operator overrode the classic leader): moves a switched
partition's seal while nothing diskless is committed above the old one, not below the log start; the producers stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.machine import records
from coordinator.machine.producers import (
    PRODUCER_EPOCH_MAX,
    PRODUCER_WINDOW_BATCHES,
    SEQUENCE_MODULUS,
    ProducerWindow,
    WindowEntry,
    encode_window,
)
from coordinator.machine.view import CoordinatorView, PartitionView
from protos import coordinator_pb2 as pb

PRODUCERS_MAX_SETTING = "diskless.coordinator.switch.producers.max"
_TIMESTAMP_TYPES = (pb.CREATE_TIME, pb.LOG_APPEND_TIME)


@dataclass(frozen=True, slots=True)
class ClassicBatch:
    base_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    timestamp: int  # its max timestamp; its append time for LOG_APPEND_TIME
    timestamp_type: int


@dataclass(frozen=True, slots=True)
class ClassicProducer:
    producer_id: int
    producer_epoch: int
    batches: tuple[ClassicBatch, ...]  # oldest first
    last_timestamp: int
    coordinator_epoch: int  # -1 if none
    txn_first_offset: int  # -1 if none


@dataclass(frozen=True, slots=True)
class SwitchItem:
    topic_id: bytes
    partition: int
    log_start_offset: int
    seal_offset: int
    leader_epoch: int
    max_timestamp: int
    producers: tuple[ClassicProducer, ...]


@dataclass(frozen=True, slots=True)
class InitDisklessLogs:
    items: tuple[SwitchItem, ...]  # in request order
    producers_max: int  # per partition


@dataclass(frozen=True, slots=True)
class RepairDisklessLogs:
    items: tuple[tuple[bytes, int, int], ...]  # (topic id, partition, seal offset), in request order


@dataclass(frozen=True, slots=True)
class SwitchOutcome:
    error_code: ErrorCode
    message: str
    log_start_offset: int = -1
    seal_offset: int = -1
    high_watermark: int = -1


class _Switch(NamedTuple):
    """A partition's positions as the call's earlier items left them (else as the view has them)."""

    log_start_offset: int
    high_watermark: int
    seal_offset: int  # -1: never switched
    leader_epoch: int
    classic_log_start_offset: int

    @property
    def diskless_committed(self) -> bool:
        return self.high_watermark > max(self.seal_offset, 0)

    def outcome(self) -> SwitchOutcome:
        return SwitchOutcome(ErrorCode.NONE, "", self.log_start_offset, self.seal_offset, self.high_watermark)


def _switch_of(partition: PartitionView) -> _Switch:
    return _Switch(
        partition.log_start_offset,
        partition.high_watermark,
        partition.seal_offset,
        partition.switch_leader_epoch,
        partition.classic_log_start_offset,
    )


def _refused(message: str) -> SwitchOutcome:
    return SwitchOutcome(ErrorCode.INVALID_REQUEST, message)


def _batches_problem(producer: ClassicProducer, seal: int) -> str | None:
    if len(producer.batches) > PRODUCER_WINDOW_BATCHES:
        return f"{len(producer.batches)} batches, more than the {PRODUCER_WINDOW_BATCHES} a producer's state keeps"
    below = 0
    for batch in producer.batches:
        if not (0 <= batch.base_sequence < SEQUENCE_MODULUS and 0 <= batch.last_sequence < SEQUENCE_MODULUS):
            return f"sequences {batch.base_sequence}..{batch.last_sequence} outside 0..{SEQUENCE_MODULUS - 1}"
        if not below <= batch.base_offset <= batch.last_offset < seal:
            return f"batch at offsets {batch.base_offset}..{batch.last_offset} is not in order below the seal {seal}"
        records = batch.last_offset - batch.base_offset
        if batch.last_sequence != (batch.base_sequence + records) % SEQUENCE_MODULUS:
            return f"sequences {batch.base_sequence}..{batch.last_sequence} do not span offsets {batch.base_offset}.."
        if batch.timestamp_type not in _TIMESTAMP_TYPES or batch.timestamp < -1:
            return f"batch timestamp {batch.timestamp} of type {batch.timestamp_type}"
        below = batch.last_offset + 1
    return None


def _producer_problem(producer: ClassicProducer, seal: int) -> str | None:
    if producer.producer_id < 0 or not 0 <= producer.producer_epoch <= PRODUCER_EPOCH_MAX:
        return f"producer id {producer.producer_id} epoch {producer.producer_epoch}"
    problem = _batches_problem(producer, seal)
    if problem is not None:
        return problem
    if producer.last_timestamp < -1 or producer.coordinator_epoch < -1:
        return f"last timestamp {producer.last_timestamp}, coordinator epoch {producer.coordinator_epoch}"
    if producer.txn_first_offset != -1 and not 0 <= producer.txn_first_offset < seal:
        return f"open transaction's first offset {producer.txn_first_offset} is not below the seal {seal}"
    return None


def item_problem(item: SwitchItem, producers_max: int) -> str | None:
    """Why an InitDisklessLog item is malformed, else None."""
    if item.log_start_offset < 0 or item.seal_offset < item.log_start_offset:
        return f"log start offset {item.log_start_offset} and seal {item.seal_offset}: need 0 <= log start <= seal"
    if item.leader_epoch < 0 or item.max_timestamp < -1:
        return f"leader epoch {item.leader_epoch} (>= 0) and max timestamp {item.max_timestamp} (>= -1)"
    if len(item.producers) > producers_max:
        return f"{len(item.producers)} producers, more than {producers_max} ({PRODUCERS_MAX_SETTING})"
    seen: set[int] = set()
    for producer in item.producers:
        if producer.producer_id in seen:
            return f"producer {producer.producer_id} is given twice"
        seen.add(producer.producer_id)
        problem = _producer_problem(producer, item.seal_offset)
        if problem is not None:
            return f"producer {producer.producer_id}: {problem}"
    return None


def carried_producer(producer: ClassicProducer) -> records.CarriedProducer:
    """The producer's state as the coordinator keeps it: each classic batch an entry of its window, so a resend of
    one is a duplicate answering its classic offset (and its append time for LOG_APPEND_TIME)."""
    entries = tuple(
        WindowEntry(b.base_sequence, b.last_sequence, b.base_offset, b.timestamp, b.timestamp_type)
        for b in producer.batches
    )
    window = encode_window(ProducerWindow(producer.producer_epoch, entries, producer.last_timestamp))
    return records.CarriedProducer(
        producer.producer_id,
        producer.producer_epoch,
        window,
        producer.last_timestamp,
        producer.coordinator_epoch,
        producer.txn_first_offset,
    )


def _init_conflict(switch: _Switch, item: SwitchItem) -> SwitchOutcome | None:
    """The outcome of an item that writes nothing (stale, a retry, a conflict), else None: it switches."""
    if switch.seal_offset >= 0 and item.leader_epoch < switch.leader_epoch:
        message = f"leader epoch {item.leader_epoch} is older than the sealing leader's {switch.leader_epoch}"
        return SwitchOutcome(ErrorCode.FENCED_LEADER_EPOCH, message)
    same = (switch.classic_log_start_offset, switch.seal_offset, switch.leader_epoch) == (
        item.log_start_offset,
        item.seal_offset,
        item.leader_epoch,
    )
    if same or (switch.diskless_committed and switch.seal_offset == item.seal_offset):
        return switch.outcome()  # the same switch again
    if switch.diskless_committed:
        where = f"sealed at {switch.seal_offset}" if switch.seal_offset >= 0 else "born diskless"
        return _refused(
            f"the partition ({where}) has diskless commits up to {switch.high_watermark}: its seal cannot become "
            f"{item.seal_offset} (a switch comes before the first commit)"
        )
    if switch.seal_offset >= 0 and item.leader_epoch == switch.leader_epoch:
        return _refused(
            f"leader epoch {item.leader_epoch} sealed the partition at {switch.seal_offset} with log start "
            f"{switch.classic_log_start_offset} already (a later leader may seal again; RepairDisklessLog moves a seal)"
        )
    return None


def check_init_diskless_logs(
    view: CoordinatorView, request: InitDisklessLogs, now_ms: int
) -> Result[list[SwitchOutcome]]:
    """Per item, its outcome; one DisklessLogsInitialized record of every switch, none if nothing switches."""
    outcomes: list[SwitchOutcome] = []
    planned: dict[int, _Switch] = {}
    logs: dict[int, records.DisklessLogInit] = {}  # by partition key: a later item of the call replaces an earlier
    for item in request.items:
        partition = view.partition(item.topic_id, item.partition)
        if partition is None:
            message = f"partition {item.partition} of the topic is unknown"
            outcomes.append(SwitchOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
            continue
        problem = item_problem(item, request.producers_max)
        if problem is not None:
            outcomes.append(_refused(problem))
            continue
        switch = planned.get(partition.key) or _switch_of(partition)
        settled = _init_conflict(switch, item)
        if settled is not None:
            outcomes.append(settled)
            continue
        seal, classic_start = item.seal_offset, item.log_start_offset
        # A log start moved since an earlier seal (DeleteRecords below it) never goes back.
        start = max(classic_start, switch.log_start_offset) if switch.seal_offset >= 0 else classic_start
        if seal < start:
            outcomes.append(_refused(f"seal {seal} is below the log start {start}"))
            continue
        planned[partition.key] = _Switch(start, seal, seal, item.leader_epoch, classic_start)
        producers = tuple(carried_producer(p) for p in item.producers)
        logs[partition.key] = records.DisklessLogInit(
            partition.key, start, seal, item.leader_epoch, item.max_timestamp, True, producers, classic_start
        )
        outcomes.append(planned[partition.key].outcome())
    written = [records.diskless_logs_initialized(list(logs.values()))] if logs else []
    return Result(written, outcomes)


def check_repair_diskless_logs(
    view: CoordinatorView, request: RepairDisklessLogs, now_ms: int
) -> Result[list[SwitchOutcome]]:
    """Per item, its outcome; one DisklessLogsInitialized record (producers kept) of every seal moved."""
    outcomes: list[SwitchOutcome] = []
    planned: dict[int, _Switch] = {}
    logs: dict[int, records.DisklessLogInit] = {}
    for topic_id, partition_index, seal in request.items:
        partition = view.partition(topic_id, partition_index)
        if partition is None:
            message = f"partition {partition_index} of the topic is unknown"
            outcomes.append(SwitchOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
            continue
        switch = planned.get(partition.key) or _switch_of(partition)
        if switch.seal_offset < 0:
            outcomes.append(_refused("the partition was never switched from a classic log: no seal to repair"))
            continue
        if switch.diskless_committed:
            message = (
                f"diskless commits up to {switch.high_watermark} are above the seal {switch.seal_offset}: "
                "it can no longer move"
            )
            outcomes.append(_refused(message))
            continue
        if seal == switch.seal_offset:
            outcomes.append(switch.outcome())
            continue
        if seal < switch.log_start_offset:
            outcomes.append(_refused(f"seal {seal} is below the log start {switch.log_start_offset}"))
            continue
        planned[partition.key] = switch._replace(high_watermark=seal, seal_offset=seal)
        logs[partition.key] = records.DisklessLogInit(
            partition.key, switch.log_start_offset, seal, switch.leader_epoch, -1, False, (),
            switch.classic_log_start_offset,
        )  # fmt: skip
        outcomes.append(planned[partition.key].outcome())
    written = [records.diskless_logs_initialized(list(logs.values()))] if logs else []
    return Result(written, outcomes)
