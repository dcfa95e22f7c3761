"""Each partition's time index, as Kafka's TimeIndex keeps it: ListOffsets by timestamp in O(log n) (DESIGN §4).

Kafka writes a time-index entry (max timestamp so far, offset) only where a segment's max timestamp grows, and at
most once per `index.interval.bytes` of log. Here the same, per partition, over the batches it holds: a batch is an
entry when its effective timestamp is above every earlier held batch's (it *raises* the max) and no earlier batch
of its interval (INTERVAL_OFFSETS offsets, by last offset) raised it. The first held batch is always one.

Entries rise in timestamp and offset together. The answer for a timestamp t, the first held batch whose timestamp
is >= t (DESIGN §4), is the first raise to t or above: either within the interval of the last entry below t (a
raise there may be unrecorded: the interval's rows after that entry are read, at most INTERVAL_OFFSETS of them) or
the first entry at or above t (a raise in a later interval is its interval's entry). The max timestamp (-3) is the
last entry or a raise after it in its interval. Each is one or two seeks of the table's key and a bounded read.

Writing an entry dirties a page of the index per partition: sparse entries keep commits, which touch many
partitions at once, from writing a second page per partition. The index is a function of the held batches alone:
a commit adds the entries of its batches (`entry_of_batch`, from the partition's `Tail` that the state keeps in
memory); batches leaving a partition's head take their entries with them and the batches now first are read again
for theirs (`trim`); a deleted topic's partitions keep none (their batches, awaiting purge, answer nothing). So it
is rebuilt by replay like the rest of the state (I1), it is in every snapshot (the SQLite file is the snapshot),
and the state check compares it with what the batches imply (`index_problems`).

The effective timestamp is ListOffsets' (DESIGN §4 and its model, tests/model.py): the append time for
LOG_APPEND_TIME batches, else the batch's max timestamp, -1 included (a batch without timestamps is never found by
a timestamp >= 0, as in Kafka, whose index never holds -1 above a real timestamp).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apsw

from protos import coordinator_pb2 as pb

# Offsets per interval, with at most one entry each. Part of the state's format, not a setting: every replica and
# every replay must derive the same entries (a change needs a migration that builds the index again, as schema 7's
# does). A lookup reads at most this many batches past an entry (one-record batches; ~1/10 of it at 10 records).
INTERVAL_OFFSETS = 1024

EFFECTIVE_TIMESTAMP = f"CASE timestamp_type WHEN {pb.LOG_APPEND_TIME} THEN append_time_ms ELSE max_timestamp END"
NO_ENTRY = -2  # the max timestamp of a partition with no batch: below any batch's (max timestamps are >= -1)
OFFSET_END = 2**63 - 1

Entry = tuple[int, int, int, int]  # (partition key, timestamp, last offset, base offset)
# What a commit needs of a partition: (its held batches' max effective timestamp, the interval of its last entry);
# (NO_ENTRY, -1) when it holds none.
Tail = tuple[int, int]
EMPTY_TAIL: Tail = (NO_ENTRY, -1)

INSERT_ENTRIES = "INSERT INTO time_index (partition_key, timestamp, last_offset, base_offset) VALUES (?,?,?,?)"


def interval(last_offset: int) -> int:
    return last_offset // INTERVAL_OFFSETS


PROBLEMS_REPORTED_MAX = 5


def entry_of_batch(
    partition_key: int, tail: Tail, timestamp: int, last_offset: int, base_offset: int
) -> tuple[Tail, Entry | None]:
    """A batch appended to a partition: the partition's tail after it, and its entry if it is one."""
    highest, last_interval = tail
    if timestamp <= highest:
        return tail, None
    its_interval = last_offset // INTERVAL_OFFSETS
    if its_interval == last_interval:
        return (timestamp, last_interval), None  # a raise its interval's entry already stands for
    return (timestamp, its_interval), (partition_key, timestamp, last_offset, base_offset)


