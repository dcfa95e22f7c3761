"""The SQLite schema of one coordinator's state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw

from coordinator.machine.batch_entries import batch_entry
from coordinator.machine.producers import packed_last_append_time
from coordinator.machine.state import time_index

SCHEMA_VERSION = 14

# meta holds counters and the applied log offset, updated in the same
# transaction as the state they describe.
STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS meta (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    ) WITHOUT ROWID""",
    # The classic -> diskless switch (design §4d; schema 9): a switched partition's classic log start, its seal (the
    # first diskless offset), the sealing leader's epoch and the producers carried over, as the switch left them;
    # seal_offset -1: a partition born diskless. The positions the switch set live in the columns above.
    # Tiered storage (DESIGN §4a, KIP-405): below local_log_start_offset, down to log_start_offset, the records are in
    # remote log segments; remote_max_timestamp is the highest effective timestamp offloaded and still remote (-1
    # while nothing is), which says whether a timestamp query is remote storage's to answer.
    """CREATE TABLE IF NOT EXISTS partitions (
        partition_key INTEGER PRIMARY KEY,
        topic_id BLOB NOT NULL,
        topic_name TEXT NOT NULL,
        partition INTEGER NOT NULL,
        log_start_offset INTEGER NOT NULL,
        high_watermark INTEGER NOT NULL,
        local_log_start_offset INTEGER NOT NULL,
        remote_max_timestamp INTEGER NOT NULL,
        classic_log_start_offset INTEGER NOT NULL DEFAULT -1,
        seal_offset INTEGER NOT NULL DEFAULT -1,
        switch_leader_epoch INTEGER NOT NULL DEFAULT -1,
        switch_producers INTEGER NOT NULL DEFAULT 0,
        UNIQUE (topic_id, partition)
    )""",
    # Partition moves (design §5a; schema 11): a partition frozen at this coordinator, its source, while it moves to
    # `to_coordinator`: every write to it answers NOT_COORDINATOR. One row per frozen partition, gone on cancel.
    """CREATE TABLE IF NOT EXISTS partition_moves (
        partition_key INTEGER PRIMARY KEY,
        to_coordinator INTEGER NOT NULL,
        move_id INTEGER NOT NULL,
        catching_up INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID""",
    # Partition moves (design §5a; schema 11), at the target: a move whose batches are being staged here under
    # `staged_partition_key` (no `partitions` row names it, so no read finds them), keyed by the source and its move
    # id; `chunks` recorded so far, `next_offset` the offset the next chunk starts at (-1: no batch staged yet);
    # `adopted` once PartitionAdopted made the staged key a served partition (the row stays: a repeated adoption is
    # then answered as the first, design §5a).
    """CREATE TABLE IF NOT EXISTS partition_adoptions (
        from_coordinator INTEGER NOT NULL,
        move_id INTEGER NOT NULL,
        staged_partition_key INTEGER NOT NULL UNIQUE,
        topic_id BLOB NOT NULL,
        partition INTEGER NOT NULL,
        chunks INTEGER NOT NULL,
        next_offset INTEGER NOT NULL,
        adopted INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (from_coordinator, move_id)
    ) WITHOUT ROWID""",
    # part_batches: the well-formed batches of the file's commit here, stored or rejected (0 for a file
    # taken by hand-over); a retried commit is answered again only while all of them are live (DESIGN §6a).
    # lender_id (schema 11): -1 for a row of the file's owner chain (DESIGN §5); else a *loan row* (design §5a,
    # coordinator/files/loans.py), made by a partition move's target that had no row for the file: never owned,
    # never handed over, never deleting, kept until returned to the lender. loan_move_id (schema 12): the move (of the
    # lender's) that made the loan row, -1 for a chain row: its drop lends it, and the lender holds its return back
    # only while that move is in progress.
    """CREATE TABLE IF NOT EXISTS files (
        file_id INTEGER PRIMARY KEY,
        object_key TEXT NOT NULL UNIQUE,
        file_size INTEGER NOT NULL,
        uploader_broker_id INTEGER NOT NULL,
        owner_ids TEXT NOT NULL,
        committed_at_ms INTEGER NOT NULL,
        live_batches INTEGER NOT NULL,
        is_last_owner INTEGER NOT NULL,
        owned INTEGER NOT NULL,
        delete_after_ms INTEGER NOT NULL,
        part_batches INTEGER NOT NULL,
        lender_id INTEGER NOT NULL DEFAULT -1,
        loan_move_id INTEGER NOT NULL DEFAULT -1
    )""",
    "CREATE INDEX IF NOT EXISTS files_live_by_time ON files (committed_at_ms) WHERE live_batches > 0",
    # The file workers' work list: files with no live batch left here (few, compared with live ones).
    "CREATE INDEX IF NOT EXISTS files_idle ON files (file_id) WHERE live_batches = 0",
    # Clustered by (partition, last offset): one B-tree insert per batch, and FindBatches
    # reads a partition's batches in offset order from one contiguous range.
    # The columns up to timestamp_type are coordinator.machine.records.CommittedBatch, in order. `entry` is the
    # batch's FindBatches answer, serialized at apply (coordinator/machine/batch_entries.py); NULL in rows that
    # schema 2 stored, which reads build field by field.
    """CREATE TABLE IF NOT EXISTS batches (
        batch_id INTEGER NOT NULL,
        partition_key INTEGER NOT NULL,
        byte_offset INTEGER NOT NULL,
        size INTEGER NOT NULL,
        base_offset INTEGER NOT NULL,
        last_offset INTEGER NOT NULL,
        max_timestamp INTEGER NOT NULL,
        producer_id INTEGER NOT NULL,
        producer_epoch INTEGER NOT NULL,
        base_sequence INTEGER NOT NULL,
        last_sequence INTEGER NOT NULL,
        magic INTEGER NOT NULL,
        timestamp_type INTEGER NOT NULL,
        file_id INTEGER NOT NULL,
        append_time_ms INTEGER NOT NULL,
        entry BLOB,
        PRIMARY KEY (partition_key, last_offset)
    ) WITHOUT ROWID""",
    # Partition moves, the drop (design §5a; schema 12), at the source: each move whose partition left here
    # (PartitionMovedOut), so that a repeated drop is answered as the first. One small row per move ever dropped.
    """CREATE TABLE IF NOT EXISTS partition_moves_out (
        move_id INTEGER PRIMARY KEY,
        partition_key INTEGER NOT NULL,
        topic_id BLOB NOT NULL,
        partition INTEGER NOT NULL,
        to_coordinator INTEGER NOT NULL
    )""",
    # WAL-file loans (design §5a; schema 12), at the lender: the borrowers holding a loan row of a file of this
    # coordinator's. A file row with a loan out is not idle: never handed over, never scheduled for deletion.
    """CREATE TABLE IF NOT EXISTS file_loans (
        file_id INTEGER NOT NULL,
        borrower INTEGER NOT NULL,
        PRIMARY KEY (file_id, borrower)
    ) WITHOUT ROWID""",
    # Moves given up here, their target, before their adoption (design §5a; schema 12): a late chunk is refused and
    # a repeated abandon answered as the first.
    """CREATE TABLE IF NOT EXISTS abandoned_adoptions (
        from_coordinator INTEGER NOT NULL,
        move_id INTEGER NOT NULL,
        PRIMARY KEY (from_coordinator, move_id)
    ) WITHOUT ROWID""",
    # A file's batches (DESIGN §4c): consolidation plans by file (GetFileMergeWorkItem) and moves batches into new
    # files, so a file's batches are no longer one run of file ids rising with offsets in each partition; this
    # index finds them (and a retried commit's, and a deleted topic's still counted) by file. File ids only grow:
    # a commit's entries go to the index's right edge.
    "CREATE INDEX IF NOT EXISTS batches_by_file ON batches (file_id)",
    # The extents of a ReplaceBatches call here with their answers (a BatchesReplaced's `extents`, serialized), kept
    # while its file is known, so that a retry with the same key is answered again and changes nothing (§4c).
    """CREATE TABLE IF NOT EXISTS file_replacements (
        file_id INTEGER PRIMARY KEY,
        extents BLOB NOT NULL
    )""",
    # Partitions of deleted topics whose batches are still being purged (DESIGN §4a): gone for every caller (not in
    # `partitions`), their batches leave in bounded passes and the row with the last of them. A table an older
    # state file gains empty on open: its code removed a deleted topic's batches at once.
    """CREATE TABLE IF NOT EXISTS partitions_awaiting_purge (
        partition_key INTEGER PRIMARY KEY,
        topic_id BLOB NOT NULL,
        topic_name TEXT NOT NULL,
        partition INTEGER NOT NULL
    )""",
    # The configurations set on each topic with a partition here (DESIGN §4a); a name not here is at its default.
    # New tables need no migration: every open creates what is missing, and an older state file had no
    # configurations to hold (its log holds no record that sets one).
    """CREATE TABLE IF NOT EXISTS topic_configs (
        topic_id BLOB NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (topic_id, name)
    ) WITHOUT ROWID""",
    # last_timestamp: the effective timestamp of the producer's last batch, which its expiry is decided by (DESIGN
    # §4a). No index on it: the expiry pass reads the table in key order, a bounded step at a time
    # (coordinator/commits/producer_expiry_worker.py), so the commit path writes no second B-tree per producer.
    # Each served partition's time index (coordinator/machine/state/time_index.py, Kafka's TimeIndex): an entry for
    # each held batch whose effective timestamp is above every earlier one's, so ListOffsets by timestamp and
    # MAX_TIMESTAMP are one seek of this key. Timestamps and offsets rise together within a partition.
    """CREATE TABLE IF NOT EXISTS time_index (
        partition_key INTEGER NOT NULL,
        timestamp INTEGER NOT NULL,
        last_offset INTEGER NOT NULL,
        base_offset INTEGER NOT NULL,
        PRIMARY KEY (partition_key, timestamp)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS producers (
        partition_key INTEGER NOT NULL,
        producer_id INTEGER NOT NULL,
        producer_epoch INTEGER NOT NULL,
        window BLOB NOT NULL,
        last_timestamp INTEGER NOT NULL,
        PRIMARY KEY (partition_key, producer_id)
    ) WITHOUT ROWID""",
    # Transactions (DESIGN §4b), only for producers that have written one here: the coordinator epoch of the
    # producer's last marker (-1 none) and the first offset of its open transaction (-1 none). New tables need no
    # migration (an older state's log holds no transactional batch).
    """CREATE TABLE IF NOT EXISTS producer_transactions (
        partition_key INTEGER NOT NULL,
        producer_id INTEGER NOT NULL,
        coordinator_epoch INTEGER NOT NULL,
        first_offset INTEGER NOT NULL,
        PRIMARY KEY (partition_key, producer_id)
    ) WITHOUT ROWID""",
    # A partition's last stable offset is its oldest open transaction's first offset: one index seek.
    "CREATE INDEX IF NOT EXISTS open_transactions ON producer_transactions (partition_key, first_offset) "
    "WHERE first_offset >= 0",
    # Aborted transactions (Kafka's transaction index), by (partition, marker offset): those overlapping a read's
    # range are a range of this key, cut short by last_stable_offset (the LSO right after the abort: no
    # transaction aborted later starts below it), so finding them costs what they are, never a partition scan.
    # `entry`: its element of a read_committed FindBatches answer, serialized once at apply (batch_entries.py).
    """CREATE TABLE IF NOT EXISTS aborted_transactions (
        partition_key INTEGER NOT NULL,
        last_offset INTEGER NOT NULL,
        producer_id INTEGER NOT NULL,
        first_offset INTEGER NOT NULL,
        last_stable_offset INTEGER NOT NULL,
        entry BLOB NOT NULL,
        PRIMARY KEY (partition_key, last_offset)
    ) WITHOUT ROWID""",
)

