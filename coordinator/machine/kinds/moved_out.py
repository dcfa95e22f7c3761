"""The record kinds of a partition move's end at its source and of the WAL-file loans it leaves (design §5a).

PartitionMovedOut is the drop: once the target adopted the partition, it leaves its source. Its row, producers,
transactions' state and time index go at once; its batches are set aside under its key for the purge's bounded
passes (`partitions_awaiting_purge`, as a deleted topic's: never one unbounded transaction), so the files they live
in keep counting them until then. The topic's configurations go with the topic's last partition here. The record
lends the target each WAL file of the moved batches that the target holds as a loan row lent by this coordinator:
the file's row here is not idle while a loan is out, so the chain of owners neither passes it on nor deletes it.

FileLoanReturned (at the lender) ends a loan; FileReturned (at the borrower) forgets a returned loan row, or keeps it
as a chain row when the chain's token reached it (`coordinator/files/loans.keeps_row_after_return`). A return asked
twice before the first is applied writes two records: the second finds the loan or the row gone and changes nothing
(ids are never reused, so a row that is gone was this one).
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


def _move(moved: rec.PartitionMovedOut) -> str:
    return f"move {moved.move_id} of partition {moved.partition_key} to coordinator {moved.to_coordinator}"


def _check_frozen(moved: rec.PartitionMovedOut, frozen: tuple[int, int] | None, coordinator_id: int) -> None:
    """The partition frozen here by this move, to its target: (target, move id) as recorded."""
    check_invariant(
        frozen == (moved.to_coordinator, moved.move_id),
        f"drop of {_move(moved)}: the partition is frozen by {frozen} (target, move), or not here",
    )
    for loan in moved.loans:
        check_invariant(
            loan.borrower >= 0 and loan.borrower != coordinator_id,
            f"drop of {_move(moved)} lends file {loan.file_id} to coordinator {loan.borrower}",
        )


class PartitionMovedOutKind(NoCatalogEffects):
    """The drop. The catalog has nothing to change for it (the target's adoption, before it, placed the partition
    there); the node follows it to start the purge of the batches it sets aside."""

    name = "partition_moved_out"
    changes_catalog = True  # the node is told when it is applied (the purge starts)

    def partition_changes(self, body: Any) -> PartitionChanges:
        return PURGE_PENDING

    def replay(self, view: CoordinatorView, moved: rec.PartitionMovedOut, end_offset: int) -> None:
        partition = view.partitions_by_key.get(moved.partition_key)
        frozen = None if partition is None else (partition.moving_to, partition.move_id)
        _check_frozen(moved, frozen, view.coordinator_id)
        assert partition is not None
        view.remove_partition(partition)
        if not view.partitions_of_topic(partition.topic_id):
            view.forget_topic_configs(partition.topic_id)
        view.moved_out[moved.move_id] = moved.to_coordinator
        for loan in moved.loans:
            view.add_pending_loan(loan.object_key, loan.borrower, end_offset)

    def apply(self, transaction: StateTransaction, moved: rec.PartitionMovedOut) -> None:
        transaction.write_high_watermarks()  # before the partition's row goes
        db = transaction.db
        key = moved.partition_key
        row = db.execute(
            "SELECT m.to_coordinator, m.move_id, p.topic_id, p.partition FROM partition_moves AS m "
            "JOIN partitions AS p ON p.partition_key = m.partition_key WHERE m.partition_key = ?",
            (key,),
        ).fetchone()
        _check_frozen(moved, None if row is None else (int(row[0]), int(row[1])), transaction.coordinator_id)
        assert row is not None
        topic_id, partition = bytes(row[2]), int(row[3])
        if transaction.has_batches(key):  # set aside for the purge's passes, gone for every caller
            db.execute(
                "INSERT INTO partitions_awaiting_purge (partition_key, topic_id, topic_name, partition) "
                "SELECT partition_key, topic_id, topic_name, partition FROM partitions WHERE partition_key = ?",
                (key,),
            )
        time_index.forget(db, key)
        transaction.forget_time_tail(key)
        for table in ("producers", "producer_transactions", "aborted_transactions", "partition_moves", "partitions"):
            db.execute(f"DELETE FROM {table} WHERE partition_key = ?", (key,))
        transaction.deleted_partition_keys.add(key)
        if db.execute("SELECT 1 FROM partitions WHERE topic_id = ? LIMIT 1", (topic_id,)).fetchone() is None:
            db.execute("DELETE FROM topic_configs WHERE topic_id = ?", (topic_id,))
        db.execute(
            "INSERT INTO partition_moves_out (move_id, partition_key, topic_id, partition, to_coordinator) "
            "VALUES (?, ?, ?, ?, ?)",
            (moved.move_id, key, topic_id, partition, moved.to_coordinator),
        )
        for loan in moved.loans:
            found = db.execute(
                "SELECT 1 FROM files WHERE file_id = ? AND object_key = ?", (loan.file_id, loan.object_key)
            ).fetchone()
            check_invariant(found is not None, f"drop of {_move(moved)} lends file {loan.file_id}, not here")
            db.execute(
                "INSERT OR IGNORE INTO file_loans (file_id, borrower) VALUES (?, ?)", (loan.file_id, loan.borrower)
            )

    def describe(self, moved: rec.PartitionMovedOut, names: RecordNames) -> RecordDescription:
        partition = names.partition(moved.partition_key)
        loans = len(moved.loans)
        return RecordDescription(
            f"partition moved out: {partition} left for coordinator {moved.to_coordinator} (move {moved.move_id}), "
            f"{loans} file{'' if loans == 1 else 's'} lent to it",
            {
                "partition": partition,
                "to_coordinator": moved.to_coordinator,
                "move_id": moved.move_id,
                "files_lent": [names.file(loan.file_id) for loan in moved.loans],
            },
        )


class FileLoanReturnedKind(NoCatalogEffects):
    """At the lender: a borrower gave its loan row back, the loan leaves this coordinator's row."""

    name = "file_loan_returned"

    def replay(self, view: CoordinatorView, returned: rec.FileLoanReturned, end_offset: int) -> None:
        pass  # only the committed state holds files and their loans

    def apply(self, transaction: StateTransaction, returned: rec.FileLoanReturned) -> None:
        transaction.db.execute(
            "DELETE FROM file_loans WHERE file_id = ? AND borrower = ?", (returned.file_id, returned.borrower)
        )

    def describe(self, returned: rec.FileLoanReturned, names: RecordNames) -> RecordDescription:
        file = names.file(returned.file_id)
        return RecordDescription(
            f"file loan returned: {file} by coordinator {returned.borrower}",
            {"file": file, "borrower": returned.borrower},
        )


