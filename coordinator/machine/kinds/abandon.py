"""The record kind of a partition move given up at its target before the adoption (design §5a):
PartitionAdoptionAbandoned.

The staged batches go: set aside under their staged key for the purge's bounded passes (`partitions_awaiting_purge`,
as a deleted topic's, never one unbounded transaction), so the files they live in, loan rows included, count them
until then; a loan row then follows the return rule (coordinator/files/move_returns.py). The move is remembered as
abandoned: a repeat writes nothing, a late chunk or adoption is refused, and the source may then cancel its freeze.
Both effects check the same invariants: never after the adoption, never twice.
"""

from __future__ import annotations

from typing import Any

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    PURGE_PENDING,
    NoCatalogEffects,
    PartitionChanges,
    RecordDescription,
    RecordNames,
)
from coordinator.machine.state import time_index
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec


def _check(abandoned: rec.PartitionAdoptionAbandoned, adopted: bool, abandoned_before: bool) -> None:
    check_invariant(
        not adopted and not abandoned_before,
        f"move {abandoned.move_id} from coordinator {abandoned.from_coordinator} abandoned, but adopted here: "
        f"{adopted}, abandoned before: {abandoned_before}",
    )


class PartitionAdoptionAbandonedKind(NoCatalogEffects):
    """No partition here served the staged batches: the catalog has nothing to change for it; the node follows it
    to start the purge of the batches it sets aside."""

    name = "partition_adoption_abandoned"
    changes_catalog = True  # the node is told when it is applied (the purge starts)

    def partition_changes(self, body: Any) -> PartitionChanges:
        return PURGE_PENDING

    def replay(self, view: CoordinatorView, abandoned: rec.PartitionAdoptionAbandoned, end_offset: int) -> None:
        move = (abandoned.from_coordinator, abandoned.move_id)
        _check(abandoned, move in view.adopted_moves, move in view.abandoned_moves)
        view.staged_moves.pop(move, None)
        view.abandoned_moves.add(move)

    def apply(self, transaction: StateTransaction, abandoned: rec.PartitionAdoptionAbandoned) -> None:
        db = transaction.db
        move = (abandoned.from_coordinator, abandoned.move_id)
        before = db.execute(
            "SELECT 1 FROM abandoned_adoptions WHERE from_coordinator = ? AND move_id = ?", move
        ).fetchone()
        staged = db.execute(
            "SELECT staged_partition_key, topic_id, partition, adopted FROM partition_adoptions "
            "WHERE from_coordinator = ? AND move_id = ?",
            move,
        ).fetchone()
        _check(abandoned, staged is not None and bool(staged[3]), before is not None)
        if staged is not None:
            key = int(staged[0])
            if transaction.has_batches(key):  # set aside for the purge's passes; no read found them anyway
                db.execute(
                    "INSERT INTO partitions_awaiting_purge (partition_key, topic_id, topic_name, partition) "
                    "VALUES (?, ?, '', ?)",
                    (key, staged[1], staged[2]),
                )
            time_index.forget(db, key)
            transaction.forget_time_tail(key)
            db.execute("DELETE FROM aborted_transactions WHERE partition_key = ?", (key,))
            db.execute("DELETE FROM partition_adoptions WHERE from_coordinator = ? AND move_id = ?", move)
        db.execute("INSERT INTO abandoned_adoptions (from_coordinator, move_id) VALUES (?, ?)", move)

    def describe(self, abandoned: rec.PartitionAdoptionAbandoned, names: RecordNames) -> RecordDescription:
        return RecordDescription(
            f"partition adoption abandoned: move {abandoned.move_id} from coordinator {abandoned.from_coordinator}, "
            "its staged batches dropped",
            {"from_coordinator": abandoned.from_coordinator, "move_id": abandoned.move_id},
        )
