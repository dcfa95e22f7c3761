"""A partition move's drop at its source, as a pure check, and what the move worker reads of the source (design §5a).

`check_moved_out` writes PartitionMovedOut once the target adopted the partition: the partition leaves here, and each
loan row the move made at the target (the target answers which: `coordinator/machine/state/adoptions.lent_for`) is
lent to it, so this coordinator's row for its file is not idle until the loan comes back
(`coordinator/files/move_returns.check_loan_returned` ends it). `moves_in_progress` and `source_step` are what the
move worker reads of this side's log (move_protocol.next_step)."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine.view import CoordinatorView
from coordinator.topics.move_protocol import SourceStep
from protos import records_pb2 as rec

_DONE = ItemError(ErrorCode.NONE, "")


@dataclass(frozen=True, slots=True)
class MoveOut:
    """The drop of a move the target adopted. `target_loans`: the object keys of the loan rows this move made at the
    target that are still there (its answer, `adoptions.lent_for`; a key missing here would leave its loan row
    unaccounted for, so the worker passes the target's answer whole)."""

    topic_id: bytes
    partition: int
    move_id: int
    target_loans: frozenset[str]


@dataclass(frozen=True, slots=True)
class MoveInProgress:
    """A partition frozen here, the source, by a move not dropped nor cancelled yet."""

    topic_id: bytes
    partition: int
    partition_key: int
    move_id: int
    to_coordinator: int


def _refused(message: str) -> Result[ItemError]:
    return Result([], ItemError(ErrorCode.INVALID_REQUEST, message))


def check_moved_out(view: CoordinatorView, request: MoveOut, now_ms: int) -> Result[ItemError]:
    """One PartitionMovedOut; nothing when the move was dropped already; or why not.

    Only for a partition frozen by this move: the caller (the move worker) asks it only once the target's adoption
    is recorded there (move_protocol.next_step answers DROP), which this side cannot see.
    """
    if request.move_id in view.moved_out:
        return Result([], _DONE)  # dropped already: a resumed worker asks again
    partition = view.partition(request.topic_id, request.partition)
    if partition is None or partition.moving_to < 0 or partition.move_id != request.move_id:
        return _refused(f"move {request.move_id} of partition {request.partition} is not in progress here")
    loans = []
    for object_key in sorted(request.target_loans):
        facts = view.committed_file(object_key)
        if facts is None or not view.committed_batches(facts.file_id, (partition.key,)):
            return _refused(f"the target names file {object_key!r}, which holds no batch of the moved partition here")
        loans.append(
            rec.PartitionMovedOut.Loan(file_id=facts.file_id, object_key=object_key, borrower=partition.moving_to)
        )
    moved = rec.PartitionMovedOut(
        partition_key=partition.key, move_id=request.move_id, to_coordinator=partition.moving_to, loans=loans
    )
    return Result([rec.MetadataRecord(partition_moved_out=moved)], _DONE)


def moves_in_progress(view: CoordinatorView) -> list[MoveInProgress]:
    """The partitions frozen here by a move, in move id order: the move worker's work at this source."""
    return sorted(
        (
            MoveInProgress(p.topic_id, p.partition, p.key, p.move_id, p.moving_to)
            for p in view.partitions()
            if p.moving_to >= 0
        ),
        key=lambda move: move.move_id,
    )


def source_step(view: CoordinatorView, move_id: int) -> SourceStep:
    """Where this source's log has a move: moved out, frozen, or (no trace of it: never frozen here, or its freeze
    lifted) cancelled, which next_step answers with DONE or, when the target staged it, ABANDON."""
    if move_id in view.moved_out:
        return SourceStep.MOVED_OUT
    if any(p.move_id == move_id and p.moving_to >= 0 for p in view.partitions()):
        return SourceStep.FROZEN
    return SourceStep.CANCELLED
