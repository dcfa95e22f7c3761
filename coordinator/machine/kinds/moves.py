"""The record kinds of a partition move at its source (design §5a): PartitionMoveStarted, PartitionMoveFrozen and
PartitionMoveCancelled.

A move started with `catch_up` first lets commits go on here while the worker copies the committed batches (only
what would change copied batches' positions is refused); PartitionMoveFrozen ends the catch-up, and the partition is
then frozen as one started without it.

The freeze (PartitionMoveStarted) marks the partition as moving to its target: from the record on, in the
speculative view as in the state, every write to it here answers NOT_COORDINATOR (a Kafka client finds the
coordinator again and retries), while reads go on (the partition does not change while frozen). The cancel lifts
the freeze of the same move. Both effects check the same invariants: a partition frozen once at a time, a cancel
naming the partition's current move, the target another coordinator.
"""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import NoCatalogEffects, RecordDescription, RecordNames
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView, PartitionView
from protos import records_pb2 as rec


def _check_start(key: int, moving_to: int | None, to_coordinator: int, coordinator_id: int, move_id: int) -> None:
    check_invariant(moving_to is not None, f"move {move_id} of partition {key}, not here")
    check_invariant(
        moving_to == -1, f"move {move_id} of partition {key}, which is already frozen moving to {moving_to}"
    )
    check_invariant(
        to_coordinator >= 0 and to_coordinator != coordinator_id and move_id >= 0,
        f"move {move_id} of partition {key} from coordinator {coordinator_id} to {to_coordinator}",
    )


def _check_cancel(key: int, current_move_id: int | None, move_id: int) -> None:
    check_invariant(
        current_move_id is not None and current_move_id >= 0 and current_move_id == move_id,
        f"cancel of move {move_id} of partition {key}, whose move is {current_move_id}",
    )


def _partition(view: CoordinatorView, key: int) -> PartitionView:
    partition = view.partitions_by_key.get(key)
    check_invariant(partition is not None, f"partition move record for partition {key}, which is not here")
    assert partition is not None
    return partition


def _moving_to(transaction: StateTransaction, key: int) -> tuple[int, int] | None:
    """The partition's (target, move id): (-1, -1) when not frozen, None when the partition is not here."""
    db = transaction.db
    if db.execute("SELECT 1 FROM partitions WHERE partition_key = ?", (key,)).fetchone() is None:
        return None
    row = db.execute("SELECT to_coordinator, move_id FROM partition_moves WHERE partition_key = ?", (key,)).fetchone()
    return (-1, -1) if row is None else (int(row[0]), int(row[1]))


class PartitionMoveStartedKind(NoCatalogEffects):
    """The freeze. The catalog does not follow it: the partition stays here until the target adopts it."""

    name = "partition_move_started"

    def replay(self, view: CoordinatorView, started: rec.PartitionMoveStarted, end_offset: int) -> None:
        partition = _partition(view, started.partition_key)
        _check_start(partition.key, partition.moving_to, started.to_coordinator, view.coordinator_id, started.move_id)
        partition.moving_to = started.to_coordinator
        partition.move_id = started.move_id
        partition.catching_up = started.catch_up

    def apply(self, transaction: StateTransaction, started: rec.PartitionMoveStarted) -> None:
        key = started.partition_key
        current = _moving_to(transaction, key)
        _check_start(
            key,
            None if current is None else current[0],
            started.to_coordinator,
            transaction.coordinator_id,
            started.move_id,
        )
        transaction.db.execute(
            "INSERT INTO partition_moves (partition_key, to_coordinator, move_id, catching_up) VALUES (?, ?, ?, ?)",
            (key, started.to_coordinator, started.move_id, int(started.catch_up)),
        )

    def describe(self, started: rec.PartitionMoveStarted, names: RecordNames) -> RecordDescription:
        partition = names.partition(started.partition_key)
        how = "catching up" if started.catch_up else "frozen"
        return RecordDescription(
            f"partition move started: {partition} {how}, moving to coordinator {started.to_coordinator} "
            f"(move {started.move_id})",
            {
                "partition": partition,
                "to_coordinator": started.to_coordinator,
                "move_id": started.move_id,
                "catch_up": started.catch_up,
            },
        )


class PartitionMoveCancelledKind(NoCatalogEffects):
    """The freeze lifted: the partition takes writes here again."""

    name = "partition_move_cancelled"

    def replay(self, view: CoordinatorView, cancelled: rec.PartitionMoveCancelled, end_offset: int) -> None:
        partition = _partition(view, cancelled.partition_key)
        _check_cancel(partition.key, partition.move_id, cancelled.move_id)
        partition.moving_to = partition.move_id = -1
        partition.catching_up = False

    def apply(self, transaction: StateTransaction, cancelled: rec.PartitionMoveCancelled) -> None:
        key = cancelled.partition_key
        current = _moving_to(transaction, key)
        _check_cancel(key, None if current is None else current[1], cancelled.move_id)
        transaction.db.execute("DELETE FROM partition_moves WHERE partition_key = ?", (key,))

    def describe(self, cancelled: rec.PartitionMoveCancelled, names: RecordNames) -> RecordDescription:
        partition = names.partition(cancelled.partition_key)
        return RecordDescription(
            f"partition move cancelled: {partition} takes writes again (move {cancelled.move_id})",
            {"partition": partition, "move_id": cancelled.move_id},
        )


def _check_frozen(key: int, current: tuple[int, bool] | None, move_id: int) -> None:
    check_invariant(
        current is not None and current[0] >= 0 and current[0] == move_id and current[1],
        f"end of the catch-up of move {move_id} of partition {key}, whose move and catch-up are {current}",
    )


class PartitionMoveFrozenKind(NoCatalogEffects):
    """The end of a move's catch-up: the partition's writes answer NOT_COORDINATOR from here on."""

    name = "partition_move_frozen"

    def replay(self, view: CoordinatorView, frozen: rec.PartitionMoveFrozen, end_offset: int) -> None:
        partition = _partition(view, frozen.partition_key)
        _check_frozen(partition.key, (partition.move_id, partition.catching_up), frozen.move_id)
        partition.catching_up = False

    def apply(self, transaction: StateTransaction, frozen: rec.PartitionMoveFrozen) -> None:
        key = frozen.partition_key
        row = transaction.db.execute(
            "SELECT move_id, catching_up FROM partition_moves WHERE partition_key = ?", (key,)
        ).fetchone()
        _check_frozen(key, None if row is None else (int(row[0]), bool(row[1])), frozen.move_id)
        transaction.db.execute("UPDATE partition_moves SET catching_up = 0 WHERE partition_key = ?", (key,))

    def describe(self, frozen: rec.PartitionMoveFrozen, names: RecordNames) -> RecordDescription:
        partition = names.partition(frozen.partition_key)
        return RecordDescription(
            f"partition move frozen: {partition} caught up, its writes refused (move {frozen.move_id})",
            {"partition": partition, "move_id": frozen.move_id},
        )
