"""Read-only queries on a coordinator's committed SQLite state (run inside `read_transaction`)."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import apsw

from coordinator.machine.batch_entries import batch_entry
from coordinator.machine.producers import last_stable_offset
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state import time_index
from coordinator.machine.view import FileFacts, PartitionView
from protos import coordinator_pb2 as pb

_new = tuple.__new__


class StateDamaged(Exception):
    """A read found committed state that breaks an invariant (offsets not contiguous): the file is damaged.

    SQLite reports a damaged page only when its structure is broken; a page overwritten with other
    plausible bytes can make rows vanish without an error, which only the invariants can show.
    """


# What a read raises when the state file is damaged or unreadable: the coordinator then rebuilds it.
DAMAGE_ERRORS = (apsw.CorruptError, apsw.NotADBError, apsw.IOError, StateDamaged)

# Kafka's effective timestamp: the append time for LOG_APPEND_TIME batches, else the batch's max.
_EFFECTIVE_TIMESTAMP = f"CASE timestamp_type WHEN {pb.LOG_APPEND_TIME} THEN append_time_ms ELSE max_timestamp END"
# Retention's (DESIGN §4a): a batch without a timestamp (-1: magic 0, or a producer that set none) ages from its
# append time, as Kafka's retention falls back on the segment's time, never on -1 (expired at the next pass).
_RETENTION_TIMESTAMP = (
    f"CASE WHEN timestamp_type = {pb.LOG_APPEND_TIME} OR max_timestamp < 0 THEN append_time_ms ELSE max_timestamp END"
)


class PartitionOffsets(NamedTuple):
    """A partition's offsets as a read sees them. A NamedTuple built from the row with tuple.__new__
    (`partition_offsets`): every FindBatches and ListOffsets partition builds one, and a frozen dataclass's
    __init__ (a setattr per field) cost more than the query that read it."""

    partition_key: int
    log_start_offset: int
    high_watermark: int
    local_log_start_offset: int  # DESIGN §4a: the first offset whose batch is held here
    remote_max_timestamp: int  # the highest effective timestamp offloaded and still remote; -1 if none
    oldest_open_first_offset: int = -1  # DESIGN §4b: the first offset of the oldest open transaction; -1 if none

    @property
    def last_stable_offset(self) -> int:
        return last_stable_offset(self.oldest_open_first_offset, self.log_start_offset, self.high_watermark)

    @property
    def remote_log_end_offset(self) -> int:
        """The last offset held remotely; -1 when nothing is."""
        return self.local_log_start_offset - 1 if self.log_start_offset < self.local_log_start_offset else -1


@dataclass(frozen=True, slots=True)
class CoordinatorCounts:
    partition_count: int
    live_file_count: int
    live_batch_count: int
    oldest_live_file_timestamp: int
    files_awaiting_handover: int
    files_awaiting_deletion: int


def one_row(cursor: apsw.Cursor, what: str) -> Any:
    """The row of a query that always yields one (an aggregate, a PRAGMA, a meta counter); none means damage."""
    row = cursor.fetchone()
    if row is None:
        raise StateDamaged(f"no row for {what}: the state's meta table or schema is damaged")
    return row


def partition_offsets(db: apsw.Connection, topic_id: bytes, partition: int) -> PartitionOffsets | None:
    # The oldest open transaction in the same statement: one seek of an index that is empty without transactions.
    row = db.execute(
        "SELECT partition_key, log_start_offset, high_watermark, local_log_start_offset, remote_max_timestamp, "
        "coalesce((SELECT min(first_offset) FROM producer_transactions AS t "
        "WHERE t.partition_key = p.partition_key AND t.first_offset >= 0), -1) "
        "FROM partitions AS p WHERE topic_id = ? AND partition = ?",
        (topic_id, partition),
    ).fetchone()
    return None if row is None else _new(PartitionOffsets, row)  # the row's six columns, in the fields' order


def _aborted_rows(db: apsw.Connection, partition_key: int, from_offset: int, below_offset: int) -> list[Any]:
    """(first offset, producer id, entry) of the aborted transactions overlapping [from_offset, below_offset), by
    first offset: Kafka's `TransactionIndex.collectAbortedTxns`. Read by marker offset from `from_offset`, and
    stopped at the first whose recorded LSO reaches `below_offset` (every later one starts at or above it), so the
    cost follows the result, never the partition's aborted transactions."""
    found = []
    for first_offset, producer_id, entry, stable in db.execute(
        "SELECT first_offset, producer_id, entry, last_stable_offset FROM aborted_transactions "
        "WHERE partition_key = ? AND last_offset >= ? ORDER BY last_offset",
        (partition_key, from_offset),
    ):
        if first_offset < below_offset:
            found.append((first_offset, producer_id, entry))
        if stable >= below_offset:
            break
    found.sort()
    return found


