"""Each partition's time index, as Kafka's TimeIndex keeps it: ListOffsets by timestamp in O(log n) (DESIGN §4).

An entry (timestamp, last offset, base offset) stands for each held batch whose effective timestamp is above
every earlier held batch's of its partition: where the partition's max timestamp grows. The first held batch is
always one. Entries rise in timestamp and in offset together, so the first entry with a timestamp >= t is the
first batch (in offset order) whose timestamp is >= t, ListOffsets' answer for t; and the last entry is the first
batch holding the partition's max timestamp, the answer for MAX_TIMESTAMP (-3). Both are one seek of the table's
key.

The index is a function of the held batches and nothing else: a commit adds the entries of its batches that
raise the max (`entries_of_new_batches`); batches leaving a partition's head take their entries with them and the
entries of the batches now first are found again (`trim`); a deleted topic's partitions keep none (their batches,
awaiting purge, answer nothing). So it is rebuilt by replay like the rest of the state (I1), it is in every
snapshot (the SQLite file is the snapshot), and the state check compares it with what the batches imply
(`index_problems`).

The effective timestamp is ListOffsets' (DESIGN §4 and its model, tests/model.py): the append time for
LOG_APPEND_TIME batches, else the batch's max timestamp, -1 included (a batch without timestamps is never found by
a timestamp >= 0, as in Kafka, whose index never holds -1 above a real timestamp).
"""

from __future__ import annotations

from collections.abc import Iterable

import apsw

from protos import coordinator_pb2 as pb

EFFECTIVE_TIMESTAMP = f"CASE timestamp_type WHEN {pb.LOG_APPEND_TIME} THEN append_time_ms ELSE max_timestamp END"
NO_ENTRY = -2  # the max timestamp of a partition with no entry: below any batch's (max timestamps are >= -1)
OFFSET_END = 2**63 - 1

Entry = tuple[int, int, int, int]  # (partition key, timestamp, last offset, base offset)

INSERT_ENTRIES = "INSERT INTO time_index (partition_key, timestamp, last_offset, base_offset) VALUES (?,?,?,?)"

# The entries the held batches of served partitions imply: a batch whose timestamp is above the max of the
# batches before it in its partition. One pass in the batches' own (partition, offset) order.
EXPECTED_ENTRIES = f"""
    SELECT partition_key, timestamp, last_offset, base_offset FROM (
        SELECT partition_key, last_offset, base_offset, {EFFECTIVE_TIMESTAMP} AS timestamp,
            max({EFFECTIVE_TIMESTAMP}) OVER (
                PARTITION BY partition_key ORDER BY last_offset ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ) AS before
        FROM batches WHERE partition_key IN (SELECT partition_key FROM partitions)
    ) WHERE before IS NULL OR timestamp > before"""

PROBLEMS_REPORTED_MAX = 5


def effective_timestamp(max_timestamp: int, timestamp_type: int, append_time_ms: int) -> int:
    """ListOffsets' effective timestamp (EFFECTIVE_TIMESTAMP in Python)."""
    return append_time_ms if timestamp_type == pb.LOG_APPEND_TIME else max_timestamp


def max_timestamp(db: apsw.Connection, partition_key: int) -> int:
    """The partition's max effective timestamp over its held batches (its last entry's); NO_ENTRY if none."""
    row = db.execute(
        "SELECT timestamp FROM time_index WHERE partition_key = ? ORDER BY timestamp DESC LIMIT 1", (partition_key,)
    ).fetchone()
    return NO_ENTRY if row is None else int(row[0])


def first_at_or_after(db: apsw.Connection, partition_key: int, timestamp: int) -> tuple[int, int] | None:
    """(effective timestamp, base offset) of the first held batch whose timestamp is >= `timestamp`."""
    row = db.execute(
        "SELECT timestamp, base_offset FROM time_index WHERE partition_key = ? AND timestamp >= ? "
        "ORDER BY timestamp LIMIT 1",
        (partition_key, timestamp),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def last_entry(db: apsw.Connection, partition_key: int) -> tuple[int, int] | None:
    """(max effective timestamp, base offset of the first held batch holding it)."""
    row = db.execute(
        "SELECT timestamp, base_offset FROM time_index WHERE partition_key = ? ORDER BY timestamp DESC LIMIT 1",
        (partition_key,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def trim(db: apsw.Connection, partition_key: int, removed_max_timestamp: int, bound: int) -> None:
    """After the partition's batches below `bound` left, whose max effective timestamp was `removed_max_timestamp`.

    The entries of the batches that left are exactly those with a timestamp up to that max (a held entry is above
    every batch before it). The entries that stay still are entries; the batches now first, up to the first of
    them, are read again for theirs: a batch is an entry once every earlier batch at or above its timestamp has
    left, so over a partition's life each batch is written as an entry at most once. A partition with no entry
    here (a deleted topic's, awaiting purge) keeps none.
    """
    changes_before = db.total_changes()
    db.execute(
        "DELETE FROM time_index WHERE partition_key = ? AND timestamp <= ?", (partition_key, removed_max_timestamp)
    )
    if db.total_changes() == changes_before:
        return  # no index here: a served partition's first held batch is always an entry, and it left
    first_kept = db.execute(
        "SELECT last_offset FROM time_index WHERE partition_key = ? ORDER BY timestamp LIMIT 1", (partition_key,)
    ).fetchone()
    until = OFFSET_END if first_kept is None else int(first_kept[0])
    db.executemany(
        INSERT_ENTRIES,
        _raising(
            partition_key,
            db.execute(
                f"SELECT {EFFECTIVE_TIMESTAMP}, last_offset, base_offset FROM batches "
                "WHERE partition_key = ? AND last_offset >= ? AND last_offset < ? ORDER BY last_offset",
                (partition_key, bound, until),
            ),
        ),
    )


def _raising(partition_key: int, batches: Iterable[tuple[int, int, int]]) -> list[Entry]:
    """The entries of batches read in offset order from a partition's first held batch."""
    entries: list[Entry] = []
    highest = NO_ENTRY
    for timestamp, last_offset, base_offset in batches:
        if timestamp > highest:
            entries.append((partition_key, timestamp, last_offset, base_offset))
            highest = timestamp
    return entries


def forget(db: apsw.Connection, partition_key: int) -> None:
    """A partition that is no longer served (its topic deleted) keeps no entry."""
    db.execute("DELETE FROM time_index WHERE partition_key = ?", (partition_key,))


def build(db: apsw.Connection) -> None:
    """Every served partition's entries from its held batches (a state of schema 6, at its migration)."""
    db.execute("DELETE FROM time_index")
    db.execute(f"INSERT INTO time_index (partition_key, timestamp, last_offset, base_offset) {EXPECTED_ENTRIES}")


def index_problems(db: apsw.Connection) -> list[str]:
    """Where the time index differs from what the held batches imply: missing or extra entries, at most a few."""
    rows = db.execute(
        f"WITH expected AS ({EXPECTED_ENTRIES}), "
        "stored AS (SELECT partition_key, timestamp, last_offset, base_offset FROM time_index) "
        "SELECT 'missing', * FROM (SELECT * FROM expected EXCEPT SELECT * FROM stored) "
        "UNION ALL SELECT 'extra', * FROM (SELECT * FROM stored EXCEPT SELECT * FROM expected) LIMIT ?",
        (PROBLEMS_REPORTED_MAX,),
    ).fetchall()
    return [
        f"time index entry {how}: partition key {key}, timestamp {timestamp}, offsets {base}..{last}"
        for how, key, timestamp, last, base in rows
    ]
