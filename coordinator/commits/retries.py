"""A CommitFile part whose object key a coordinator already holds (DESIGN §4, "Retried commits").

An identical retry of the commit that recorded the key gets the first answer again, as long as
that answer is still whole (its stored batches live, the others duplicates of stored ones); any other
reuse of the key is refused with INVALID_REQUEST. Pure: nothing is written either way.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.commits.parts import BatchOutcome, CommitPart, RequestBatch, reject_all
from coordinator.machine import records
from coordinator.machine.producers import check_producer
from coordinator.machine.view import CoordinatorView
from protos import coordinator_pb2 as pb


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
    stored as accepted then, or, for a batch the first commit did not store, while it is a duplicate of a batch still
    stored (the producer's window names it): answered as that duplicate, as the first commit answered it, and as any
    resend of it would be. A first commit whose batches were deleted since (DeleteRecords, DeleteTopics), or that
    rejected a batch for a producer error that still holds, no longer knows its answer, and the retry is refused like
    any other reuse. Nothing is written either way.

    Why duplicates are answered (found on a lossy network, tests/test_network_partitions.py): a producer's batch
    whose answer was lost is resent in a new file, answered as a duplicate, and that answer lost too; the broker
    then retries that commit as it was, and a refusal (INVALID_REQUEST, not retriable) would fail a batch that is
    stored, where Kafka answers any resend of a stored sequence as a duplicate.
    """
    first = _first_commit(view, part)
    answers = (
        first if isinstance(first, str) else (_retry_problem(view, part, first) or _answers_again(view, part, first))
    )
    if isinstance(answers, str):
        return reject_all(
            part,
            f"object key {part.object_key!r} was already committed to coordinator {view.coordinator_id} "
            f"{answers}: only an identical retry of a commit whose batches are all still stored (or duplicates of "
            "stored batches) is answered again",
        )
    return Result([], answers)


def _answers_again(view: CoordinatorView, part: CommitPart, first: FirstCommit) -> list[BatchOutcome] | str:
    """The first answer, batch for batch, or why it cannot be given: a batch the first commit stored gets its
    offsets again; one it did not (`first.missing` of them) is answered only as a duplicate of a stored batch."""
    partition_of = view.partition_index.get
    stored = iter(first.batches)
    next_stored = next(stored, None)
    outcomes: list[BatchOutcome] = []
    duplicates = 0
    for batch, batch_problem in zip(part.batches, part.problems, strict=True):
        if batch_problem is not None:
            outcomes.append(BatchOutcome(batch_problem.error_code, batch_problem.message))
            continue
        partition = partition_of((batch.topic_id, batch.partition))
        if partition is not None and next_stored is not None and _same_batch(batch, partition.key, next_stored):
            append_time = first.append_time_ms if next_stored.timestamp_type == pb.LOG_APPEND_TIME else -1
            outcomes.append(
                BatchOutcome(
                    ErrorCode.NONE, "", next_stored.base_offset, append_time, partition.log_start_offset, is_retry=True
                )
            )
            next_stored = next(stored, None)
            continue
        duplicate = _duplicate_of_stored(view, batch) if duplicates < first.missing else None
        if duplicate is None:
            if first.missing:
                return f"and {first.missing} of its batches here were rejected then or deleted since"
            return (
                f"with other batches (this request's batch of partition {batch.partition} at bytes "
                f"{batch.byte_offset}+{batch.size} differs)"
            )
        duplicates += 1
        outcomes.append(duplicate)
    if duplicates != first.missing:
        return f"and {first.missing} of its batches here were rejected then or deleted since"
    if next_stored is not None:
        return (
            f"with {len(first.batches)} batches still stored, for the "
            f"{sum(1 for p in part.problems if p is None)} well-formed batches of this request (other batches, or "
            "some were rejected then or deleted since)"
        )
    return outcomes


def _duplicate_of_stored(view: CoordinatorView, batch: RequestBatch) -> BatchOutcome | None:
    """A duplicate's answer if the batch is one in its producer's window whose copy is still stored, else None."""
    partition = view.partition_index.get((batch.topic_id, batch.partition))
    if partition is None or batch.producer_id < 0:
        return None
    window = view.producer_window(partition.key, batch.producer_id)
    original = check_producer(window, batch.producer_epoch, batch.base_sequence, batch.last_sequence).duplicate_of
    if original is None or original.base_offset < partition.local_log_start_offset:
        return None  # not a duplicate, or its copy was deleted or offloaded since
    append_time = original.append_time_ms if original.timestamp_type == pb.LOG_APPEND_TIME else -1
    return BatchOutcome(
        ErrorCode.NONE, "", original.base_offset, append_time, partition.log_start_offset, True, is_retry=True
    )


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
        # Gone in the view: a DeleteRecords, DeleteTopics or an offload to remote storage (below the local log start,
        # DESIGN §4a), perhaps not yet applied, removed it.
        if partition is None or stored.last_offset < partition.local_log_start_offset:
            return "and some of its batches were deleted or offloaded since"
    return None  # batch for batch: `_answers_again`


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