def aborted_transactions(
    db: apsw.Connection, partition_key: int, from_offset: int, below_offset: int
) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted transactions overlapping [from_offset, below_offset)."""
    return [
        (producer_id, first) for first, producer_id, _ in _aborted_rows(db, partition_key, from_offset, below_offset)
    ]


# The same answer as `_aborted_rows`, joined by SQLite in one statement: a read_committed FindBatches lists tens of
# aborted transactions, and handing each row to Python cost more than the rest of the aborted work (bench/
# transactions.py). Overlapping [?2, ?3) is the WHERE clause exactly; the scan's end is only a bound on the cost:
# a row from ?2 whose recorded LSO reaches ?3 (no transaction aborted after it starts below ?3). Any such row is a
# correct bound, the first the cheapest: it is looked for from ?3 - 1 (an abort's recorded LSO is at most its
# marker's offset + 1, `rules._oldest_open`) in key order, without ORDER BY, which cost a sorter per call here.
# Rows are joined in key (marker) order, the primary key search's (tests/test_transactions_reads.py checks the
# plan); that is first-offset order unless a row was aborted while an older transaction of the set was still
# open, which its recorded LSO (below its own first offset) shows: then the rows are sorted as `_aborted_rows`
# sorts them. `group_concat` of BLOBs in a UTF-8 database copies their bytes as they are; the CAST gives them back
# as a BLOB.
_ABORTED_ENTRIES = (
    "SELECT CAST(group_concat(entry, '') AS BLOB), max(last_stable_offset < first_offset) "
    "FROM aborted_transactions WHERE partition_key = ?1 AND last_offset >= ?2 AND first_offset < ?3 "
    "AND last_offset <= coalesce((SELECT last_offset FROM aborted_transactions WHERE partition_key = ?1 "
    "AND last_offset >= max(?2, ?3 - 1) AND last_stable_offset >= ?3 LIMIT 1), "
    "9223372036854775807)"
)


def aborted_entries(db: apsw.Connection, partition_key: int, from_offset: int, below_offset: int) -> bytes:
    """The same as a read_committed answer's serialized aborted_transactions (empty when there are none)."""
    joined, unordered = one_row(
        db.execute(_ABORTED_ENTRIES, (partition_key, from_offset, below_offset)), "aborted transactions"
    )
    if unordered:
        return b"".join([entry for _, _, entry in _aborted_rows(db, partition_key, from_offset, below_offset)])
    return bytes(joined) if joined is not None else b""


def topic_configs(db: apsw.Connection) -> dict[bytes, dict[str, str]]:
    """The configurations set on each topic here (DESIGN §4a), by topic id."""
    found: dict[bytes, dict[str, str]] = {}
    for topic_id, name, value in db.execute("SELECT topic_id, name, value FROM topic_configs"):
        found.setdefault(bytes(topic_id), {})[str(name)] = str(value)
    return found


def batches_from(db: apsw.Connection, partition_key: int, offset: int, limit: int) -> apsw.Cursor:
    """(entry, size, base offset, last offset) of the batches holding `offset` or later, in offset order.

    Read lazily, so the cost follows the result. `entry` is the batch's FindBatches answer serialized at
    apply (coordinator/machine/batch_entries.py), or None in a row stored before schema 3 (see `batch_entry_of`).
    """
    return db.execute(
        "SELECT entry, size, base_offset, last_offset FROM batches "
        "WHERE partition_key = ? AND last_offset >= ? ORDER BY last_offset LIMIT ?",
        (partition_key, offset, limit),
    )


