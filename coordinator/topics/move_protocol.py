"""The steps of a partition's move between coordinators (docs/design.md §5a), pure.

Each side's part of a move is what its own log says, nothing else: the source S (`SourceStep`: frozen, moved
out, cancelled) and the target T (`TargetStep` and the chunks it staged). The move worker, on S's leader, keeps
no state of its own: each time it asks T where T is and does what `next_step` says, so a crash of either side, a
failover or a lost answer only makes it ask again, and every step is idempotent at the side that records it.

Rules that make a move safe, each decided here:
- S takes writes only before its freeze or after a cancel; T only from its adoption (`source_serves`,
  `target_serves`). S cancels only once T recorded that it abandoned the move, and T abandons only what it has
  not adopted, so the two never both take writes.
- T stages chunks in order (`chunk_answer`): a repeated chunk changes nothing, one past a gap is refused; it
  adopts only with every chunk staged, and adopting again answers as the first time.
- Routing (`serving_coordinator`): T from its adoption, else S; a caller routed to the side that does not take
  writes gets NOT_COORDINATOR and asks again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import final


class SourceStep(enum.Enum):
    SERVING = "serving"  # no move, or none in progress
    CATCHING_UP = "catching up"  # PartitionMoveStarted with catch_up: commits go on, committed batches are copied
    FROZEN = "frozen"  # PartitionMoveStarted: writes refused, the state is being copied
    MOVED_OUT = "moved out"  # PartitionMovedOut: the partition left this coordinator
    CANCELLED = "cancelled"  # PartitionMoveCancelled: serving here again


class TargetStep(enum.Enum):
    NONE = "none"  # nothing of this move recorded
    STAGING = "staging"  # PartitionAdoptionChunk records: batches staged, invisible
    ADOPTED = "adopted"  # PartitionAdopted: the partition is served here
    ABANDONED = "abandoned"  # PartitionAdoptionAbandoned: the staged batches went


@final
@dataclass(frozen=True, slots=True)
class TargetState:
    step: TargetStep
    staged_chunks: int  # chunks recorded so far


class Next(enum.Enum):
    """What the move worker does next."""

    SEND_CHUNK = "send the next chunk"  # index = the target's staged_chunks
    FREEZE = "record PartitionMoveFrozen here"  # the catch-up's end
    ADOPT = "ask the target to adopt"
    DROP = "record PartitionMovedOut here"
    ABANDON = "ask the target to abandon"
    CANCEL = "record PartitionMoveCancelled here"
    DONE = "nothing: the move is over"


def next_step(source: SourceStep, target: TargetState, chunks: int, cancelling: bool) -> Next:
    """The worker's next step for a move of `chunks` chunks; `cancelling`: an operator's cancel or the timeout."""
    if source is SourceStep.SERVING:
        return Next.DONE  # never frozen: nothing to do
    if source is SourceStep.MOVED_OUT:
        return Next.DONE
    if source is SourceStep.CANCELLED:
        return Next.DONE if target.step in (TargetStep.NONE, TargetStep.ABANDONED) else Next.ABANDON
    # Frozen.
    if target.step is TargetStep.ADOPTED:
        return Next.DROP  # past the cut-over: a move that adopted is never cancelled
    if target.step is TargetStep.ABANDONED:
        return Next.CANCEL
    if cancelling:
        return Next.ABANDON
    return Next.SEND_CHUNK if target.staged_chunks < chunks else Next.ADOPT


def catch_up_step(target: TargetState, remaining: int, tail_batches: int, stalled: bool, cancelling: bool) -> Next:
    """The worker's next step while the source catches up (design §5a): copy while more than `tail_batches` batches
    are left to copy, then freeze; freeze too once the copy `stalled` (commits as fast as it: the rest is copied
    frozen). Never an adoption: only a frozen source's state is complete. A cancel goes as from a frozen source."""
    if target.step is TargetStep.ABANDONED:
        return Next.CANCEL
    if cancelling and target.step is not TargetStep.ADOPTED:
        return Next.ABANDON
    if target.step is TargetStep.ADOPTED or remaining <= tail_batches or stalled:
        return Next.FREEZE  # adopted cannot be (no adoption before the freeze); frozen, next_step says the drop
    return Next.SEND_CHUNK


def fewest_left(previous: tuple[int, int] | None, remaining: int) -> tuple[int, int]:
    """The catch-up's stall count: (the fewest batches left to copy seen so far, chunks sent since it was seen), after
    one more look at `remaining`. The catch-up stalls when the count reaches `diskless.partition.move.catch.up.rounds`:
    commits come as fast as the copy."""
    if previous is None or remaining < previous[0]:
        return (remaining, 0)
    return (previous[0], previous[1] + 1)


class Answer(enum.Enum):
    RECORD = "record it"
    ALREADY = "already recorded: answer as before, record nothing"
    REFUSED = "refuse"


def chunk_answer(target: TargetState, index: int) -> Answer:
    """The target is sent chunk `index` of a move."""
    if target.step in (TargetStep.ADOPTED, TargetStep.ABANDONED):
        return Answer.ALREADY if target.step is TargetStep.ADOPTED else Answer.REFUSED
    if index < target.staged_chunks:
        return Answer.ALREADY
    return Answer.RECORD if index == target.staged_chunks else Answer.REFUSED


def adopt_answer(target: TargetState, chunks: int) -> Answer:
    """The target is asked to adopt a move of `chunks` chunks."""
    if target.step is TargetStep.ADOPTED:
        return Answer.ALREADY
    if target.step is TargetStep.ABANDONED or target.staged_chunks != chunks:
        return Answer.REFUSED
    return Answer.RECORD


def abandon_answer(target: TargetState) -> Answer:
    """The target is asked to abandon a move: never once adopted."""
    if target.step is TargetStep.ADOPTED:
        return Answer.REFUSED
    return Answer.ALREADY if target.step is TargetStep.ABANDONED else Answer.RECORD


def source_serves(source: SourceStep) -> bool:
    """Whether the source takes commits: a catching-up one does (the target serves only from its adoption, which
    only a frozen source asks for)."""
    return source in (SourceStep.SERVING, SourceStep.CATCHING_UP, SourceStep.CANCELLED)


def target_serves(target: TargetState) -> bool:
    return target.step is TargetStep.ADOPTED


def serving_coordinator(source_id: int, target_id: int, target: TargetState) -> int:
    """Which coordinator FindCoordinator names for the partition (and a catalog rebuilt after a reload)."""
    return target_id if target_serves(target) else source_id
