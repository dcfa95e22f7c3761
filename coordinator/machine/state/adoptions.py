"""The partition moves a coordinator stages as their target (design §5a), read from its state."""

from __future__ import annotations

from typing import NamedTuple

import apsw

from coordinator.base.invariants import check_invariant
from coordinator.machine.batch_entries import entry_flags
from coordinator.machine.records import AdoptedPartition, CarriedProducer, MovedBatch, MovedFile
from coordinator.machine.view import StagedMove


def adopted_moves(db: apsw.Connection) -> set[tuple[int, int]]:
    """(source, move id) of every move adopted here."""
    return {
        (int(source), int(move_id))
        for source, move_id in db.execute("SELECT from_coordinator, move_id FROM partition_adoptions WHERE adopted")
    }


def adopted_keys(db: apsw.Connection) -> dict[int, int]:
    """Partition key -> source coordinator of every partition adopted here."""
    return {
        int(key): int(source)
        for key, source in db.execute(
            "SELECT staged_partition_key, from_coordinator FROM partition_adoptions WHERE adopted"
        )
    }


def abandoned_moves(db: apsw.Connection) -> set[tuple[int, int]]:
    """(source, move id) of every move abandoned here before its adoption."""
    return {(int(source), int(move_id)) for source, move_id in db.execute("SELECT * FROM abandoned_adoptions")}


def moved_out(db: apsw.Connection) -> dict[int, int]:
    """move id -> target of every move whose partition left here, its source."""
    return {
        int(move_id): int(to) for move_id, to in db.execute("SELECT move_id, to_coordinator FROM partition_moves_out")
    }


def staged_moves(db: apsw.Connection) -> list[StagedMove]:
    """Every move staged here, each with the files its staged batches live in (by the index of batches by file's
    table order: one range of the batches' key per move)."""
    moves = []
    for source, move_id, key, topic_id, partition, chunks, next_offset in db.execute(
        "SELECT from_coordinator, move_id, staged_partition_key, topic_id, partition, chunks, next_offset "
        "FROM partition_adoptions WHERE adopted = 0 ORDER BY from_coordinator, move_id"
    ):
        files = dict(
            db.execute(
                "SELECT f.object_key, f.file_id FROM files AS f WHERE f.file_id IN "
                "(SELECT DISTINCT file_id FROM batches WHERE partition_key = ?)",
                (key,),
            )
        )
        moves.append(StagedMove(source, move_id, key, bytes(topic_id), partition, chunks, next_offset, files))
    return moves


MovedAborted = tuple[int, int, int, int]  # (marker offset, producer id, first offset, last stable offset)


def chunk_from(
    db: apsw.Connection, partition_key: int, from_offset: int, limit: int
) -> tuple[list[MovedBatch], list[MovedFile], list[MovedAborted]]:
    """A moved partition's batches at the source from `from_offset` (the first whose last offset is at or above it),
    at most `limit`, in offset order, with the files they live in (each once, in order of first use) and the aborted
    transactions whose markers are among them. Call it in a read transaction: all must be of one state."""
    batches = []
    files: dict[int, MovedFile] = {}
    for row in db.execute(
        "SELECT b.file_id, f.object_key, f.file_size, f.uploader_broker_id, f.owner_ids, f.committed_at_ms, "
        "b.byte_offset, b.size, b.base_offset, b.last_offset, b.max_timestamp, b.producer_id, b.producer_epoch, "
        "b.base_sequence, b.last_sequence, b.magic, b.timestamp_type, b.append_time_ms, b.entry "
        "FROM batches AS b JOIN files AS f ON f.file_id = b.file_id "
        "WHERE b.partition_key = ? AND b.last_offset >= ? ORDER BY b.last_offset LIMIT ?",
        (partition_key, from_offset, limit),
    ):
        file_id, object_key, size, uploader, owners, committed_at = row[:6]
        if file_id not in files:
            files[file_id] = MovedFile(object_key, size, uploader, tuple(map(int, owners.split(","))), committed_at)
        batches.append(MovedBatch._make((object_key, *row[6:18], entry_flags(row[18]))))
    aborted: list[MovedAborted] = []
    if batches:
        aborted = [
            (int(last), int(producer), int(first), int(stable))
            for last, producer, first, stable in db.execute(
                "SELECT last_offset, producer_id, first_offset, last_stable_offset FROM aborted_transactions "
                "WHERE partition_key = ? AND last_offset BETWEEN ? AND ? ORDER BY last_offset",
                (partition_key, batches[0].base_offset, batches[-1].last_offset),
            )
        ]
    return batches, list(files.values()), aborted


