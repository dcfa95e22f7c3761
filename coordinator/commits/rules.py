"""CommitFile checks (DESIGN §4), in the contract's order.

1. the request as a whole (`commit_request_problem`, at the router);
2. each batch's structure (`batch_structure_problems`, at the router: the
   overlap rule spans every coordinator's batches);
3. per coordinator (`check_commit_part`): `owner_ids` names it and the key is
   new to it (else `retried_commit`: the first answer again for an identical
   retry, INVALID_REQUEST for any other reuse), then the partition exists,
   then the producer rules.

These loops run once per batch on the commit path, the node's bottleneck: each
batch's fields are read from the protobuf once (`request_batches`), the common
case is decided by one expression, and messages are built only for failures.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.commits.parts import BatchOutcome, CommitPart, RequestBatch
from coordinator.commits.retries import retried_commit
from coordinator.machine import records
from coordinator.machine.object_keys import uploaded_object_problem
from coordinator.machine.producers import (
    PRODUCER_EPOCH_MAX,
    SEQUENCE_MODULUS,
    WindowEntry,
    advance_window,
    check_marker,
    check_producer,
    effective_timestamp,
    window_after_marker,
)
from coordinator.machine.topic_names import TOPIC_ID_BYTES, topic_id_problem
from coordinator.machine.view import CoordinatorView, PartitionView
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec

LOG_APPEND_TIME = pb.LOG_APPEND_TIME
CREATE_TIME = pb.CREATE_TIME
NO_TIMESTAMP_TYPE = pb.NO_TIMESTAMP_TYPE
CONTROL_ABORT = pb.CONTROL_ABORT
CONTROL_COMMIT = pb.CONTROL_COMMIT
RECORDS_PER_BATCH_MAX = 2**31  # Kafka's last offset delta is an int32
_NONE = ErrorCode.NONE
_TIMESTAMP_TYPES_V2 = (CREATE_TIME, LOG_APPEND_TIME)


def commit_request_problem(request: pb.CommitFileRequest, coordinators: int) -> str | None:
    """Why the whole request is invalid (every batch INVALID_REQUEST), or None."""
    return uploaded_object_problem(
        request.object_key, request.object_format, request.file_size, request.uploader_broker_id,
        request.owner_ids, coordinators,
    )  # fmt: skip


class _ByteRanges:
    """The union of byte ranges seen so far, as sorted disjoint [start, end) intervals."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def overlaps_then_add(self, start: int, end: int) -> bool:
        if end <= start:
            return False
        starts, ends = self._starts, self._ends
        if not starts or start >= ends[-1]:  # the usual case: batches in file order
            overlap = False
            if starts and start == ends[-1]:
                ends[-1] = end
            else:
                starts.append(start)
                ends.append(end)
            return overlap
        first = bisect.bisect_right(ends, start)  # first interval ending after start
        last = bisect.bisect_left(starts, end)  # intervals [first, last) start before end
        overlap = first < last
        if overlap:
            start = min(start, starts[first])
            end = max(end, ends[last - 1])
        starts[first:last] = [start]
        ends[first:last] = [end]
        return overlap


def batch_structure_problems(batches: Sequence[RequestBatch], file_size: int) -> list[ItemError | None]:
    """Per batch, in request order, its first structural problem (overlap counts every earlier batch)."""
    ranges = _ByteRanges()
    problems: list[ItemError | None] = []
    append = problems.append
    for batch in batches:
        (topic_id, _, byte_offset, size, base_offset, last_offset, max_timestamp, magic, timestamp_type,
         producer_id, producer_epoch, base_sequence, last_sequence, is_transactional, is_control, _,
         _) = batch  # fmt: skip
        overlaps = ranges.overlaps_then_add(byte_offset, byte_offset + size)
        # The common case in one expression; any doubt goes to the detailed checks, which say why.
        if (
            not overlaps
            and size > 0
            and byte_offset >= 0
            and byte_offset + size <= file_size
            and 0 <= base_offset <= last_offset
            and last_offset - base_offset < RECORDS_PER_BATCH_MAX
            and magic == 2
            and timestamp_type in _TIMESTAMP_TYPES_V2
            and max_timestamp >= -1
            and len(topic_id) == TOPIC_ID_BYTES
            and any(topic_id)
            and not is_control
            and (not is_transactional or producer_id >= 0)
            and (
                producer_id == -1
                or (
                    producer_id >= 0
                    and 0 <= producer_epoch <= PRODUCER_EPOCH_MAX
                    and base_sequence >= 0
                    and last_sequence == (base_sequence + last_offset - base_offset) % SEQUENCE_MODULUS
                )
            )
        ):
            append(None)
            continue
        id_problem = topic_id_problem(topic_id)
        if id_problem:
            append(ItemError(ErrorCode.INVALID_REQUEST, id_problem))
            continue
        message = _record_problem(batch, file_size, overlaps)
        append(None if message is None else ItemError(ErrorCode.INVALID_RECORD, message))
    return problems


