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
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from coordinator import records
from coordinator.errors import ErrorCode
from coordinator.object_store.base import key_problem
from coordinator.producers import PRODUCER_EPOCH_MAX, SEQUENCE_MODULUS, WindowEntry, advance_window, check_producer
from coordinator.result import ItemError, Result
from coordinator.topics import TOPIC_ID_BYTES, topic_id_problem
from coordinator.view import CoordinatorView
from protos import coordinator_pb2 as pb

OBJECT_KEY_MAX_BYTES = 1024
WRITE_AHEAD_MULTI_SEGMENT = 1
LOG_APPEND_TIME = pb.LOG_APPEND_TIME
CREATE_TIME = pb.CREATE_TIME
NO_TIMESTAMP_TYPE = pb.NO_TIMESTAMP_TYPE
RECORDS_PER_BATCH_MAX = 2**31  # Kafka's last offset delta is an int32
_NONE = ErrorCode.NONE
_TIMESTAMP_TYPES_V2 = (CREATE_TIME, LOG_APPEND_TIME)


class RequestBatch(NamedTuple):
    """One batch of a CommitFile request, its fields read from the protobuf once."""

    topic_id: bytes
    partition: int
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    batch_max_timestamp: int
    magic: int
    timestamp_type: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int


_read_batch = operator.attrgetter(*RequestBatch._fields)


def request_batches(batches: Iterable[pb.CommitFileRequest.Batch]) -> list[RequestBatch]:
    new = tuple.__new__
    return [new(RequestBatch, _read_batch(batch)) for batch in batches]


class BatchOutcome(NamedTuple):
    error_code: ErrorCode
    message: str = ""
    assigned_base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    is_duplicate: bool = False
    is_retry: bool = False  # the first answer again, for a retried commit (DESIGN §6a)


@dataclass(frozen=True, slots=True)
class CommitPart:
    """The batches of one CommitFile that belong to one coordinator, with their structure verdicts."""

    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: tuple[int, ...]
    batches: tuple[RequestBatch, ...]
    problems: tuple[ItemError | None, ...]


def object_key_problem(object_key: str) -> str | None:
    size = len(object_key.encode("utf-8"))
    if not 1 <= size <= OBJECT_KEY_MAX_BYTES:
        return f"object_key must be 1..{OBJECT_KEY_MAX_BYTES} bytes, got {size}"
    # The coordinator deletes the object one day: the key must name one object in either backend.
    return key_problem(object_key)


def commit_request_problem(request: pb.CommitFileRequest, coordinators: int) -> str | None:
    """Why the whole request is invalid (every batch INVALID_REQUEST), or None."""
    problem = object_key_problem(request.object_key)
    if problem:
        return problem
    if request.object_format != WRITE_AHEAD_MULTI_SEGMENT:
        return (
            f"object_format must be {WRITE_AHEAD_MULTI_SEGMENT} (WRITE_AHEAD_MULTI_SEGMENT), "
            f"got {request.object_format}"
        )
    if request.file_size <= 0:
        return f"file_size must be > 0, got {request.file_size}"
    if request.uploader_broker_id < 0:
        return f"uploader_broker_id must be >= 0, got {request.uploader_broker_id}"
    owners = list(request.owner_ids)
    if not owners:
        return "owner_ids must not be empty"
    if len(set(owners)) != len(owners):
        return f"owner_ids must not repeat a coordinator: {owners}"
    foreign = [o for o in owners if not 0 <= o < coordinators]
    if foreign:
        return f"owner_ids {foreign} are not coordinators (0..{coordinators - 1})"
    return None


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
         producer_id, producer_epoch, base_sequence, last_sequence) = batch  # fmt: skip
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
    if batch.producer_id >= 0:
        return _producer_fields_problem(batch)
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


