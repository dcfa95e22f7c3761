"""SQLite files whose every page is verified when read (DESIGN §6): SQLite's checksum VFS, and the WAL's checksums.

SQLite's pages carry no checksum: a bit flipped on disk is read back as data,
and can serve a wrong object key. SQLite ships a VFS shim for that,
cksumvfs (ext/misc/cksumvfs.c): in a database whose pages reserve 8 bytes, it
writes a checksum of each page into them and verifies it on every page read,
refusing a mismatch with SQLITE_IOERR_DATA. apsw's wheel carries it compiled
against the very SQLite it bundles (`apsw.sqlite_extra`), so nothing is built
at install. cksumvfs leaves the WAL file alone; `snapshot.wal_frames` checks
every page read from the WAL against SQLite's own frame checksums. Together
they are one VFS, `diskless-checksums`: a Python VFS over cksumvfs that hands
database files to cksumvfs and wraps the WAL.

Loading cksumvfs makes it SQLite's default VFS in this process, as it is meant
to be: any connection to a checksummed file, ours or not, then keeps its
checksums when it writes (a checkpoint through a plain VFS would copy the WAL's
pages into the file without them). Files are created with the 8 bytes
reserved (`reserve_page_checksums`); an older file without them is converted
in place by VACUUM (`add_page_checksums`). A snapshot (the backup API) copies
pages as they are, reserved bytes and checksums with them, and is verified as
it is read like any state file.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import apsw
import apsw.sqlite_extra

from snapshot.wal_frames import WalFile, damage_error

VFS_NAME = "diskless-checksums"  # cksumvfs for database files, the WAL's frames checked on every read
PLAIN_VFS = "cksmvfs"  # cksumvfs alone: pages of a checksummed file verified, the WAL not (checksums off)
CHECKSUM_BYTES = 8  # cksumvfs works on files whose pages reserve exactly this many bytes
BUSY_TIMEOUT_MS = 5000
_SQLITE_MAGIC = b"SQLite format 3\x00"
_RESERVE_OFFSET = 20  # in the header: the bytes each page reserves at its end
_CONTEXT_DEPTH_MAX = 4  # exceptions raised while handling another, followed back this far

_lock = threading.Lock()
_vfs: _ChecksumVfs | None = None


class PageChecksumsUnavailable(RuntimeError):
    """This apsw carries no cksumvfs (an apsw older than 3.54, or one built without its extras)."""


class _DatabaseFile(apsw.VFSFile):
    """A database file through cksumvfs; a page failing its checksum is reported with the file and offset."""

    def __init__(self, name: str | apsw.URIFilename | None, flags: list[int]) -> None:
        super().__init__(PLAIN_VFS, name, flags)
        self._name = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
        self._read_only = bool((flags[0] | flags[1]) & apsw.SQLITE_OPEN_READONLY)
        self._checksummed = False  # the header said 8 reserved bytes once

    def xLock(self, level: int) -> None:
        try:
            super().xLock(level)
        except apsw.IOError:
            # The last connection to close tries an exclusive lock to checkpoint the WAL; on a read-only file that
            # fails, which SQLite expects and ignores. Raised from a Python VFS, apsw would raise it from close().
            if self._read_only and level == apsw.SQLITE_LOCK_EXCLUSIVE:
                raise apsw.BusyError(f"{self._name}: opened read-only") from None
            raise

    def xRead(self, amount: int, offset: int) -> bytes:
        try:
            data = super().xRead(amount, offset)
        except apsw.IOError as error:
            if not is_checksum_damage(error):
                raise
            raise damage_error(f"{self._name}: the page at offset {offset} fails its checksum") from None
        if offset == 0 and len(data) > _RESERVE_OFFSET and data.startswith(_SQLITE_MAGIC):
            # cksumvfs reads the reserve from the header each time it reads the first page, and checks nothing
            # when it is not 8: a bit flipped there would turn the checks off. A file never loses its checksums.
            if data[_RESERVE_OFFSET] == CHECKSUM_BYTES:
                self._checksummed = True
            elif self._checksummed:
                raise damage_error(
                    f"{self._name}: its header says pages reserve {data[_RESERVE_OFFSET]} bytes, "
                    f"not the {CHECKSUM_BYTES} of their checksums"
                )
        return data


class _ChecksumVfs(apsw.VFS):
    def __init__(self) -> None:
        super().__init__(VFS_NAME, base=PLAIN_VFS)

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
        if flags[0] & apsw.SQLITE_OPEN_WAL:
            return WalFile(PLAIN_VFS, name, flags)
        if flags[0] & apsw.SQLITE_OPEN_MAIN_DB:
            return _DatabaseFile(name, flags)
        return apsw.VFSFile(PLAIN_VFS, name, flags)


def register() -> None:
    """Loads cksumvfs (once per process) and registers `diskless-checksums` over it."""
    global _vfs
    with _lock:
        if _vfs is not None:
            return
        if PLAIN_VFS not in apsw.vfs_names():
            scratch = apsw.Connection(":memory:")
            try:
                apsw.sqlite_extra.load(scratch, "cksumvfs")
            except (LookupError, apsw.sqlite_extra.NotAvailable) as error:
                raise PageChecksumsUnavailable(f"apsw {apsw.apsw_version()} carries no cksumvfs: {error}") from error
            finally:
                scratch.close()
        _vfs = _ChecksumVfs()


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
