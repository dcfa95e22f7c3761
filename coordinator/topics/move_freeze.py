"""A partition move's start, freeze and cancel at the source, as pure checks (design §5a).

`check_start_move` with `catch_up` starts the move's catch-up (commits go on; what would change copied batches'
positions is refused), and `check_freeze_move` writes PartitionMoveFrozen, the freeze, once the worker finds the
tail left to copy small enough; without `catch_up` the start is the freeze.

`check_start_move` writes PartitionMoveStarted: from it on, every write to the partition here answers
NOT_COORDINATOR (commits, DeleteRecords, remote segments), retention and producer expiry leave it alone, and
DeleteTopics of its topic answers REQUEST_TIMED_OUT (retriable) until the move ends. `check_cancel_move` writes
PartitionMoveCancelled for the partition's current move. Both are idempotent for the move they name (a worker
resumed after a crash asks again): the same freeze again, or a cancel of a move that is not the current one, writes
nothing and answers success. Another move of an already frozen partition is refused with INVALID_REQUEST naming the
current one. Whoever starts a move chooses its id (the source's leader, unique at the source: design §5a).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine import records
from coordinator.machine.view import CoordinatorView, PartitionView

_DONE = ItemError(ErrorCode.NONE, "")


@dataclass(frozen=True, slots=True)
class MoveStart:
    topic_id: bytes
    partition: int
    to_coordinator: int
    move_id: int
    catch_up: bool = False


@dataclass(frozen=True, slots=True)
class MoveFreeze:
    topic_id: bytes
    partition: int
    move_id: int


@dataclass(frozen=True, slots=True)
class MoveCancel:
    topic_id: bytes
    partition: int
    move_id: int


def _found(view: CoordinatorView, topic_id: bytes, partition: int) -> PartitionView | ItemError:
    found = view.partition(topic_id, partition)
    if found is None:
        return ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {partition} of the topic is unknown")
    return found


def check_start_move(view: CoordinatorView, request: MoveStart, now_ms: int) -> Result[ItemError]:
    """The freeze of one partition (one record), or why not."""
    partition = _found(view, request.topic_id, request.partition)
    if isinstance(partition, ItemError):
        return Result([], partition)
    if request.to_coordinator < 0 or request.to_coordinator == view.coordinator_id or request.move_id < 0:
        message = (
            f"move {request.move_id} of partition {request.partition} from coordinator {view.coordinator_id} "
            f"to coordinator {request.to_coordinator}: a move goes to another coordinator and has an id >= 0"
        )
        return Result([], ItemError(ErrorCode.INVALID_REQUEST, message))
    if partition.moving_to >= 0:
        if (partition.move_id, partition.moving_to) == (request.move_id, request.to_coordinator):
            return Result([], _DONE)  # frozen by this move already
        message = (
            f"partition {request.partition} is moving to coordinator {partition.moving_to} (move "
            f"{partition.move_id}); cancel it first"
        )
        return Result([], ItemError(ErrorCode.INVALID_REQUEST, message))
    return Result(
        [records.partition_move_started(partition.key, request.to_coordinator, request.move_id, request.catch_up)],
        _DONE,
    )


def check_freeze_move(view: CoordinatorView, request: MoveFreeze, now_ms: int) -> Result[ItemError]:
    """The end of the named move's catch-up (one record); nothing when frozen by it already (a resumed worker);
    INVALID_REQUEST when the partition is not moving by that move (cancelled, or another move)."""
    partition = _found(view, request.topic_id, request.partition)
    if isinstance(partition, ItemError):
        return Result([], partition)
    if partition.moving_to < 0 or partition.move_id != request.move_id:
        message = (
            f"partition {request.partition} is not moving by move {request.move_id} (its move: {partition.move_id})"
        )
        return Result([], ItemError(ErrorCode.INVALID_REQUEST, message))
    if not partition.catching_up:
        return Result([], _DONE)
    return Result([records.partition_move_frozen(partition.key, request.move_id)], _DONE)


def check_cancel_move(view: CoordinatorView, request: MoveCancel, now_ms: int) -> Result[ItemError]:
    """The freeze of the named move lifted (one record); nothing when that move is not the partition's current one."""
    partition = _found(view, request.topic_id, request.partition)
    if isinstance(partition, ItemError):
        return Result([], partition)
    if partition.moving_to < 0 or partition.move_id != request.move_id:
        return Result([], _DONE)  # cancelled already, or another move: a stale cancel never lifts a later freeze
    return Result([records.partition_move_cancelled(partition.key, request.move_id)], _DONE)