def check_commit_part(view: CoordinatorView, part: CommitPart, now_ms: int) -> Result[list[BatchOutcome]]:
    """Assigns offsets to this coordinator's batches; the file is recorded even if none is accepted."""
    coordinator_id = view.coordinator_id
    if coordinator_id not in part.owner_ids:
        return _reject_all(part, f"owner_ids {list(part.owner_ids)} do not name coordinator {coordinator_id}")
    if view.file_known(part.object_key):
        return retried_commit(view, part)
    partition_of = view.partition_index.get
    producer_window = view.producer_window
    high_watermarks: dict[int, int] = {}
    windows: dict[tuple[int, int], object] = {}
    committed: list[records.CommittedBatch] = []
    outcomes: list[BatchOutcome] = []
    add_outcome = outcomes.append
    add_committed = committed.append
    batch_id = view.next_batch_id
    any_known_partition = False
    new_batch = tuple.__new__
    for batch, problem in zip(part.batches, part.problems, strict=True):
        (topic_id, partition_number, byte_offset, size, base_offset, last_offset, max_timestamp, magic,
         timestamp_type, producer_id, producer_epoch, base_sequence, last_sequence) = batch  # fmt: skip
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
        any_known_partition = True
        key = partition.key
        if producer_id >= 0:
            window_key = (key, producer_id)
            window = windows[window_key] if window_key in windows else producer_window(key, producer_id)
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
            assigned = high_watermarks.get(key, partition.high_watermark)
            windows[window_key] = advance_window(
                window,  # type: ignore[arg-type]
                producer_epoch,
                WindowEntry(base_sequence, last_sequence, assigned, now_ms, timestamp_type),
            )
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
            BatchOutcome(
                _NONE, "", assigned, now_ms if timestamp_type == LOG_APPEND_TIME else -1, partition.log_start_offset
            )
        )
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
    )
    return Result([record], outcomes)


def _reject_all(part: CommitPart, message: str) -> Result[list[BatchOutcome]]:
    return Result([], [BatchOutcome(ErrorCode.INVALID_REQUEST, message) for _ in part.batches])


@dataclass(frozen=True, slots=True)
class FirstCommit:
    """What a coordinator holds of the commit that first recorded an object key there."""

    file_size: int
    uploader_broker_id: int
    owner_ids: tuple[int, ...]
    append_time_ms: int
    batches: list[records.CommittedBatch]  # the batches it accepted and still stores, in request order
    # Its well-formed batches here that are not among `batches`: rejected then (a producer error, a
    # duplicate) or, as SQLite counts them, deleted since. A retry may no longer carry them (a
    # DeleteTopics takes them out of its part), so they are counted, not looked for.
    missing: int


def retried_commit(view: CoordinatorView, part: CommitPart) -> Result[list[BatchOutcome]]:
    """A part whose key this coordinator already holds: the first answer again if it is a retry, else refused.

    A retry carries exactly the first commit's part: the same file (size, uploader, owners) and,
    batch for batch, what the first commit stored (partition, bytes, record count, timestamps,
    magic, producer fields); batches the request itself marks malformed are not stored, so not
    compared: they get their problem again. The first answer can be given again only while every other batch is still
    stored as accepted then: a first commit that rejected some (a producer error, a duplicate) or
    whose batches were deleted since (DeleteRecords, DeleteTopics) no longer knows it, and the
    retry is refused like any other reuse. Nothing is written either way.
    """
    first = _first_commit(view, part)
    problem = first if isinstance(first, str) else _retry_problem(view, part, first)
    if problem is not None:
        return _reject_all(
            part,
            f"object key {part.object_key!r} was already committed to coordinator {view.coordinator_id} "
            f"{problem}: only an identical retry of a commit whose batches are all still stored is answered again",
        )
    assert not isinstance(first, str)
    stored = iter(first.batches)
    partitions = view.partitions_by_key
    outcomes: list[BatchOutcome] = []
    for batch_problem in part.problems:
        if batch_problem is not None:
            outcomes.append(BatchOutcome(batch_problem.error_code, batch_problem.message))
            continue
        batch = next(stored)
        append_time = first.append_time_ms if batch.timestamp_type == LOG_APPEND_TIME else -1
        log_start = partitions[batch.partition_key].log_start_offset
        outcomes.append(BatchOutcome(_NONE, "", batch.base_offset, append_time, log_start, is_retry=True))
    return Result([], outcomes)