# The file workers' work lists (schema 14), one partial index per list (file_reads.IdleFilesQuery, and
# adoptions.loan_rows_to_return), keyed in the order the list is read: a query walks only rows of its list, so a
# cycle costs the rows it acts on, not every idle row of the coordinator. files_idle alone made each query read the
# table row of every idle file to test its state: ~10,000 random reads per query per cycle at the end of a 100,000-
# file consolidation, a second on a saturated disk, on the node's loop (docs/benchmarks.md). Only rows with no live
# batch enter them, so a commit (its files live) writes none of them. Made after the migrations, as they name
# columns (lender_id) an older state file gains only there; the open makes any that are missing.
IDLE_FILE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS files_to_hand_over ON files (file_id) "
    "WHERE live_batches = 0 AND owned = 1 AND is_last_owner = 0 AND lender_id < 0",
    "CREATE INDEX IF NOT EXISTS files_awaiting_ownership ON files (file_id) "
    "WHERE live_batches = 0 AND owned = 0 AND lender_id < 0",
    # Both the files to schedule (delete_after_ms -1) and those due (0..now) are a range of its first column.
    "CREATE INDEX IF NOT EXISTS files_owned_last ON files (delete_after_ms, file_id) "
    "WHERE live_batches = 0 AND owned = 1 AND is_last_owner = 1 AND lender_id < 0",
    "CREATE INDEX IF NOT EXISTS files_loan_rows_idle ON files (file_id) WHERE live_batches = 0 AND lender_id >= 0",
)