def batch_entry_of(db: apsw.Connection, partition_key: int, last_offset: int) -> bytes:
    """The FindBatches entry of a batch stored without one (schema 2), built from its columns."""
    row = one_row(
        db.execute(
            "SELECT b.batch_id, f.object_key, b.magic, b.byte_offset, b.size, b.base_offset, b.last_offset, "
            "b.append_time_ms, b.max_timestamp, b.timestamp_type, b.producer_id "
            "FROM batches AS b JOIN files AS f ON f.file_id = b.file_id "
            "WHERE b.partition_key = ? AND b.last_offset = ?",
            (partition_key, last_offset),
        ),
        f"the file of the batch ending at {last_offset} of partition key {partition_key}",
    )
    return batch_entry(*row)


def last_offsets_between(
    db: apsw.Connection, partition_key: int, from_offset: int, below_offset: int, limit: int
) -> list[int]:
    """The last offsets of a partition's batches in [from_offset, below_offset), ascending, at most `limit`."""
    return [offset for (offset,) in db.execute(
        "SELECT last_offset FROM batches WHERE partition_key = ? AND last_offset >= ? AND last_offset < ? "
        "ORDER BY last_offset LIMIT ?",
        (partition_key, from_offset, below_offset, limit),
    )]  # fmt: skip


def first_batch_at_or_after(db: apsw.Connection, partition_key: int, timestamp: int) -> tuple[int, int] | None:
    """(effective timestamp, base offset) of the first batch in offset order whose timestamp is >= `timestamp`:
    from the partition's time index (coordinator/machine/state/time_index.py)."""
    return time_index.first_at_or_after(db, partition_key, timestamp)


def max_timestamp_batch(db: apsw.Connection, partition_key: int) -> tuple[int, int] | None:
    """(max effective timestamp, base offset of the first batch holding it), from the time index's last entry."""
    return time_index.max_timestamp_batch(db, partition_key)


_FILE_COLUMNS = (
    "file_id, object_key, file_size, uploader_broker_id, owner_ids, committed_at_ms, live_batches, is_last_owner, "
    "owned, delete_after_ms, part_batches, lender_id, loan_move_id, "
    "(SELECT group_concat(borrower) FROM file_loans AS l WHERE l.file_id = files.file_id)"
)
# A row with a loan out (design §5a) is held: never idle, whatever its live batches.
_LENT = "EXISTS (SELECT 1 FROM file_loans AS l WHERE l.file_id = files.file_id)"
# A file awaits deletion here when this coordinator is its last owner, owns it and has no live batch in it;
# a file with no live batch here awaits hand-over otherwise (to the next owner, or from the one before).
_AWAITING_DELETION = "live_batches = 0 AND is_last_owner = 1 AND owned = 1"


def _file_facts(row: tuple[Any, ...]) -> FileFacts:
    file_id, key, size, uploader, owners, committed_at, live, last, owned, delete_after, part_batches, *loans = row
    lender, loan_move, lent = loans
    return FileFacts(
        file_id, key, size, uploader, tuple(map(int, owners.split(","))), committed_at, live, bool(last),
        bool(owned), delete_after, part_batches, lender, () if lent is None else tuple(map(int, lent.split(","))),
        loan_move,
    )  # fmt: skip


def file_facts(db: apsw.Connection, object_key: str) -> FileFacts | None:
    row = db.execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE object_key = ?", (object_key,)).fetchone()
    return None if row is None else _file_facts(row)


def described_file_facts(db: apsw.Connection, object_key: str) -> FileFacts | None:
    """The file as DescribeFiles sees it: its batches of deleted topics not yet purged are not live.

    A deleted topic is gone for every caller at once (DESIGN §4a), while its batches leave in later bounded passes
    and keep counting in the file's `live_batches` until then. Each partition awaiting purge (few: those of topics
    deleted since the last passes) is counted for the file by the index of batches by file, and only for a file
    still counted live while some partition awaits purge. Call it in a read
    transaction: the count and the runs must be of one state.
    """
    return described_files_facts(db, (object_key,)).get(object_key)