def _first_commit(view: CoordinatorView, part: CommitPart) -> FirstCommit | str:
    """The first commit of the key here, from its pending record or from SQLite; or why it cannot be repeated."""
    pending = view.pending_commit(part.object_key)
    if pending is not None:
        return FirstCommit(
            pending.file_size,
            pending.uploader_broker_id,
            tuple(pending.owner_ids),
            pending.append_time_ms,
            records.unpack_batches(pending.packed_batches),
            pending.rejected_batches,  # pending: a deletion since shows in the view's partitions instead
        )
    facts = None if view.file_pending(part.object_key) else view.committed_file(part.object_key)
    if facts is None:
        return "by a hand-over, without batches of its own"
    # Only the request's partitions are searched; a batch stored on another one shows in the count.
    partition_of = view.partition_index.get
    partition_keys = {
        partition.key
        for batch, problem in zip(part.batches, part.problems, strict=True)
        if problem is None and (partition := partition_of((batch.topic_id, batch.partition))) is not None
    }
    batches = view.committed_batches(facts.file_id, partition_keys)
    if len(batches) != facts.live_batches:
        return f"with batches on partitions this request does not carry ({facts.live_batches - len(batches)})"
    return FirstCommit(
        facts.file_size,
        facts.uploader_broker_id,
        facts.owner_ids,
        facts.committed_at_ms,
        batches,
        facts.part_batches - facts.live_batches,
    )


def _retry_problem(view: CoordinatorView, part: CommitPart, first: FirstCommit) -> str | None:
    """Why the part is not a retry of the first commit that can be answered again, or None."""
    if (part.file_size, part.uploader_broker_id, part.owner_ids) != (
        first.file_size,
        first.uploader_broker_id,
        first.owner_ids,
    ):
        return (
            f"for another file (file_size {first.file_size}, uploader_broker_id {first.uploader_broker_id}, "
            f"owner_ids {list(first.owner_ids)})"
        )
    partitions = view.partitions_by_key
    for stored in first.batches:
        partition = partitions.get(stored.partition_key)
        # Deleted in the view: a DeleteRecords or DeleteTopics, perhaps not yet applied, removed it.
        if partition is None or stored.last_offset < partition.log_start_offset:
            return "and some of its batches were deleted since"
    if first.missing:
        return f"and {first.missing} of its batches here were rejected then or deleted since"
    accepted = [batch for batch, problem in zip(part.batches, part.problems, strict=True) if problem is None]
    if len(accepted) != len(first.batches):
        return (
            f"with {len(first.batches)} batches still stored, for the {len(accepted)} well-formed batches of this "
            "request (other batches, or some were rejected then or deleted since)"
        )
    partition_of = view.partition_index.get
    for batch, stored in zip(accepted, first.batches, strict=True):
        partition = partition_of((batch.topic_id, batch.partition))
        if partition is None or not _same_batch(batch, partition.key, stored):
            return (
                f"with other batches (this request's batch of partition {batch.partition} at bytes "
                f"{batch.byte_offset}+{batch.size} differs)"
            )
    return None


def _same_batch(batch: RequestBatch, partition_key: int, stored: records.CommittedBatch) -> bool:
    """Whether a request's batch is the one stored: every field the coordinator keeps of it.

    The producer's base offset is kept only as the record count (stored offsets are assigned
    ones); the producer fields only for an idempotent batch, as a commit ignores them otherwise.
    """
    return (
        partition_key == stored.partition_key
        and batch.byte_offset == stored.byte_offset
        and batch.size == stored.size
        and batch.last_offset - batch.base_offset == stored.last_offset - stored.base_offset
        and batch.batch_max_timestamp == stored.max_timestamp
        and batch.magic == stored.magic
        and batch.timestamp_type == stored.timestamp_type
        and batch.producer_id == stored.producer_id
        and (
            batch.producer_id < 0
            or (batch.producer_epoch, batch.base_sequence, batch.last_sequence)
            == (stored.producer_epoch, stored.base_sequence, stored.last_sequence)
        )
    )