def adopted_partition(db: apsw.Connection, partition_key: int) -> AdoptedPartition | None:
    """What a move carries of a partition at its source besides its batches: its row, its producers' state and its
    topic's configurations (None: no such partition). Call it in a read transaction."""
    row = db.execute(
        "SELECT topic_id, topic_name, partition, log_start_offset, high_watermark, local_log_start_offset, "
        "remote_max_timestamp, classic_log_start_offset, seal_offset, switch_leader_epoch, switch_producers "
        "FROM partitions WHERE partition_key = ?",
        (partition_key,),
    ).fetchone()
    if row is None:
        return None
    transactions = {
        int(producer_id): (int(epoch), int(first))
        for producer_id, epoch, first in db.execute(
            "SELECT producer_id, coordinator_epoch, first_offset FROM producer_transactions WHERE partition_key = ?",
            (partition_key,),
        )
    }
    producers = []
    for producer_id, producer_epoch, window, last_timestamp in db.execute(
        "SELECT producer_id, producer_epoch, window, last_timestamp FROM producers WHERE partition_key = ? "
        "ORDER BY producer_id",
        (partition_key,),
    ):
        epoch, first = transactions.pop(int(producer_id), (-1, -1))
        producers.append(CarriedProducer(producer_id, producer_epoch, bytes(window), last_timestamp, epoch, first))
    # A producer whose window expired may still hold a transaction's state: carried with an empty window.
    check_invariant(not transactions, f"partition {partition_key}: transaction state of producers with no window")
    configs = tuple(
        (str(name), str(value))
        for name, value in db.execute(
            "SELECT name, value FROM topic_configs WHERE topic_id = ? ORDER BY name", (bytes(row[0]),)
        )
    )
    topic_id, name, partition, *positions = row
    return AdoptedPartition._make((bytes(topic_id), str(name), int(partition), *positions, tuple(producers), configs))


def lent_for(db: apsw.Connection, topic_id: bytes, partition: int, source: int, move_id: int) -> list[str] | None:
    """At a move's target, once its adoption is applied: the object keys of the loan rows the move made here (each
    names its lender and move) that are still here, which the source's drop records as loans. None while the
    partition is not served here (the adoption, and so its chunks, not applied yet: ask again).

    Every one of them, idle or not: no such row is returned before the drop (its lender answers RETRY while the move
    is in progress), and a loan recorded for an idle row is settled by the return that follows. Call it in a read
    transaction."""
    row = db.execute("SELECT 1 FROM partitions WHERE topic_id = ? AND partition = ?", (topic_id, partition)).fetchone()
    if row is None:
        return None
    return [
        str(object_key)
        for (object_key,) in db.execute(
            "SELECT object_key FROM files WHERE lender_id = ? AND loan_move_id = ? ORDER BY file_id", (source, move_id)
        )
    ]


# The index of idle loan rows (schema.IDLE_FILE_INDEXES): only they are read, never every idle row of the state.
LOAN_ROWS_TO_RETURN = (
    "SELECT object_key, lender_id, loan_move_id FROM files INDEXED BY files_loan_rows_idle "
    "WHERE live_batches = 0 AND lender_id >= 0 AND NOT EXISTS "
    "(SELECT 1 FROM file_loans AS l WHERE l.file_id = files.file_id) ORDER BY file_id LIMIT ?"
)


class LoanRow(NamedTuple):
    """A loan row to return: its key, its lender and the lender's move that made it."""

    object_key: str
    lender: int
    move_id: int


def loan_rows_to_return(db: apsw.Connection, limit: int) -> list[LoanRow]:
    """The loan rows here with no live batch and no loan of their own out (design §5a), in file id order, at most
    `limit`: the move worker returns each to its lender (coordinator/files/move_returns.check_loan_returned there),
    then records FileReturned here (check_file_returned). An owned one (the chain's token reached it) is among them:
    it returns its loan before it passes the token."""
    return [
        LoanRow(str(object_key), int(lender), int(move_id))
        for object_key, lender, move_id in db.execute(
            LOAN_ROWS_TO_RETURN,
            (limit,),
        )
    ]
