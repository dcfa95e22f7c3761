"""A read transaction that may outlive one turn of the event loop: a stream's pages read from one snapshot.

The coordinator's shared reader (`StateStore.reader`) serves every read of the
loop one after the other, each in its own short transaction; a transaction held
on it across awaits would make every other read see its old snapshot. A
`DetachedRead` has a connection of its own instead, used only on a thread of its
own (so a page read never blocks the loop, and a close always waits for the
read under way). Its snapshot is the committed state at its first read, whatever
is applied meanwhile (SQLite's WAL mode: the writer goes on, the reader keeps
seeing the pages of its snapshot). While it is open, the WAL cannot be
checkpointed past its snapshot and grows: callers bound how many are open and
for how long, and the store closes those still open when it closes.

With `one_snapshot=False` each read is a connection and transaction of its own
instead, run by the loop's default executor (`asyncio.to_thread`'s; a
simulation's runs it inline, so a seed still replays exactly): a worker's reads
between its awaits, kept off the loop, that never hold the WAL back across
those awaits. A close by the store waits for the read under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar, final

import apsw

from snapshot import page_checksums

T = TypeVar("T")


class DetachedReadClosed(Exception):
    """The read was closed (by its caller, or by the store closing under it): its snapshot is gone."""


@final
class DetachedRead:
    def __init__(
        self, path: Path, on_close: Callable[[DetachedRead], None], checksums: bool = True, one_snapshot: bool = True
    ) -> None:
        self._path = path
        self._one_snapshot = one_snapshot
        self._checksums = checksums
        self._on_close = on_close
        # With one_snapshot only, and started by the first read: a thread's start waits for the new thread to run,
        # on the loop, and a worker's read (one_snapshot=False, every pass of every worker) needs no thread of its own.
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # the loop and the store's thread may close it at once
        self._connection: apsw.Connection | None = None
        self._closed = False
        self._idle = threading.Event()  # with one_snapshot=False: no read under way
        self._idle.set()

    async def read(self, query: Callable[[apsw.Connection], T]) -> T:
        """`query(connection)` on the read's thread, inside its transaction (begun by the first read).

        Raises DetachedReadClosed once closed, and whatever the query raises (apsw's errors included).
        """
        if not self._one_snapshot:
            return await asyncio.get_running_loop().run_in_executor(None, self._read_alone, query)
        with self._lock:
            if self._closed:
                raise DetachedReadClosed(f"the read of {self._path} is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="detached-read")
            future = self._executor.submit(self._read, query)
        return await asyncio.wrap_future(future)

    def _read(self, query: Callable[[apsw.Connection], T]) -> T:
        if self._closed:
            raise DetachedReadClosed(f"the read of {self._path} was closed")
        if self._connection is None:
            # Busy timeout as the store's own connections: a read waits out a checkpoint's brief lock.
            self._connection = page_checksums.connect(self._path, apsw.SQLITE_OPEN_READONLY, self._checksums)
            self._connection.execute("BEGIN")  # deferred: the snapshot is taken by the query's first read
        return query(self._connection)

    def _read_alone(self, query: Callable[[apsw.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise DetachedReadClosed(f"the read of {self._path} was closed")
            self._idle.clear()
        try:
            connection = page_checksums.connect(self._path, apsw.SQLITE_OPEN_READONLY, self._checksums)
            try:
                return _in_transaction(connection, query)
            finally:
                connection.close()
        finally:
            self._idle.set()

    def close(self, wait: bool = False) -> None:
        """Ends the transaction and closes the connection once the read under way (if any) is done.

        The loop closes without waiting; the store, closing its files, waits (the connection must be
        closed before the state file may be set aside or replaced). Closing twice is harmless.
        """
        with self._lock:
            closing = not self._closed
            executor = self._executor
            if closing:
                self._closed = True
                if executor is not None:  # the connection lives on the read's thread: closed there, after its read
                    executor.submit(self._close_connection)
        if closing:
            self._on_close(self)
        if executor is not None:
            executor.shutdown(wait=wait)
        if wait:
            self._idle.wait()  # a read of its own connection under way (one_snapshot=False)

    def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()  # a read transaction has nothing to keep: closing ends it


@contextlib.contextmanager
def read_transaction(reader: apsw.Connection) -> Iterator[apsw.Connection]:
    """A read transaction on a reader's connection: every query inside sees the same committed state."""
    reader.execute("BEGIN")
    try:
        yield reader
    finally:
        try:
            reader.execute("COMMIT")
        except apsw.Error:
            # A read that met damage leaves its statement failed, and COMMIT reports that failure again;
            # the reader already said so. A read transaction has nothing to lose: end it either way.
            if reader.in_transaction:
                with contextlib.suppress(apsw.Error):
                    reader.execute("ROLLBACK")


def _in_transaction(connection: apsw.Connection, query: Callable[[apsw.Connection], T]) -> T:
    """`query(connection)` in a read transaction of its own: all it reads is of one committed state."""
    with read_transaction(connection) as reader:
        return query(reader)