def described_files_facts(db: apsw.Connection, object_keys: Sequence[str]) -> dict[str, FileFacts]:
    """`described_file_facts` of each key this coordinator knows, by key, in one query for all of them.

    KnownFiles asks about a step of keys at once (the file workers' probes after a consolidation job): a query per
    key cost its statement, its loan subquery and its row each time, on the node's loop.
    """
    found = {
        facts.object_key: facts
        for facts in map(
            _file_facts,
            db.execute(
                f"SELECT {_FILE_COLUMNS} FROM files WHERE object_key IN (SELECT value FROM json_each(?))",
                (json.dumps(list(object_keys)),),
            ),
        )
    }
    awaiting: list[int] | None = None
    for object_key, facts in found.items():
        if facts.live_batches == 0:
            continue
        if awaiting is None:
            awaiting = [key for (key,) in db.execute("SELECT partition_key FROM partitions_awaiting_purge")]
        if awaiting:
            found[object_key] = _purge_counted(db, facts, awaiting)
    return found


def _purge_counted(db: apsw.Connection, facts: FileFacts, awaiting: Sequence[int]) -> FileFacts:
    """The file with its batches in partitions awaiting purge not counted live."""
    live = facts.live_batches
    for partition_key in awaiting:
        live -= _batches_of_file(db, partition_key, facts.file_id)
        if live <= 0:
            break
    if live < 0:
        raise StateDamaged(f"file {facts.object_key}: more batches awaiting purge than its {facts.live_batches} live")
    return dataclasses.replace(facts, live_batches=live)


def batches_holding(
    db: apsw.Connection, partition_key: int, from_offset: int, to_offset: int, limit: int
) -> list[tuple[int, int, int]]:
    """(base offset, last offset, size) of the partition's batches holding offsets in [from, to], in offset order, at
    most `limit`: a range of the batches' key, and the one batch after it that may still hold `to` (DESIGN §4c)."""
    found: list[tuple[int, int, int]] = list(
        db.execute(
            "SELECT base_offset, last_offset, size FROM batches WHERE partition_key = ? AND last_offset >= ? "
            "AND last_offset <= ? ORDER BY last_offset LIMIT ?",
            (partition_key, from_offset, to_offset, limit),
        )
    )
    if len(found) < limit:
        after = db.execute(
            "SELECT base_offset, last_offset, size FROM batches WHERE partition_key = ? AND last_offset > ? "
            "ORDER BY last_offset LIMIT 1",
            (partition_key, to_offset),
        ).fetchone()
        if after is not None and after[0] <= to_offset:
            found.append(tuple(after))
    return found


def _batches_of_file(db: apsw.Connection, partition_key: int, file_id: int) -> int:
    """How many batches of `file_id` the partition holds (the index of batches by file: one range)."""
    row = db.execute(
        "SELECT count(*) FROM batches INDEXED BY batches_by_file WHERE file_id = ? AND partition_key = ?",
        (file_id, partition_key),
    ).fetchone()
    return int(row[0]) if row is not None else 0


# The columns of coordinator.machine.records.CommittedBatch, in order, then the file id.
_COMMITTED_BATCH_COLUMNS = (
    "batch_id, partition_key, byte_offset, size, base_offset, last_offset, max_timestamp, producer_id, "
    "producer_epoch, base_sequence, last_sequence, magic, timestamp_type, file_id"
)


def file_batches(db: apsw.Connection, file_id: int, partition_keys: Collection[int]) -> list[CommittedBatch]:
    """A file's batches still stored on these partitions, in batch id order (the order of its request).

    Found by the index of batches by file: a file's batches are no longer one run of rising file ids in each
    partition once consolidation moved some (DESIGN §4c).
    """
    wanted = set(partition_keys)
    found = [
        CommittedBatch._make(row[:-1])
        for row in db.execute(
            f"SELECT {_COMMITTED_BATCH_COLUMNS} FROM batches INDEXED BY batches_by_file WHERE file_id = ?", (file_id,)
        )
        if row[1] in wanted
    ]
    found.sort()  # by batch id: batch ids follow the request's order
    return found


