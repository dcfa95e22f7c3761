"""Is a coordinator's SQLite state sound? The check, and the mark of a clean close.

SQLite notices a damaged page only when a query reads it, and some damage
is never reported at all: a B-tree page overwritten with another page's
bytes makes rows vanish from a scan, or appear out of place, without an
error. `PRAGMA integrity_check` reads every page and checks the structure
and the key order across pages (which `quick_check` does not: it passes a
leaf copied over another) and that indexes match their tables. It is run
when the state may have been damaged: after a crash or a failure (no
clean-close mark), always if configured, and on demand. Then the rows
derived from others are compared with what those imply (the time index
with the held batches, a switched partition's positions with its seal).
Its cost is measured by `python -m bench.state_check`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import apsw

from coordinator.machine.state import time_index
from snapshot import page_checksums
from snapshot.durable_files import fsync_directory

CLEAN_CLOSE_MARK = "state.closed-cleanly"  # beside state.sqlite; present only between a clean close and a load
PROBLEMS_REPORTED_MAX = 5  # integrity_check's list of problems is cut to this many lines
TIME_INDEX_SCHEMA = 7  # the first schema with the time index (coordinator/machine/state/schema.py)
SWITCH_SCHEMA = 9  # the first schema with the classic -> diskless switch's columns
MOVES_SCHEMA = 11  # the first schema with partition moves (design §5a)
LOANS_SCHEMA = 12  # the first schema with the moves' drop, WAL-file loans and abandons


@dataclass(frozen=True, slots=True)
class IntegrityReport:
    problem: str | None  # None when the file is sound
    seconds: float
    size_bytes: int


def check_integrity(path: Path) -> IntegrityReport:
    """Runs `PRAGMA integrity_check` on the state file (and its WAL) through a connection of its own.

    Through the checksum VFS: reading every page, it verifies every page's checksum (and every WAL frame's).
    """
    started = time.monotonic()
    size = path.stat().st_size if path.exists() else 0
    try:
        connection = page_checksums.connect(path, apsw.SQLITE_OPEN_READWRITE)
        try:
            rows = [row[0] for row in connection.execute(f"PRAGMA integrity_check({PROBLEMS_REPORTED_MAX})")]
            if rows == ["ok"]:
                rows = _derived_state_problems(connection) or rows
        finally:
            connection.close()
    except apsw.Error as error:
        return IntegrityReport(f"{path}: {type(error).__name__}: {error}", time.monotonic() - started, size)
    problem = None if rows == ["ok"] else f"{path} fails PRAGMA integrity_check: " + "; ".join(map(str, rows))
    return IntegrityReport(problem, time.monotonic() - started, size)


def _derived_state_problems(connection: apsw.Connection) -> list[str]:
    """Where state derived from other rows differs from what they imply: the time index from the held batches, and
    each file's live batches (and the meta count) from the batches that name it.

    A sound file (every page and key order right) may still hold a wrong derived row, which would answer
    ListOffsets wrongly, or delete a file still read (DESIGN §5, §4c), without any read failing. A state older than
    the index (schema 6) gets it at its migration, so it has none to check yet.
    """
    version = connection.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
    if version is None or int(version[0]) < TIME_INDEX_SCHEMA:
        return []
    problems = time_index.index_problems(connection) + live_batch_problems(connection)
    if int(version[0]) >= SWITCH_SCHEMA:
        problems += switch_problems(connection)
    if int(version[0]) >= MOVES_SCHEMA:
        problems += move_problems(connection)
    if int(version[0]) >= LOANS_SCHEMA:
        problems += loan_problems(connection)
    return problems


# A switched partition (design §4d) whose positions contradict its seal: the classic start above it, the high
# watermark or the local start below it, or a batch held below it (diskless offsets start at the seal).
_SWITCH_PROBLEMS = (
    "SELECT partition_key, classic_log_start_offset, seal_offset, log_start_offset, local_log_start_offset, "
    "high_watermark FROM partitions AS p WHERE seal_offset >= 0 AND (classic_log_start_offset > seal_offset "
    "OR classic_log_start_offset < 0 OR high_watermark < seal_offset OR local_log_start_offset < seal_offset "
    "OR EXISTS (SELECT 1 FROM batches AS b WHERE b.partition_key = p.partition_key AND b.last_offset < p.seal_offset)"
    f") LIMIT {PROBLEMS_REPORTED_MAX}"
)


def switch_problems(connection: apsw.Connection) -> list[str]:
    """Switched partitions whose positions or batches contradict their seal, at most a few."""
    return [
        f"partition key {key} switched at seal {seal} (classic start {classic}) holds log start {start}, local start "
        f"{local}, high watermark {high_watermark}, or a batch below its seal"
        for key, classic, seal, start, local, high_watermark in connection.execute(_SWITCH_PROBLEMS)
    ]


def live_batch_problems(connection: apsw.Connection) -> list[str]:
    """Files whose `live_batches` differs from the batches naming them, and a meta count differing from the total."""
    counted = dict(connection.execute("SELECT file_id, count(*) FROM batches GROUP BY file_id"))
    problems = []
    for file_id, live in connection.execute("SELECT file_id, live_batches FROM files"):
        naming = counted.pop(file_id, 0)
        if live != naming:
            problems.append(f"file {file_id} counts {live} live batches, {naming} name it")
    problems += [f"{count} batches name file {file_id}, which is not in files" for file_id, count in counted.items()]
    total = connection.execute("SELECT value FROM meta WHERE name = 'live_batch_count'").fetchone()
    (held,) = connection.execute("SELECT count(*) FROM batches").fetchall()[0]
    if total is not None and int(total[0]) != held:
        problems.append(f"meta live_batch_count is {total[0]}, {held} batches are held")
    return problems[:PROBLEMS_REPORTED_MAX]


# A partition frozen for a move (design §5a) that is not here, or that moves to this coordinator itself, or whose
# catch-up flag is neither 0 nor 1.
_MOVE_PROBLEMS = (
    "SELECT m.partition_key, m.to_coordinator, m.move_id FROM partition_moves AS m WHERE m.move_id < 0 "
    "OR m.catching_up NOT IN (0, 1) "
    "OR m.to_coordinator < 0 OR m.to_coordinator = (SELECT value FROM meta WHERE name = 'coordinator_id') "
    "OR NOT EXISTS (SELECT 1 FROM partitions AS p WHERE p.partition_key = m.partition_key) "
    f"LIMIT {PROBLEMS_REPORTED_MAX}"
)


# A move staged here, its target (design §5a), whose staged key a partition row names before its adoption (staged
# batches are read by nobody before it), or that comes from this coordinator itself or from no chunk.
_STAGING_PROBLEMS = (
    "SELECT a.staged_partition_key, a.from_coordinator, a.move_id FROM partition_adoptions AS a "
    "WHERE a.chunks < 1 OR a.from_coordinator < 0 "
    "OR a.from_coordinator = (SELECT value FROM meta WHERE name = 'coordinator_id') "
    "OR (a.adopted = 0 AND EXISTS (SELECT 1 FROM partitions AS p WHERE p.partition_key = a.staged_partition_key)) "
    f"LIMIT {PROBLEMS_REPORTED_MAX}"
)


def move_problems(connection: apsw.Connection) -> list[str]:
    """Frozen or staged partitions whose move contradicts the state, at most a few."""
    frozen = [
        f"partition key {key} frozen by move {move_id} to coordinator {target}: not here, or a move to itself"
        for key, target, move_id in connection.execute(_MOVE_PROBLEMS)
    ]
    staged = [
        f"partition key {key} staged by move {move_id} from coordinator {source}: served before its adoption, from "
        "no chunk, or from this coordinator"
        for key, source, move_id in connection.execute(_STAGING_PROBLEMS)
    ]
    return (frozen + staged)[:PROBLEMS_REPORTED_MAX]


# A chain row (design §5a) that names a loan's move (a loan row of a schema 11 state with no batch names none).
_LOAN_ROW_PROBLEMS = (
    "SELECT 'file ' || file_id || ' lent by ' || lender_id || ' for move ' || loan_move_id FROM files "
    "WHERE lender_id < 0 AND loan_move_id >= 0 "
    f"LIMIT {PROBLEMS_REPORTED_MAX}"
)
# A loan (design §5a) on no file row here, to no coordinator or to this one, or on a row of this coordinator's that
# is itself a loan row lent by that borrower (a loan cycle: neither would ever return); a move dropped here whose
# partition is still served under its key; an abandoned move still staged or adopted.
_LOAN_PROBLEMS = (
    "SELECT 'loan of file ' || l.file_id || ' to coordinator ' || l.borrower FROM file_loans AS l "
    "LEFT JOIN files AS f ON f.file_id = l.file_id WHERE f.file_id IS NULL OR l.borrower < 0 "
    "OR l.borrower = (SELECT value FROM meta WHERE name = 'coordinator_id') OR f.lender_id = l.borrower "
    "UNION ALL SELECT 'move ' || o.move_id || ' dropped, its partition key ' || o.partition_key || ' served' "
    "FROM partition_moves_out AS o JOIN partitions AS p ON p.partition_key = o.partition_key "
    "UNION ALL SELECT 'move ' || a.move_id || ' from coordinator ' || a.from_coordinator || ' abandoned and staged' "
    "FROM abandoned_adoptions AS a JOIN partition_adoptions AS s "
    "ON s.from_coordinator = a.from_coordinator AND s.move_id = a.move_id "
    f"LIMIT {PROBLEMS_REPORTED_MAX}"
)


def loan_problems(connection: apsw.Connection) -> list[str]:
    """Loans, drops and abandons that contradict the state, at most a few."""
    found = [str(problem) for (problem,) in connection.execute(_LOAN_PROBLEMS)]
    found += [f"{problem}: a chain row names no move" for (problem,) in connection.execute(
        _LOAN_ROW_PROBLEMS
    )]  # fmt: skip
    return found[:PROBLEMS_REPORTED_MAX]


def take_clean_close_mark(directory: Path) -> bool:
    """Whether the state was closed cleanly last time; removes the mark (durably) so a crash from now on shows."""
    mark = directory / CLEAN_CLOSE_MARK
    if not mark.exists():
        return False
    mark.unlink()
    fsync_directory(directory)
    return True


def leave_clean_close_mark(directory: Path) -> None:
    """Called once the state's connections are closed without error."""
    (directory / CLEAN_CLOSE_MARK).touch()
    fsync_directory(directory)
