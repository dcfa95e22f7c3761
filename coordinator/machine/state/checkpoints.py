"""Moving a state's WAL into its database file (a checkpoint) on a thread of its own, not inside `apply`.

SQLite's automatic checkpoint runs in the commit that takes the WAL past its
threshold: copying about a thousand pages and two fsyncs, 5-20 ms, inside
`StateStore.apply` on the node's event loop, where every coordinator of the
node waits for it. Measured at half load (100x100, 8 coordinators), those
applies made the commits' p99. Here the writer's WAL hook only counts pages;
past the threshold PASSIVE checkpoints run on this store's checkpoint thread,
through a connection of its own (apsw releases the interpreter lock while
SQLite works), while the writer goes on appending to the WAL.

SQLite starts the WAL over only when a write begins with every frame copied,
so the thread repeats its pass while the writer added frames during the last
one (each pass is shorter than the one before). Should the writer never leave
it such a moment, the WAL would grow without end: past `HARD_BOUND_FACTOR` times
the threshold the first apply that finds the thread idle checkpoints itself,
as SQLite would have, which no concurrent write can outrun. A failed pass (a
busy WAL, a full disk) is logged and tried again once the WAL has grown by
another threshold (in an apply, at the next apply); damage met in an apply is
raised, and the coordinator goes out of service and rebuilds its state.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import final

import apsw

from snapshot import page_checksums

log = logging.getLogger(__name__)

CHECKPOINT_PAGES_DEFAULT = 1000  # diskless.coordinator.state.checkpoint.pages (SQLite's own default)
PASSES_MAX = 4  # passes of one checkpoint on the thread, each copying what the writer added during the last
HARD_BOUND_FACTOR = 8  # WAL pages past this many thresholds: the apply checkpoints itself
_DAMAGE = (apsw.CorruptError, apsw.NotADBError)  # the state file itself is damaged (or, below, fails a checksum)


@final
class WalCheckpoints:
    """The checkpoints of one state file; `written` after each commit of its writer, `close` before the writer's."""

    def __init__(
        self, path: Path, coordinator_id: int, threshold_pages: int, writer: apsw.Connection, checksums: bool = True
    ) -> None:
        self._path = path
        self._checksums = checksums
        self._coordinator_id = coordinator_id
        self._threshold_pages = threshold_pages
        self._writer = writer
        self._wal_pages = 0  # as the writer's WAL hook last said
        self._next_try_pages = threshold_pages
        self._executor: ThreadPoolExecutor | None = None  # its thread starts with the first checkpoint
        self._connection: apsw.Connection | None = None  # used only on that thread
        self._running: Future[None] | None = None
        self.completed = 0  # on the thread
        self._damage: apsw.Error | None = None  # met by the thread; the next apply raises it
        self.completed_in_apply = 0  # past the hard bound
        writer.set_wal_hook(self._wal_hook)  # replaces SQLite's automatic checkpoint

    def _wal_hook(self, _connection: apsw.Connection, _database: str, pages: int) -> int:
        self._wal_pages = pages
        return apsw.SQLITE_OK

    def written(self) -> None:
        """After a commit of the writer: starts a checkpoint past the threshold, or runs one past the hard bound.

        Raises the damage the thread met (a page or a WAL frame failing its checksum, a corrupt page): the
        coordinator goes out of service and rebuilds its state.
        """
        if self._damage is not None:
            raise self._damage
        running = self._running is not None and not self._running.done()
        if self._past_hard_bound():
            if running:  # the loop never waits for the thread: the first apply after its pass does this
                return
            try:
                self._writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
            except _DAMAGE:
                raise  # the apply's caller takes the coordinator out of service and rebuilds the state
            except apsw.Error as error:  # the transaction is committed; its pages wait in the WAL for the next try
                if page_checksums.is_checksum_damage(error):
                    raise
                log.warning("coordinator %d: a checkpoint of %s failed: %s", self._coordinator_id, self._path, error)
                return
            self.completed_in_apply += 1
            self._wal_pages = 0
            return
        if self._wal_pages < self._next_try_pages or running:
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"coordinator-{self._coordinator_id}-checkpoint")
        self._next_try_pages = self._threshold_pages
        self._running = self._executor.submit(self._checkpoint)

    def _past_hard_bound(self) -> bool:
        return self._wal_pages >= HARD_BOUND_FACTOR * self._threshold_pages

    def _checkpoint(self) -> None:
        try:
            if self._connection is None:
                # Through the checksum VFS, like the writer: the frames it copies are checked (a damaged one is
                # refused, never copied into the file under a fresh page checksum), the pages it writes get theirs.
                connection = page_checksums.connect(self._path, apsw.SQLITE_OPEN_READWRITE, self._checksums)
                # A connection learns that the file is in WAL mode when it first reads it; until then a
                # checkpoint does nothing and says (-1, -1).
                connection.execute("PRAGMA journal_mode").fetchall()
                self._connection = connection
            for _ in range(PASSES_MAX):
                wal_frames, copied = self._connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
                # Done once a pass copied every frame and the writer added none meanwhile (its next write then
                # starts the WAL over); a reader holding old frames leaves some uncopied until it ends.
                if copied < wal_frames or self._wal_pages <= wal_frames or self._past_hard_bound():
                    break  # past the hard bound the next apply checkpoints itself: no more passes here
            self.completed += 1
        except apsw.Error as error:  # busy, a full or failing disk: the WAL keeps the pages; try again later
            log.warning("coordinator %d: a checkpoint of %s failed: %s", self._coordinator_id, self._path, error)
            self._next_try_pages = self._wal_pages + self._threshold_pages
            if isinstance(error, _DAMAGE) or page_checksums.is_checksum_damage(error):
                self._damage = error

    def close(self) -> None:
        """Waits for a running checkpoint and closes its connection, so that the writer's close is the last one."""
        self._writer.set_wal_hook(None)
        if self._executor is None:
            return
        self._executor.submit(self._close_connection).result()
        self._executor.shutdown(wait=True)
        self._executor = None

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