def _record_problem(batch: RequestBatch, file_size: int, overlaps: bool) -> str | None:
    if batch.size <= 0:
        return f"size must be > 0, got {batch.size}"
    if batch.byte_offset < 0 or batch.byte_offset + batch.size > file_size:
        return f"bytes {batch.byte_offset}..{batch.byte_offset + batch.size} fall outside the file of {file_size} bytes"
    if overlaps:
        return f"bytes {batch.byte_offset}..{batch.byte_offset + batch.size} overlap an earlier batch of the request"
    if batch.base_offset < 0 or batch.last_offset < batch.base_offset:
        return f"offsets must satisfy last_offset >= base_offset >= 0, got {batch.base_offset}..{batch.last_offset}"
    if batch.last_offset - batch.base_offset >= RECORDS_PER_BATCH_MAX:
        return f"a batch holds at most {RECORDS_PER_BATCH_MAX} records, got {batch.last_offset - batch.base_offset + 1}"
    if not 0 <= batch.magic <= 2:
        return f"magic must be 0, 1 or 2, got {batch.magic}"
    if batch.magic == 0:
        if batch.timestamp_type != NO_TIMESTAMP_TYPE:
            return f"timestamp_type must be NO_TIMESTAMP_TYPE (-1) for magic 0, got {batch.timestamp_type}"
    elif batch.timestamp_type not in (pb.CREATE_TIME, pb.LOG_APPEND_TIME):
        return (
            f"timestamp_type must be CREATE_TIME (0) or LOG_APPEND_TIME (1) for magic {batch.magic}, "
            f"got {batch.timestamp_type}"
        )
    if batch.batch_max_timestamp < -1:
        return f"batch_max_timestamp must be >= -1, got {batch.batch_max_timestamp}"
    if batch.producer_id < -1:
        return f"producer_id must be >= -1, got {batch.producer_id}"
    if batch.is_control:
        return _control_problem(batch)
    if batch.is_transactional and batch.producer_id < 0:
        return f"a transactional batch needs a producer (producer_id >= 0), got {batch.producer_id}"
    if batch.is_transactional and batch.magic < 2:
        return f"a transactional batch needs magic 2, got {batch.magic}"
    if batch.producer_id >= 0:
        return _producer_fields_problem(batch)
    return None


def _control_problem(batch: RequestBatch) -> str | None:
    """What a transaction marker must look like (DESIGN §4b; Kafka's EndTransactionMarker batch)."""
    if batch.magic != 2:
        return f"a transaction marker needs magic 2, got {batch.magic}"
    if batch.producer_id < 0:
        return f"a transaction marker needs a producer (producer_id >= 0), got {batch.producer_id}"
    if not batch.is_transactional:
        return "a transaction marker must be transactional (is_transactional)"
    if not 0 <= batch.producer_epoch <= PRODUCER_EPOCH_MAX:
        return f"producer_epoch must be 0..{PRODUCER_EPOCH_MAX} for a transaction marker, got {batch.producer_epoch}"
    if batch.base_offset != batch.last_offset:
        return f"a transaction marker holds one record, got offsets {batch.base_offset}..{batch.last_offset}"
    if batch.base_sequence != -1 or batch.last_sequence != -1:
        return f"a transaction marker carries no sequence (-1), got {batch.base_sequence}..{batch.last_sequence}"
    if batch.control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return f"control_type must be CONTROL_ABORT (0) or CONTROL_COMMIT (1), got {batch.control_type}"
    return None


def _producer_fields_problem(batch: RequestBatch) -> str | None:
    if not 0 <= batch.producer_epoch <= PRODUCER_EPOCH_MAX:
        return f"producer_epoch must be 0..{PRODUCER_EPOCH_MAX} for an idempotent batch, got {batch.producer_epoch}"
    if batch.base_sequence < 0:
        return f"base_sequence must be >= 0 for an idempotent batch, got {batch.base_sequence}"
    expected = (batch.base_sequence + batch.last_offset - batch.base_offset) % SEQUENCE_MODULUS
    if batch.last_sequence != expected:
        return (
            f"last_sequence must be {expected} (base_sequence {batch.base_sequence} plus "
            f"{batch.last_offset - batch.base_offset} offsets), got {batch.last_sequence}"
        )
    return None


