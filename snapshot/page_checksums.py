"""SQLite files whose every page is verified when read (DESIGN §6): the `diskless-checksums` VFS.

SQLite's pages carry no checksum: a bit flipped on disk is read back as data,
and can serve a wrong object key. SQLite ships a VFS shim for that,
cksumvfs (ext/misc/cksumvfs.c): in a database whose pages reserve 8 bytes, it
writes a checksum of each page into them and verifies it on every page read,
refusing a mismatch with SQLITE_IOERR_DATA. It leaves the WAL alone, whose
frames SQLite checks only when it recovers a WAL after a crash.

`diskless-checksums` (snapshot/checksum_vfs.c, built with the package and
loaded into apsw's SQLite here) does both in C: cksumvfs's page checksums, in
the same bytes, for database files, and every page read from the WAL checked
against its frame's checksum (`snapshot.wal_frames` explains the rule and holds
the same check in Python for a WAL left by a crash). It is C rather than an apsw
VFS in Python because a Python VFS takes the interpreter lock on every file
operation of every thread's SQLite calls: that cost the node a fifth of its
commit rate and a quarter of its FindBatches rate (issue #37). A refused read
leaves its description (file, offset, what failed) on the thread that met it,
and the apsw.IOError that SQLite's refusal becomes on that thread carries it
as its message (`_named_damage`), wherever it is raised.

cksumvfs is loaded too and is SQLite's default VFS in this process, as it is
meant to be: any connection to a checksummed file, ours or not, then keeps its
checksums when it writes (a checkpoint through a plain VFS would copy the WAL's
pages into the file without them); with checks turned off a state is opened
through cksumvfs alone. Files are created with the 8 bytes reserved
(`reserve_page_checksums`); an older file without them is converted in place
by VACUUM (`add_page_checksums`). A snapshot (the backup API) copies pages as
they are, reserved bytes and checksums with them, and is verified as it is
read like any state file.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import apsw
import apsw.sqlite_extra

from snapshot import _checksum_vfs

VFS_NAME = "diskless-checksums"  # page checksums for database files, the WAL's frames checked on every read
PLAIN_VFS = "cksmvfs"  # cksumvfs alone: pages of a checksummed file verified, the WAL not (checksums off)
CHECKSUM_BYTES = 8  # cksumvfs works on files whose pages reserve exactly this many bytes
BUSY_TIMEOUT_MS = 5000
_CONTEXT_DEPTH_MAX = 4  # exceptions raised while handling another, followed back this far
_ENTRY_POINT = "sqlite3_checksumvfs_init"

_lock = threading.Lock()
_registered = False


class PageChecksumsUnavailable(RuntimeError):
    """This apsw carries no cksumvfs (an apsw older than 3.54, or one built without its extras)."""


def register() -> None:
    """Loads cksumvfs and `diskless-checksums` into SQLite, once per process."""
    global _registered
    with _lock:
        if _registered:
            return
        scratch = apsw.Connection(":memory:")
        try:
            if PLAIN_VFS not in apsw.vfs_names():
                try:
                    apsw.sqlite_extra.load(scratch, "cksumvfs")
                except (LookupError, apsw.sqlite_extra.NotAvailable) as error:
                    raise PageChecksumsUnavailable(
                        f"apsw {apsw.apsw_version()} carries no cksumvfs: {error}"
                    ) from error
            if VFS_NAME not in apsw.vfs_names():
                scratch.enable_load_extension(True)
                scratch.load_extension(str(_checksum_vfs.__file__), _ENTRY_POINT)
        finally:
            scratch.close()
        # apsw makes SQLite's error an exception on the thread whose call failed, right after the refused read:
        # its message becomes what the VFS found there, instead of SQLite's bare "disk I/O error".
        setattr(apsw.IOError, "__init__", _named_damage)  # noqa: B010 (mypy refuses assigning a method)
        _registered = True


def _named_damage(self: apsw.IOError, *args: object) -> None:
    found = _checksum_vfs.take_last_damage()
    Exception.__init__(self, *((found,) if found is not None else args))


def vfs_name(page_checksums: bool) -> str:
    """The VFS to open a state file with: checked pages and WAL frames, or (checksums off) cksumvfs alone."""
    register()
    return VFS_NAME if page_checksums else PLAIN_VFS


def connect(path: Path, flags: int, page_checksums: bool = True) -> apsw.Connection:
    """A connection to a SQLite file through the checksum VFS (its pages verified if the file reserves them)."""
    connection = apsw.Connection(str(path), flags=flags, vfs=vfs_name(page_checksums))
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)
    return connection


def is_checksum_damage(error: BaseException) -> bool:
    """A read met a page or a WAL frame whose checksum does not match (SQLITE_IOERR_DATA).

    Also when the damage is what the error happened while handling: SQLite rolls a transaction back by itself
    on an I/O error, so leaving `with connection:` then fails its own ROLLBACK, and apsw raises that instead.
    """
    seen: BaseException | None = error
    for _ in range(_CONTEXT_DEPTH_MAX):
        if seen is None:
            return False
        if isinstance(seen, apsw.IOError) and getattr(seen, "extendedresult", None) == apsw.SQLITE_IOERR_DATA:
            return True
        seen = seen.__context__
    return False


def reserved_bytes(connection: apsw.Connection) -> int:
    """The bytes each page of the file reserves (8 when its pages carry checksums), as SQLite read it."""
    connection.execute("PRAGMA schema_version").fetchall()  # reads page 1, wherever its newest copy is
    reserve = ctypes.c_int(-1)  # negative: ask, change nothing
    connection.file_control("main", apsw.SQLITE_FCNTL_RESERVE_BYTES, ctypes.addressof(reserve))
    return reserve.value


def reserve_page_checksums(connection: apsw.Connection) -> None:
    """On a new, empty file, before anything is written: its pages will carry checksums."""
    reserve = ctypes.c_int(CHECKSUM_BYTES)
    connection.file_control("main", apsw.SQLITE_FCNTL_RESERVE_BYTES, ctypes.addressof(reserve))


def add_page_checksums(path: Path) -> None:
    """Converts a file whose pages carry no checksum: VACUUM rewrites every page with the 8 bytes reserved.

    On a connection of its own, closed before the file is used (cksumvfs
    learns the reserve when a connection reads the file's first page).
    VACUUM reads every row through the B-trees, so structural damage in the
    old file fails it; content damage cannot be told from data in a file
    without checksums, so callers check the old file's integrity first.
    """
    connection = connect(path, apsw.SQLITE_OPEN_READWRITE)
    try:
        reserve_page_checksums(connection)
        connection.execute("VACUUM")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        connection.close()
