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
with the held batches). Its cost is measured by `python -m bench.state_check`.
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
    return time_index.index_problems(connection) + live_batch_problems(connection)


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