class FileReturnedKind(NoCatalogEffects):
    """At the borrower: an idle loan row, its loan returned to the lender, is forgotten (or, owned, becomes a chain
    row that passes the token on)."""

    name = "file_returned"

    def replay(self, view: CoordinatorView, returned: rec.FileReturned, end_offset: int) -> None:
        pass  # only the committed state holds files

    def apply(self, transaction: StateTransaction, returned: rec.FileReturned) -> None:
        db = transaction.db
        row = db.execute(
            "SELECT lender_id, live_batches, owned, "
            "EXISTS (SELECT 1 FROM file_loans AS l WHERE l.file_id = files.file_id), owner_ids FROM files "
            "WHERE file_id = ?",
            (returned.file_id,),
        ).fetchone()
        if row is None:
            return  # returned already (a second record of the same return)
        lender, live, owned, lent, owners = row
        if lender < 0 and owned:
            return  # the first record made it a chain row already
        check_invariant(
            lender >= 0 and live == 0 and not lent,
            f"file {returned.file_id} returned, but it is not an idle loan row (lender {lender}, {live} live "
            f"batches, loans out: {bool(lent)})",
        )
        if owned:  # a chain row from now on: the last owner's deletes the file, another's passes the token
            last = int(str(owners).split(",")[-1]) == transaction.coordinator_id
            db.execute(
                "UPDATE files SET lender_id = -1, loan_move_id = -1, is_last_owner = ? WHERE file_id = ?",
                (int(last), returned.file_id),
            )
        else:
            db.execute("DELETE FROM files WHERE file_id = ?", (returned.file_id,))

    def describe(self, returned: rec.FileReturned, names: RecordNames) -> RecordDescription:
        file = names.file(returned.file_id)
        return RecordDescription(f"file returned: {file} to its lender", {"file": file})