# A step of a migration: a statement, or a function of the writer's connection for what SQL cannot say.
MigrationStep = str | Callable[[apsw.Connection], None]


def _last_timestamps_from_windows(db: apsw.Connection) -> None:
    """Schema 4 kept no last-batch timestamp: each producer takes its last batch's append time (exact for
    LOG_APPEND_TIME batches; for others the time it was written, which is near its own timestamp)."""
    rows = [
        (packed_last_append_time(window), key, producer_id)
        for key, producer_id, window in db.execute("SELECT partition_key, producer_id, window FROM producers")
    ]
    db.executemany("UPDATE producers SET last_timestamp = ? WHERE partition_key = ? AND producer_id = ?", rows)


def _files_with_lenders(db: apsw.Connection) -> None:
    """Schema 11's `files.lender_id` (-1: every row of an older state is of its owner chain), unless the open's
    CREATE already made the table with it."""
    if not any(column[1] == "lender_id" for column in db.execute("PRAGMA table_info(files)")):
        db.execute("ALTER TABLE files ADD COLUMN lender_id INTEGER NOT NULL DEFAULT -1")


def _moves_with_catch_up(db: apsw.Connection) -> None:
    """Schema 13's `partition_moves.catching_up`, unless the open's CREATE already made the table with it."""
    if not any(column[1] == "catching_up" for column in db.execute("PRAGMA table_info(partition_moves)")):
        db.execute("ALTER TABLE partition_moves ADD COLUMN catching_up INTEGER NOT NULL DEFAULT 0")