class _Transactions:
    """The transaction state a commit's batches see (DESIGN §4b): the view's, then this commit's changes so far; and
    the TransactionBatch results its record carries, so that applying it decides nothing."""

    __slots__ = ("_coordinator_epochs", "_first_offsets", "_view", "maybe_open", "records")

    def __init__(self, view: CoordinatorView) -> None:
        self._view = view
        self._first_offsets: dict[tuple[int, int], int] = {}  # -1: ended in this commit
        self._coordinator_epochs: dict[tuple[int, int], int] = {}
        # False while no transaction can be open: a plain idempotent batch then needs no lookup.
        self.maybe_open = bool(view.open_transactions)
        self.records: list[rec.TransactionBatch] = []

    def first_offset(self, key: int, producer_id: int) -> int:
        first = self._first_offsets.get((key, producer_id))
        return self._view.open_transaction(key, producer_id) if first is None else first

    def coordinator_epoch(self, key: int, producer_id: int) -> int:
        epoch = self._coordinator_epochs.get((key, producer_id))
        return self._view.coordinator_epoch(key, producer_id) if epoch is None else epoch

    def data(self, batch_id: int, key: int, producer_id: int, first_offset: int, base_offset: int) -> None:
        """A transactional data batch: it opens its producer's transaction at its base offset if none is open."""
        if first_offset < 0:
            first_offset = self._first_offsets[(key, producer_id)] = base_offset
            self.maybe_open = True
        self.records.append(records.transactional_batch(batch_id, first_offset))

    def marker(self, batch_id: int, key: int, producer_id: int, control_type: int, epoch: int, offset: int) -> None:
        ended = self.first_offset(key, producer_id)
        self._first_offsets[(key, producer_id)] = -1
        self._coordinator_epochs[(key, producer_id)] = epoch
        stable = self._oldest_open(key, offset + 1) if ended >= 0 and control_type == CONTROL_ABORT else -1
        self.records.append(records.transaction_marker(batch_id, control_type, epoch, ended, stable))

    def _oldest_open(self, key: int, otherwise: int) -> int:
        """Kafka's `lastStableOffset(completedTxn)`: the first offset of the oldest transaction still open."""
        first_offsets = dict(self._view.open_transactions.get(key, {}))
        first_offsets.update({producer: first for (k, producer), first in self._first_offsets.items() if k == key})
        return min((first for first in first_offsets.values() if first >= 0), default=otherwise)


def _frozen_message(partition: PartitionView) -> str:
    return (
        f"partition {partition.partition} of the topic moves to coordinator {partition.moving_to} "
        f"(move {partition.move_id}): find the coordinator again"
    )


def _not_named(view: CoordinatorView, part: CommitPart) -> Result[list[BatchOutcome]]:
    """A file whose owner_ids do not name this coordinator: nothing of it is written here. A batch of a partition
    adopted here answers NOT_COORDINATOR (retriable): the broker named the owners from a FindCoordinator before the
    partition moved here (design §5a), and it commits the batch again in a file naming its coordinator now. Any
    other batch is INVALID_REQUEST (owners a broker got wrong)."""
    owners = list(part.owner_ids)
    served = {
        (p.topic_id, p.partition)
        for p in (view.partitions_by_key.get(key) for key in view.adopted_keys)
        if p is not None
    }
    message = f"owner_ids {owners} do not name coordinator {view.coordinator_id}"
    moved = (
        f"owner_ids {owners} do not name coordinator {view.coordinator_id}, which serves the partition now (moved "
        "here since the file named its owners): find the coordinator again"
    )
    return Result(
        [],
        [
            BatchOutcome(ErrorCode.NOT_COORDINATOR, moved)
            if (batch[0], batch[1]) in served
            else BatchOutcome(ErrorCode.INVALID_REQUEST, message)
            for batch in part.batches
        ],
    )