def _last_entry(db: apsw.Connection, partition_key: int) -> tuple[int, int, int] | None:
    """(timestamp, last offset, base offset) of the partition's last entry."""
    row = db.execute(
        "SELECT timestamp, last_offset, base_offset FROM time_index WHERE partition_key = ? "
        "ORDER BY timestamp DESC LIMIT 1",
        (partition_key,),
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def _highest_after(db: apsw.Connection, partition_key: int, last_offset: int) -> tuple[int, int] | None:
    """(timestamp, base offset) of the first batch holding the highest timestamp after `last_offset` in its
    interval: the raises an entry there does not record."""
    row = db.execute(
        f"SELECT {EFFECTIVE_TIMESTAMP} AS timestamp, base_offset FROM batches WHERE partition_key = ? "
        "AND last_offset > ? AND last_offset < ? ORDER BY timestamp DESC, last_offset LIMIT 1",
        (partition_key, last_offset, (interval(last_offset) + 1) * INTERVAL_OFFSETS),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def max_timestamp_batch(db: apsw.Connection, partition_key: int) -> tuple[int, int] | None:
    """(max effective timestamp, base offset of the first held batch holding it); None if it holds none."""
    last = _last_entry(db, partition_key)
    if last is None:
        return None
    after = _highest_after(db, partition_key, last[1])
    return after if after is not None and after[0] > last[0] else (last[0], last[2])


def tail(db: apsw.Connection, partition_key: int) -> Tail:
    """What a commit to the partition needs to know of its index, read from the state."""
    last = _last_entry(db, partition_key)
    if last is None:
        return EMPTY_TAIL
    after = _highest_after(db, partition_key, last[1])
    return (max(last[0], after[0]) if after is not None else last[0]), interval(last[1])


def first_at_or_after(db: apsw.Connection, partition_key: int, timestamp: int) -> tuple[int, int] | None:
    """(effective timestamp, base offset) of the first held batch whose timestamp is >= `timestamp`."""
    below = db.execute(
        "SELECT last_offset FROM time_index WHERE partition_key = ? AND timestamp < ? ORDER BY timestamp DESC LIMIT 1",
        (partition_key, timestamp),
    ).fetchone()
    if below is not None:  # an unrecorded raise in that entry's interval comes first, if there is one
        last_offset = int(below[0])
        row = db.execute(
            f"SELECT {EFFECTIVE_TIMESTAMP}, base_offset FROM batches WHERE partition_key = ? "
            f"AND last_offset > ? AND last_offset < ? AND {EFFECTIVE_TIMESTAMP} >= ? ORDER BY last_offset LIMIT 1",
            (partition_key, last_offset, (interval(last_offset) + 1) * INTERVAL_OFFSETS, timestamp),
        ).fetchone()
        if row is not None:
            return row[0], row[1]
    row = db.execute(
        "SELECT timestamp, base_offset FROM time_index WHERE partition_key = ? AND timestamp >= ? "
        "ORDER BY timestamp LIMIT 1",
        (partition_key, timestamp),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def trim(db: apsw.Connection, partition_key: int, removed_max_timestamp: int, bound: int) -> None:
    """After the partition's batches below `bound` left, whose max effective timestamp was `removed_max_timestamp`.

    The entries of the batches that left are exactly those with a timestamp up to that max (a held entry is above
    every batch before it). A batch that stays keeps whether it raises the max from the first entry that stays
    on; before it, the batches now first are read again. The first entry that stays may lose its place to a
    raise before it in its interval, so its whole interval is read again too; later ones keep theirs. A batch
    becomes a raise once every earlier batch at or above its timestamp has left, so reads past the intervals
    read again are of batches that a far higher timestamp, now gone, hid. A partition with no entry here (a
    deleted topic's, awaiting purge) keeps none.
    """
    changes_before = db.total_changes()
    db.execute(
        "DELETE FROM time_index WHERE partition_key = ? AND timestamp <= ?", (partition_key, removed_max_timestamp)
    )
    if db.total_changes() == changes_before:
        return  # no index here: a served partition's first held batch is always an entry, and it left
    first_kept = db.execute(
        "SELECT timestamp, last_offset FROM time_index WHERE partition_key = ? ORDER BY timestamp LIMIT 1",
        (partition_key,),
    ).fetchone()
    until = OFFSET_END
    if first_kept is not None:
        until = (interval(first_kept[1]) + 1) * INTERVAL_OFFSETS
        db.execute("DELETE FROM time_index WHERE partition_key = ? AND timestamp = ?", (partition_key, first_kept[0]))
    db.executemany(
        INSERT_ENTRIES,
        entries_of_batches(
            partition_key,
            db.execute(
                f"SELECT {EFFECTIVE_TIMESTAMP}, last_offset, base_offset FROM batches "
                "WHERE partition_key = ? AND last_offset >= ? AND last_offset < ? ORDER BY last_offset",
                (partition_key, bound, until),
            ),
        ),
    )


def entries_of_batches(partition_key: int, batches: Iterable[tuple[int, int, int]]) -> list[Entry]:
    """The entries of (timestamp, last offset, base offset) batches read in offset order from a partition's first
    held batch."""
    entries: list[Entry] = []
    state = EMPTY_TAIL
    for timestamp, last_offset, base_offset in batches:
        state, entry = entry_of_batch(partition_key, state, timestamp, last_offset, base_offset)
        if entry is not None:
            entries.append(entry)
    return entries


def forget(db: apsw.Connection, partition_key: int) -> None:
    """A partition that is no longer served (its topic deleted) keeps no entry."""
    db.execute("DELETE FROM time_index WHERE partition_key = ?", (partition_key,))


def _expected_entries(db: apsw.Connection) -> Iterator[Entry]:
    """The entries the held batches of served partitions (and of partitions staged by a move, design §5a) imply, by
    partition and offset: one pass over the batches in their own order, with the rule a commit follows
    (`entry_of_batch`)."""
    partition_key, state = None, EMPTY_TAIL
    for key, timestamp, last_offset, base_offset in db.execute(
        f"SELECT partition_key, {EFFECTIVE_TIMESTAMP}, last_offset, base_offset FROM batches "
        "WHERE partition_key IN (SELECT partition_key FROM partitions UNION ALL "
        "SELECT staged_partition_key FROM partition_adoptions) ORDER BY partition_key, last_offset"
    ):
        if key != partition_key:
            partition_key, state = key, EMPTY_TAIL
        state, entry = entry_of_batch(key, state, timestamp, last_offset, base_offset)
        if entry is not None:
            yield entry


def build(db: apsw.Connection) -> None:
    """Every served partition's entries from its held batches (a state of schema 6, at its migration)."""
    db.execute("DELETE FROM time_index")
    db.executemany(INSERT_ENTRIES, list(_expected_entries(db)))


def index_problems(db: apsw.Connection) -> list[str]:
    """Where the time index differs from what the held batches imply: missing, extra or different entries, at most
    a few. Both sides are read in (partition, offset) order and merged, so memory stays small."""
    expected = _expected_entries(db)
    stored = (
        (int(key), int(timestamp), int(last_offset), int(base_offset))
        for key, timestamp, last_offset, base_offset in db.execute(
            "SELECT partition_key, timestamp, last_offset, base_offset FROM time_index "
            "ORDER BY partition_key, timestamp"
        )
    )
    problems: list[str] = []
    want, have = next(expected, None), next(stored, None)
    while (want is not None or have is not None) and len(problems) < PROBLEMS_REPORTED_MAX:
        if have is None or (want is not None and (want[0], want[2]) < (have[0], have[2])):
            assert want is not None
            problems.append(f"time index entry missing: {_described(want)}")
            want = next(expected, None)
        elif want is None or (have[0], have[2]) < (want[0], want[2]):
            problems.append(f"time index entry extra: {_described(have)}")
            have = next(stored, None)
        else:
            if want != have:
                problems.append(f"time index entry wrong: {_described(have)}, expected {_described(want)}")
            want, have = next(expected, None), next(stored, None)
    return problems


def _described(entry: Entry) -> str:
    key, timestamp, last_offset, base_offset = entry
    return f"partition key {key}, timestamp {timestamp}, offsets {base_offset}..{last_offset}"