def _files_with_loan_moves(db: apsw.Connection) -> None:
    """Schema 12's `files.loan_move_id`, unless the open's CREATE already made the table with it: a loan row of a
    schema 11 state (no drop existed) takes the move whose staged or adopted batches live in it, so that move's drop
    lends it; one with no batch left names none (-1) and goes back at once: it holds nothing."""
    if not any(column[1] == "loan_move_id" for column in db.execute("PRAGMA table_info(files)")):
        db.execute("ALTER TABLE files ADD COLUMN loan_move_id INTEGER NOT NULL DEFAULT -1")
    db.execute(
        "UPDATE files SET loan_move_id = coalesce((SELECT a.move_id FROM batches AS b JOIN partition_adoptions AS a "
        "ON a.staged_partition_key = b.partition_key WHERE b.file_id = files.file_id "
        "AND a.from_coordinator = files.lender_id LIMIT 1), -1) WHERE lender_id >= 0 AND loan_move_id < 0"
    )


def _entries_with_producer_ids(db: apsw.Connection) -> None:
    """Rebuilds the entries of batches whose producer is not 0 from their columns (the entry of producer 0 already
    reads as 0), a partition at a time so that memory stays bounded by the largest partition."""
    keys = [key for (key,) in db.execute("SELECT DISTINCT partition_key FROM batches")]
    for key in keys:
        rows: list[tuple[Any, ...]] = db.execute(
            "SELECT b.last_offset, b.batch_id, f.object_key, b.magic, b.byte_offset, b.size, b.base_offset, "
            "b.last_offset, b.append_time_ms, b.max_timestamp, b.timestamp_type, b.producer_id "
            "FROM batches AS b JOIN files AS f ON f.file_id = b.file_id "
            "WHERE b.partition_key = ? AND b.producer_id != 0 AND b.entry IS NOT NULL",
            (key,),
        ).fetchall()
        db.executemany(
            "UPDATE batches SET entry = ? WHERE partition_key = ? AND last_offset = ?",
            [(batch_entry(*row[1:]), key, row[0]) for row in rows],
        )


_SWITCH_COLUMNS = {
    "classic_log_start_offset": -1,
    "seal_offset": -1,
    "switch_leader_epoch": -1,
    "switch_producers": 0,
}


def _switch_columns(db: apsw.Connection) -> None:
    """The switch's columns (design §4d), added where missing: a file that an older schema's number was written
    over (as a test does to take it back) may have them already."""
    present = {row[1] for row in db.execute("PRAGMA table_info(partitions)")}
    for name, default in _SWITCH_COLUMNS.items():
        if name not in present:
            db.execute(f"ALTER TABLE partitions ADD COLUMN {name} INTEGER NOT NULL DEFAULT {default}")