def check_commit_part(view: CoordinatorView, part: CommitPart, now_ms: int) -> Result[list[BatchOutcome]]:
    """Assigns offsets to this coordinator's batches; the file is recorded even if none is accepted."""
    coordinator_id = view.coordinator_id
    if coordinator_id not in part.owner_ids:
        return _not_named(view, part)
    if view.file_known(part.object_key):
        return retried_commit(view, part)
    partition_of = view.partition_index.get
    producer_windows = view.producer_windows.get  # view.producer_window, inlined below (once per idempotent batch)
    high_watermarks: dict[int, int] = {}
    windows: dict[tuple[int, int], object] = {}
    committed: list[records.CommittedBatch] = []
    outcomes: list[BatchOutcome] = []
    add_outcome = outcomes.append
    add_committed = committed.append
    batch_id = view.next_batch_id
    any_known_partition = False
    new_batch = tuple.__new__
    transactions = _Transactions(view)
    for batch, problem in zip(part.batches, part.problems, strict=True):
        (topic_id, partition_number, byte_offset, size, base_offset, last_offset, max_timestamp, magic,
         timestamp_type, producer_id, producer_epoch, base_sequence, last_sequence, is_transactional, is_control,
         control_type, coordinator_epoch) = batch  # fmt: skip
        partition = partition_of((topic_id, partition_number))
        if problem is not None:
            add_outcome(BatchOutcome(problem.error_code, problem.message))
            any_known_partition = any_known_partition or partition is not None
            continue
        if partition is None:
            add_outcome(
                BatchOutcome(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {partition_number} of the topic is unknown"
                )
            )
            continue
        if partition.moving_to >= 0 and not partition.catching_up:
            # Frozen: it moves to another coordinator (design §5a); the client finds the coordinator again. During
            # the move's catch-up commits go on: they only add batches above the copied ones.
            add_outcome(BatchOutcome(ErrorCode.NOT_COORDINATOR, _frozen_message(partition)))
            continue
        any_known_partition = True
        key = partition.key
        if producer_id >= 0:
            window_key = (key, producer_id)
            if window_key in windows:
                window = windows[window_key]
            else:
                partition_windows = producer_windows(key)
                window = None if partition_windows is None else partition_windows.get(producer_id)
            if is_control:
                verdict = check_marker(
                    window,  # type: ignore[arg-type]
                    producer_epoch,
                    coordinator_epoch,
                    transactions.coordinator_epoch(key, producer_id),
                )
                if verdict.error_code != _NONE:
                    add_outcome(BatchOutcome(verdict.error_code, verdict.message))
                    continue
                assigned = high_watermarks.get(key, partition.high_watermark)
                windows[window_key] = window_after_marker(
                    window,  # type: ignore[arg-type]
                    producer_epoch,
                    effective_timestamp(max_timestamp, timestamp_type, now_ms),
                )
                transactions.marker(batch_id, key, producer_id, control_type, coordinator_epoch, assigned)
            else:
                verdict = check_producer(window, producer_epoch, base_sequence, last_sequence)  # type: ignore[arg-type]
                if verdict.duplicate_of is not None:
                    original = verdict.duplicate_of
                    append_time = original.append_time_ms if original.timestamp_type == LOG_APPEND_TIME else -1
                    add_outcome(
                        BatchOutcome(_NONE, "", original.base_offset, append_time, partition.log_start_offset, True)
                    )
                    continue
                if verdict.error_code != _NONE:
                    add_outcome(BatchOutcome(verdict.error_code, verdict.message))
                    continue
                open_first = -1
                if is_transactional or transactions.maybe_open:
                    open_first = transactions.first_offset(key, producer_id)
                    if open_first >= 0 and not is_transactional:
                        add_outcome(BatchOutcome(ErrorCode.INVALID_TXN_STATE, _plain_in_transaction(open_first)))
                        continue
                assigned = high_watermarks.get(key, partition.high_watermark)
                windows[window_key] = advance_window(
                    window,  # type: ignore[arg-type]
                    producer_epoch,
                    new_batch(WindowEntry, (base_sequence, last_sequence, assigned, now_ms, timestamp_type)),
                    # effective_timestamp, inlined (once per idempotent batch)
                    now_ms if timestamp_type == LOG_APPEND_TIME or max_timestamp < 0 else max_timestamp,
                )
                if is_transactional:
                    transactions.data(batch_id, key, producer_id, open_first, assigned)
        else:
            assigned = high_watermarks.get(key, partition.high_watermark)
            producer_epoch = base_sequence = last_sequence = -1
        assigned_last = assigned + last_offset - base_offset
        high_watermarks[key] = assigned_last + 1
        add_committed(
            new_batch(
                records.CommittedBatch,
                (batch_id, key, byte_offset, size, assigned, assigned_last, max_timestamp, producer_id,
                 producer_epoch, base_sequence, last_sequence, magic, timestamp_type),
            )
        )  # fmt: skip
        batch_id += 1
        add_outcome(
            new_batch(
                BatchOutcome,
                (_NONE, "", assigned, now_ms if timestamp_type == LOG_APPEND_TIME else -1, partition.log_start_offset,
                 False, False),
            )
        )  # fmt: skip
    if not any_known_partition:
        return Result([], outcomes)
    # The well-formed batches not stored are counted: a retry cannot be answered again without their
    # answers, also once a DeleteTopics has taken them out of the retry's part (DESIGN §6a).
    rejected = part.problems.count(None) - len(committed)
    record = records.file_committed(
        view.next_file_id,
        part.object_key,
        part.file_size,
        part.uploader_broker_id,
        part.owner_ids,
        now_ms,
        committed,
        rejected,
        transactions.records,
    )
    return Result([record], outcomes)


def _plain_in_transaction(first_offset: int) -> str:
    return f"a non-transactional batch while the producer's transaction is open (since offset {first_offset})"
