"""Read-only queries on a coordinator's committed SQLite state about its WAL files (DESIGN §5): their facts, the file
workers' work lists, DescribeFiles' and ListFileKeys' answers, and the counts DescribeCoordinators reports."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from coordinator.machine.records import CommittedBatch
from coordinator.machine.state.reads import StateDamaged, one_row
from coordinator.machine.view import FileFacts
from protos import coordinator_pb2 as pb


@dataclass(frozen=True, slots=True)
class CoordinatorCounts:
    partition_count: int
    live_file_count: int
    live_batch_count: int
    oldest_live_file_timestamp: int
    files_awaiting_handover: int
    files_awaiting_deletion: int


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
    """What the file workers look for among a coordinator's files with no live batch here: the index of that list
    (schema.IDLE_FILE_INDEXES), the condition, whose values are bound in order, and the order read.

    Each condition repeats its index's WHERE terms word for word: SQLite uses a partial index only for a query whose
    WHERE holds every term of the index's, and INDEXED BY makes a query that could not use it fail, rather than fall
    back to walking every idle row (tests/test_idle_file_scans.py counts the rows each visits)."""

    # A loan row the chain's token reached (design §5a) is returned first: only then does it pass the token.
    TO_HAND_OVER = (
        "files_to_hand_over",
        "owned = 1 AND is_last_owner = 0 AND lender_id < 0 AND file_id > ?",  # after file id
        "file_id",
    )
    # Committed before, after file id. A loan row (design §5a) never waits for the chain's token: it is returned.
    AWAITING_OWNERSHIP = (
        "files_awaiting_ownership",
        "owned = 0 AND lender_id < 0 AND committed_at_ms <= ? AND file_id > ?",
        "file_id",
    )
    TO_SCHEDULE = (
        "files_owned_last",
        "owned = 1 AND is_last_owner = 1 AND lender_id < 0 AND delete_after_ms < 0",
        "delete_after_ms, file_id",  # every one unscheduled (-1): file id order
    )
    # The longest overdue first: the index's order, so a long list of due files is read only as far as the limit.
    DUE_FOR_DELETION = (
        "files_owned_last",
        "owned = 1 AND is_last_owner = 1 AND lender_id < 0 AND delete_after_ms >= 0 AND delete_after_ms <= ?",  # now
        "delete_after_ms, file_id",
    )

    @property
    def index(self) -> str:
        return str(self.value[0])

    @property
    def condition(self) -> str:
        return str(self.value[1])

    @property
    def order(self) -> str:
        return str(self.value[2])


def idle_files_statement(query: IdleFilesQuery) -> str:
    """The statement of `idle_files`; bindings: the query's, then the limit."""
    # The loan test runs for the rows of the list only (a lookup in file_loans' key each): a row with a loan out is
    # rare among them, since a lender's row stays held only while a borrower still has the file.
    return (
        f"SELECT {_FILE_COLUMNS} FROM files INDEXED BY {query.index} "
        f"WHERE live_batches = 0 AND ({query.condition}) AND NOT {_LENT} ORDER BY {query.order} LIMIT ?"
    )


def idle_files(db: apsw.Connection, query: IdleFilesQuery, bindings: tuple[int, ...], limit: int) -> list[FileFacts]:
    """Files with no live batch here and no loan out that also meet the query's condition, in the query's order, at
    most `limit`."""
    return [_file_facts(row) for row in db.execute(idle_files_statement(query), (*bindings, limit))]


def file_state(facts: FileFacts) -> int:
    """The DescribeFiles state of a file as this coordinator sees it."""
    if facts.live_batches > 0 or facts.loans_out > 0:
        return pb.FILE_STATE_LIVE
    if facts.is_last_owner and facts.owned:
        return pb.FILE_STATE_AWAITING_DELETION
    return pb.FILE_STATE_AWAITING_HANDOVER


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
