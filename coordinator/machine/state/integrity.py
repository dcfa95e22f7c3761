"""Is a coordinator's SQLite state sound? The check, and the mark of a clean close.

SQLite notices a damaged page only when a query reads it, and some damage
is never reported at all: a B-tree page overwritten with another page's
bytes makes rows vanish from a scan, or appear out of place, without an
error. `PRAGMA integrity_check` reads every page and checks the structure
and the key order across pages (which `quick_check` does not: it passes a
leaf copied over another) and that indexes match their tables. It is run
when the state may have been damaged: after a crash or a failure (no
clean-close mark), always if configured, and on demand. Its cost is
measured by `python -m bench.state_check`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import apsw

from snapshot import page_checksums
from snapshot.durable_files import fsync_directory

CLEAN_CLOSE_MARK = "state.closed-cleanly"  # beside state.sqlite; present only between a clean close and a load
PROBLEMS_REPORTED_MAX = 5  # integrity_check's list of problems is cut to this many lines


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
        finally:
            connection.close()
    except apsw.Error as error:
        return IntegrityReport(f"{path}: {type(error).__name__}: {error}", time.monotonic() - started, size)
    problem = None if rows == ["ok"] else f"{path} fails PRAGMA integrity_check: " + "; ".join(map(str, rows))
    return IntegrityReport(problem, time.monotonic() - started, size)


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
