"""ReplaceBatches checks (DESIGN §4c), in order.

1. the request as a whole (`replace_request_problem`, at the router: every extent INVALID_REQUEST);
2. each extent's structure (`extent_structure_problems`, at the router: the byte ranges span every coordinator's
   extents);
3. per coordinator (`check_replace_part`, pure): `owner_ids` names it; a key it knows is a retry (the first answer
   again for the same extents, INVALID_REQUEST otherwise); then per extent: the partition exists; the run does not
   overlap an earlier extent's; it is not below the local log start (deleted or offloaded meanwhile:
   OFFSET_OUT_OF_RANGE) nor past the high watermark; it starts and ends on the batches' boundaries with their sizes
   summed (else INVALID_REQUEST); it fits in what is left of the call's batch bound.

A coordinator that passes step 3's first rule writes one BatchesReplaced, even if no extent moved: the new file is
then recorded with no live batch and deleted after the grace (as a CommitFile with every batch refused), and the
record keeps the answers for a retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.machine import records
from coordinator.machine.object_keys import uploaded_object_problem
from coordinator.machine.topic_names import topic_id_problem
from coordinator.machine.view import CoordinatorView, PartitionView
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec

BATCH_MAX_SETTING = "diskless.coordinator.replace.batch.max"


class Extent(NamedTuple):
    """One extent of a ReplaceBatches request: a run of one partition's batches, now in the new object."""

    topic_id: bytes
    partition: int
    base_offset: int
    last_offset: int
    byte_offset: int
    size: int


def request_extents(request: pb.ReplaceBatchesRequest) -> list[Extent]:
    return [
        Extent(e.topic_id, e.partition, e.base_offset, e.last_offset, e.byte_offset, e.size) for e in request.extents
    ]


class ExtentOutcome(NamedTuple):
    error_code: ErrorCode
    message: str = ""
    moved_batches: int = 0  # batches this extent moved (0 when refused, and for a retry's answer)
    is_retry: bool = False  # the first call's answer again: nothing changed


MOVED = ExtentOutcome(ErrorCode.NONE)


@dataclass(frozen=True, slots=True)
class ReplacePart:
    """The extents of one ReplaceBatches that belong to one coordinator, with their structure verdicts."""

    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: tuple[int, ...]
    extents: tuple[Extent, ...]
    problems: tuple[str | None, ...]  # INVALID_REQUEST found at the router, per extent
    batch_max: int  # batches the part may move at most (one apply)


def replace_request_problem(request: pb.ReplaceBatchesRequest, coordinators: int) -> str | None:
    """Why the whole request is invalid (every extent INVALID_REQUEST), or None."""
    return uploaded_object_problem(
        request.object_key, request.object_format, request.file_size, request.uploader_broker_id,
        request.owner_ids, coordinators,
    )  # fmt: skip


def extent_structure_problems(extents: Sequence[Extent], file_size: int) -> list[str | None]:
    """Per extent, in request order, why it is not a run of bytes of the new object (INVALID_REQUEST), or None.

    Two extents must not share a byte of the object: each batch has one position.
    """
    problems: list[str | None] = []
    taken: list[tuple[int, int]] = []  # byte ranges of the well-formed extents so far
    for extent in extents:
        problem = topic_id_problem(extent.topic_id)
        end = extent.byte_offset + extent.size
        if problem is None and not 0 <= extent.base_offset <= extent.last_offset:
            problem = (
                f"offsets must satisfy last_offset >= base_offset >= 0, got {extent.base_offset}..{extent.last_offset}"
            )
        if problem is None and extent.size <= 0:
            problem = f"size must be > 0, got {extent.size}"
        if problem is None and (extent.byte_offset < 0 or end > file_size):
            problem = f"bytes {extent.byte_offset}..{end} fall outside the object of {file_size} bytes"
        if problem is None and any(start < end and extent.byte_offset < stop for start, stop in taken):
            problem = f"bytes {extent.byte_offset}..{end} overlap an earlier extent of the request"
        if problem is None:
            taken.append((extent.byte_offset, end))
        problems.append(problem)
    return problems