class IdleFilesQuery(enum.Enum):
    """What the file workers look for among a coordinator's files with no live batch here, and the values each
    condition binds, in order."""

    # A loan row the chain's token reached (design §5a) is returned first: only then does it pass the token.
    TO_HAND_OVER = "owned = 1 AND is_last_owner = 0 AND lender_id < 0 AND file_id > ?"  # after file id
    # Committed before, after file id. A loan row (design §5a) never waits for the chain's token: it is returned.
    AWAITING_OWNERSHIP = "owned = 0 AND lender_id < 0 AND committed_at_ms <= ? AND file_id > ?"
    TO_SCHEDULE = "owned = 1 AND is_last_owner = 1 AND lender_id < 0 AND delete_after_ms < 0"
    DUE_FOR_DELETION = (
        "owned = 1 AND is_last_owner = 1 AND lender_id < 0 AND delete_after_ms >= 0 AND delete_after_ms <= ?"  # now
    )


def idle_files(db: apsw.Connection, query: IdleFilesQuery, bindings: tuple[int, ...], limit: int) -> list[FileFacts]:
    """Files with no live batch here and no loan out that also meet the query's condition, in file id order, at most
    `limit`."""
    return [
        _file_facts(row)
        for row in db.execute(
            f"SELECT {_FILE_COLUMNS} FROM files WHERE live_batches = 0 AND NOT {_LENT} AND ({query.value}) "
            "ORDER BY file_id LIMIT ?",
            (*bindings, limit),
        )
    ]


def producers_after(db: apsw.Connection, after: tuple[int, int], limit: int) -> list[tuple[int, int, int]]:
    """(partition key, producer id, last batch's effective timestamp) of the producers after `after` in key order,
    at most `limit`: one step of the expiry pass, its cost bounded by the rows it reads (the table's own order)."""
    return list(
        db.execute(
            "SELECT partition_key, producer_id, last_timestamp FROM producers "
            "WHERE (partition_key, producer_id) > (?, ?) ORDER BY partition_key, producer_id LIMIT ?",
            (*after, limit),
        )
    )


def file_state(facts: FileFacts) -> int:
    """The DescribeFiles state of a file as this coordinator sees it."""
    if facts.live_batches > 0 or facts.loans_out > 0:
        return pb.FILE_STATE_LIVE
    if facts.is_last_owner and facts.owned:
        return pb.FILE_STATE_AWAITING_DELETION
    return pb.FILE_STATE_AWAITING_HANDOVER


def coordinator_counts(db: apsw.Connection) -> CoordinatorCounts:
    (live_batch_count,) = one_row(
        db.execute("SELECT value FROM meta WHERE name = 'live_batch_count'"), "meta live_batch_count"
    )
    (partitions,) = one_row(db.execute("SELECT count(*) FROM partitions"), "the partition count")
    live_files, oldest = one_row(
        db.execute("SELECT count(*), min(committed_at_ms) FROM files WHERE live_batches > 0"), "the live files"
    )
    handover, deletion = one_row(
        db.execute(
            f"SELECT coalesce(sum(NOT ({_AWAITING_DELETION})), 0), coalesce(sum({_AWAITING_DELETION}), 0) "
            f"FROM files WHERE live_batches = 0 AND NOT {_LENT}"
        ),
        "the idle files",
    )
    return CoordinatorCounts(
        partitions, live_files, live_batch_count, -1 if oldest is None else oldest, handover, deletion
    )


def applied_offset(db: apsw.Connection) -> int:
    """The metadata-log offset the state reflects (in a transaction: the snapshot's)."""
    (offset,) = one_row(db.execute("SELECT value FROM meta WHERE name = 'applied_offset'"), "meta applied_offset")
    return int(offset)


# A file's DescribeFiles state here, in SQL (as `file_state`).
_FILE_STATE = (
    f"CASE WHEN live_batches > 0 OR {_LENT} THEN {pb.FILE_STATE_LIVE} WHEN {_AWAITING_DELETION} "
    f"THEN {pb.FILE_STATE_AWAITING_DELETION} ELSE {pb.FILE_STATE_AWAITING_HANDOVER} END"
)


