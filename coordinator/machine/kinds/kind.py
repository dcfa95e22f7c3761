"""What a record kind is to the interpreter, and the invariants both of its effects check."""

from __future__ import annotations

from typing import Any, Protocol

from coordinator.base.invariants import InvariantViolation, check_invariant
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView


class RecordKind(Protocol):
    """One kind of metadata record: its effect on the speculative view and on SQLite."""

    name: str  # the field of MetadataRecord's `record` oneof

    def replay(self, view: CoordinatorView, body: Any, end_offset: int) -> None: ...

    def apply(self, transaction: StateTransaction, body: Any) -> None: ...


def next_id_after(what: str, given: int, expected: int) -> int:
    """Ids (files, partition keys) are assigned in order: a record carries the next one, else the log is not ours."""
    check_invariant(given == expected, f"{what} {given} != next {expected}")
    return given + 1


def batch_discontinuity(
    batch_id: int, expected_batch_id: int, base_offset: int, last_offset: int, partition_key: int, high_watermark: int
) -> InvariantViolation | None:
    """Why a committed batch does not continue its partition (I3: offsets contiguous, ids in order), else None."""
    if batch_id != expected_batch_id or base_offset != high_watermark or last_offset < base_offset:
        return InvariantViolation(
            f"batch {batch_id} (expected id {expected_batch_id}) at {base_offset}..{last_offset} does not "
            f"continue partition {partition_key} at {high_watermark}"
        )
    return None


def check_log_start_moves(partition_key: int, before: int, after: int, high_watermark: int) -> None:
    """A log start only moves forward, and never past the high watermark."""
    check_invariant(
        before < after <= high_watermark,
        f"log start of partition {partition_key} moves from {before} to {after} (high watermark {high_watermark})",
    )


def check_epoch_rises(before: int, after: int) -> None:
    check_invariant(after > before, f"leader epoch goes from {before} to {after}")