def _run_problem(
    view: CoordinatorView, partition: PartitionView, extent: Extent, batches_left: int
) -> tuple[ExtentOutcome, int]:
    """The extent's outcome on its partition, and how many batches it moves (0 when refused)."""
    base, last = extent.base_offset, extent.last_offset
    if partition.moving_to >= 0:
        # A move copies the batches' positions to the target (design §5a): a copied batch must stay in the file its
        # copy names until the drop lends that file. Retriable: a later pass replaces the run at its new coordinator.
        message = (
            f"partition {partition.partition} of the topic moves to coordinator {partition.moving_to} (move "
            f"{partition.move_id}): the run stays where it was"
        )
        return ExtentOutcome(ErrorCode.NOT_COORDINATOR, message), 0
    if base < partition.local_log_start_offset:
        message = (
            f"offsets {base}..{last} start below the partition's first held offset {partition.local_log_start_offset}: "
            "deleted (or offloaded) meanwhile; the run stays where it was"
        )
        return ExtentOutcome(ErrorCode.OFFSET_OUT_OF_RANGE, message), 0
    if last >= partition.high_watermark:
        message = f"offsets {base}..{last} reach past the high watermark {partition.high_watermark}"
        return ExtentOutcome(ErrorCode.OFFSET_OUT_OF_RANGE, message), 0
    batches = view.committed_run(partition.key, base, last, batches_left + 1)
    if len(batches) > batches_left:
        message = (
            f"offsets {base}..{last} hold more batches than the {batches_left} left to this call by "
            f"{BATCH_MAX_SETTING}: replace smaller runs (or this one in a call of its own)"
        )
        return ExtentOutcome(ErrorCode.INVALID_REQUEST, message), 0
    if not batches or batches[0][0] != base or batches[-1][1] != last:
        message = f"offsets {base}..{last} are not on the partition's batch boundaries" + (
            f" (the batches there span {batches[0][0]}..{batches[-1][1]})" if batches else ""
        )
        return ExtentOutcome(ErrorCode.INVALID_REQUEST, message), 0
    expected = base
    for batch_base, batch_last, _ in batches:
        if batch_base != expected:  # a hole: batches not yet applied (the view's only), never a run of applied ones
            message = f"offsets {base}..{last}: no applied batch starts at {expected}"
            return ExtentOutcome(ErrorCode.INVALID_REQUEST, message), 0
        expected = batch_last + 1
    total = sum(size for _, _, size in batches)
    if total != extent.size:
        message = f"size {extent.size} differs from the {total} bytes of the {len(batches)} batches at {base}..{last}"
        return ExtentOutcome(ErrorCode.INVALID_REQUEST, message), 0
    return ExtentOutcome(ErrorCode.NONE, "", len(batches)), len(batches)


def _same_extents(stored: Sequence[rec.BatchesReplaced.Extent], part: ReplacePart) -> bool:
    return [
        Extent(e.topic_id, e.partition, e.base_offset, e.last_offset, e.byte_offset, e.size) for e in stored
    ] == list(part.extents)


def _retried(view: CoordinatorView, part: ReplacePart) -> Result[list[ExtentOutcome]]:
    """The key is known here: the first call's answers for the same extents, INVALID_REQUEST for anything else."""
    first = view.pending_replacement(part.object_key)
    if first is None:
        facts = view.committed_file(part.object_key)
        first = None if facts is None else view.committed_replacement(facts.file_id)
    if first is None:
        message = f"object key {part.object_key!r} names a file this coordinator holds by a commit or a hand-over"
        return reject_all(part, message)
    if first.file_size != part.file_size or not _same_extents(first.extents, part):
        return reject_all(part, f"object key {part.object_key!r} was used by a ReplaceBatches with other extents")
    return Result([], [ExtentOutcome(ErrorCode(e.error_code), e.error_message, 0, True) for e in first.extents])


def reject_all(part: ReplacePart, message: str) -> Result[list[ExtentOutcome]]:
    """INVALID_REQUEST for every extent of the part: nothing of it is written."""
    return Result([], [ExtentOutcome(ErrorCode.INVALID_REQUEST, message) for _ in part.extents])


def check_replace_part(view: CoordinatorView, part: ReplacePart, now_ms: int) -> Result[list[ExtentOutcome]]:
    """Moves this coordinator's runs into the new file: one BatchesReplaced, whatever moved."""
    if view.coordinator_id not in part.owner_ids:
        return reject_all(part, f"owner_ids {list(part.owner_ids)} do not name coordinator {view.coordinator_id}")
    if view.file_known(part.object_key):
        return _retried(view, part)
    outcomes: list[ExtentOutcome] = []
    runs: list[rec.BatchesReplaced.Run] = []
    claimed: dict[int, list[tuple[int, int]]] = {}  # partition key -> offset ranges of earlier extents
    batches_left = part.batch_max
    for extent, problem in zip(part.extents, part.problems, strict=True):
        partition = view.partition(extent.topic_id, extent.partition)
        if problem is not None:
            outcome = ExtentOutcome(ErrorCode.INVALID_REQUEST, problem)
        elif partition is None:
            outcome = ExtentOutcome(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {extent.partition} of the topic is unknown"
            )
        elif any(
            start <= extent.last_offset and extent.base_offset <= stop for start, stop in claimed.get(partition.key, [])
        ):
            message = f"offsets {extent.base_offset}..{extent.last_offset} overlap an earlier extent of the partition"
            outcome = ExtentOutcome(ErrorCode.INVALID_REQUEST, message)
        else:
            outcome, moved = _run_problem(view, partition, extent, batches_left)
            if moved:  # only a run that moves claims its offsets: a batch has one new position
                claimed.setdefault(partition.key, []).append((extent.base_offset, extent.last_offset))
                batches_left -= moved
                runs.append(
                    rec.BatchesReplaced.Run(
                        partition_key=partition.key,
                        base_offset=extent.base_offset,
                        last_offset=extent.last_offset,
                        byte_offset=extent.byte_offset,
                        batches=moved,
                    )
                )
        outcomes.append(outcome)
    extents = [
        rec.BatchesReplaced.Extent(
            topic_id=e.topic_id, partition=e.partition, base_offset=e.base_offset, last_offset=e.last_offset,
            byte_offset=e.byte_offset, size=e.size, error_code=o.error_code, error_message=o.message,
        )
        for e, o in zip(part.extents, outcomes, strict=True)
    ]  # fmt: skip
    record = records.batches_replaced(
        view.next_file_id, part.object_key, part.file_size, part.uploader_broker_id, part.owner_ids, now_ms, runs,
        extents,
    )  # fmt: skip
    return Result([record], outcomes)