def file_keys(db: apsw.Connection) -> apsw.Cursor:
    """(object key, state) of every file here, in file id order (the table's own), read lazily page by page."""
    return db.execute(f"SELECT object_key, {_FILE_STATE} FROM files ORDER BY file_id")


KEY_FRAMING_BYTES = 4  # a key's tag and length in a page, and its state: a bound, not the exact size


@dataclass(frozen=True, slots=True)
class KeyPage:
    object_keys: list[str]
    states: list[pb.FileState]
    exhausted: bool  # the cursor has no row left


def next_key_page(keys: apsw.Cursor, max_keys: int, max_bytes: int) -> KeyPage:
    """The next rows of `file_keys`: at most `max_keys`, and no more once their keys reach `max_bytes`."""
    object_keys: list[str] = []
    states: list[pb.FileState] = []
    size = 0
    while len(object_keys) < max_keys and size < max_bytes:
        row = next(keys, None)
        if row is None:
            return KeyPage(object_keys, states, exhausted=True)
        key = row[0]
        object_keys.append(key)
        states.append(row[1])
        size += (len(key) if key.isascii() else len(key.encode())) + KEY_FRAMING_BYTES
    return KeyPage(object_keys, states, exhausted=False)


def partitions_awaiting_purge(db: apsw.Connection, limit: int) -> list[int]:
    """Keys of deleted topics' partitions whose batches are still being purged, in key order, at most `limit`."""
    return [key for (key,) in db.execute(
        "SELECT partition_key FROM partitions_awaiting_purge ORDER BY partition_key LIMIT ?", (limit,)
    )]  # fmt: skip


def first_last_offsets(db: apsw.Connection, partition_key: int, limit: int) -> list[int]:
    """The last offsets of a partition's first `limit` batches, ascending (the clustered key's order)."""
    return [offset for (offset,) in db.execute(
        "SELECT last_offset FROM batches WHERE partition_key = ? ORDER BY last_offset LIMIT ?", (partition_key, limit)
    )]  # fmt: skip


def topics_awaiting_purge(db: apsw.Connection) -> int:
    """Deleted topics some of whose batches are still here."""
    (count,) = one_row(
        db.execute("SELECT count(DISTINCT topic_id) FROM partitions_awaiting_purge"), "the topics awaiting purge"
    )
    return int(count)


def partitions_from(db: apsw.Connection, first_key: int, limit: int) -> list[PartitionView]:
    """The partitions with key >= `first_key`, in key order, at most `limit` (a retention step's walk), with their
    moves (design §5a)."""
    return [
        PartitionView(
            key, bytes(topic_id), name, partition, log_start, high_watermark, local_start, moving_to=moving_to
        )
        for key, topic_id, name, partition, log_start, high_watermark, local_start, moving_to in db.execute(
            "SELECT p.partition_key, topic_id, topic_name, partition, log_start_offset, high_watermark, "
            "local_log_start_offset, COALESCE(m.to_coordinator, -1) FROM partitions AS p "
            "LEFT JOIN partition_moves AS m ON m.partition_key = p.partition_key "
            "WHERE p.partition_key >= ? ORDER BY p.partition_key LIMIT ?",
            (first_key, limit),
        )
    ]


def retention_batches(db: apsw.Connection, partition_key: int, offset: int, limit: int) -> apsw.Cursor:
    """(last offset, size, retention's timestamp) of the batches holding `offset` or later, oldest first; lazily."""
    return db.execute(
        f"SELECT last_offset, size, {_RETENTION_TIMESTAMP} FROM batches "
        "WHERE partition_key = ? AND last_offset >= ? ORDER BY last_offset LIMIT ?",
        (partition_key, offset, limit),
    )


def partition_bytes(db: apsw.Connection, partition_key: int) -> int:
    """The sizes of a partition's stored batches, summed (retention.bytes compares it; one range of the key)."""
    (total,) = one_row(
        db.execute("SELECT coalesce(sum(size), 0) FROM batches WHERE partition_key = ?", (partition_key,)),
        f"the bytes of partition key {partition_key}",
    )
    return int(total)