# Schema 1 -> 2: WAL-file ownership. A file was owned where it was first committed (its first owner).
MIGRATIONS: dict[int, tuple[MigrationStep, ...]] = {
    1: (
        "ALTER TABLE files ADD COLUMN owned INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE files ADD COLUMN delete_after_ms INTEGER NOT NULL DEFAULT -1",
        "UPDATE files SET owned = "
        "(CAST(owner_ids AS INTEGER) = (SELECT value FROM meta WHERE name = 'coordinator_id'))",
        "CREATE INDEX IF NOT EXISTS files_idle ON files (file_id) WHERE live_batches = 0",
        "UPDATE meta SET value = 2 WHERE name = 'schema_version'",
    ),
    # Schema 2 -> 3: each batch's FindBatches entry, serialized at apply; older rows keep NULL.
    2: (
        "ALTER TABLE batches ADD COLUMN entry BLOB",
        "UPDATE meta SET value = 3 WHERE name = 'schema_version'",
    ),
    # Schema 3 -> 4: each file's well-formed batches of its commit here, stored or rejected (a retried
    # commit is answered again only while all of them are live). Older rows take their live batches:
    # a batch rejected or deleted before the migration goes unseen, as it did.
    3: (
        "ALTER TABLE files ADD COLUMN part_batches INTEGER NOT NULL DEFAULT 0",
        "UPDATE files SET part_batches = live_batches",
        "UPDATE meta SET value = 4 WHERE name = 'schema_version'",
    ),
    # Schema 4 -> 5: each producer's last batch's effective timestamp, for its expiry (DESIGN §4a).
    4: (
        "ALTER TABLE producers ADD COLUMN last_timestamp INTEGER NOT NULL DEFAULT -1",
        _last_timestamps_from_windows,
        "UPDATE meta SET value = 5 WHERE name = 'schema_version'",
    ),
    # Schema 5 -> 6: tiered storage (DESIGN §4a). Nothing was remote before: the local log start is the log start.
    5: (
        "ALTER TABLE partitions ADD COLUMN local_log_start_offset INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE partitions ADD COLUMN remote_max_timestamp INTEGER NOT NULL DEFAULT -1",
        "UPDATE partitions SET local_log_start_offset = log_start_offset",
        "UPDATE meta SET value = 6 WHERE name = 'schema_version'",
    ),
    # Schema 6 -> 7: the time index (its table created empty by the open, before migrating), built here from the
    # held batches in one pass, as a commit and a trim would have left it.
    6: (
        time_index.build,
        "UPDATE meta SET value = 7 WHERE name = 'schema_version'",
    ),
    # Schema 7 -> 8: a batch's FindBatches entry names its producer (BatchInfo.producer_id, -1 when not idempotent,
    # with transactions); an older entry says nothing, which a reader takes for producer 0.
    7: (
        _entries_with_producer_ids,
        "UPDATE meta SET value = 8 WHERE name = 'schema_version'",
    ),
    # Schema 8 -> 9: the classic -> diskless switch (design §4d). No partition was switched before.
    8: (
        _switch_columns,
        "UPDATE meta SET value = 9 WHERE name = 'schema_version'",
    ),
    # Schema 9 -> 10: object consolidation (DESIGN §4c). Batches by file (the open creates the index and the empty
    # table of replacements, as it creates anything missing); a state of 10 may hold moved batches, which code of 9
    # (file ids rising with offsets in a partition) would not find.
    9: (
        "CREATE INDEX IF NOT EXISTS batches_by_file ON batches (file_id)",
        "UPDATE meta SET value = 10 WHERE name = 'schema_version'",
    ),
    # Schema 10 -> 11: partition moves (design §5a). The tables are created empty by the open (nothing was frozen
    # or staged); every file row was of its owner chain.
    10: (
        _files_with_lenders,
        "UPDATE meta SET value = 11 WHERE name = 'schema_version'",
    ),
    # Schema 11 -> 12: the moves' drop, loans and abandons (design §5a). Their tables are created empty by the open:
    # no move was dropped, no file lent, no adoption abandoned before; a loan row names the move that made it.
    11: (
        _files_with_loan_moves,
        "UPDATE meta SET value = 12 WHERE name = 'schema_version'",
    ),
    # Schema 12 -> 13: a move's catch-up (design §5a). Every move of a schema 12 state was frozen from its start.
    12: (
        _moves_with_catch_up,
        "UPDATE meta SET value = 13 WHERE name = 'schema_version'",
    ),
    # Schema 13 -> 14: the file workers' work lists, each an index of its own (IDLE_FILE_INDEXES), built here from
    # the rows a state holds.
    13: (
        *IDLE_FILE_INDEXES,
        "UPDATE meta SET value = 14 WHERE name = 'schema_version'",
    ),
}

META_DEFAULTS = {
    "schema_version": SCHEMA_VERSION,
    "coordinator_id": -1,
    "applied_offset": 0,
    "leader_epoch": 0,
    "next_partition_key": 0,
    "next_batch_id": 0,
    "next_file_id": 0,
    "live_batch_count": 0,
}
