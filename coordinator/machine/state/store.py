"""One coordinator's SQLite file: opening it, loading the view, and `apply`, its only writer.

`apply` runs every record of a group (each interpreted by coordinator.machine.kinds)
in one transaction that also stores the applied log offset (DESIGN §3 step 5),
so the state always equals apply(log[0 .. applied offset]) (invariant I1). Reads for FindBatches and
friends go through a separate connection (WAL mode) and see committed state.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Sequence
from pathlib import Path

import apsw

from coordinator.base.invariants import check_invariant
from coordinator.machine import kinds
from coordinator.machine.producers import PackedWindow, decode_window
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state import adoptions, file_reads, reads, time_index
from coordinator.machine.state.checkpoints import CHECKPOINT_PAGES_DEFAULT, WalCheckpoints
from coordinator.machine.state.detached_read import DetachedRead, read_transaction
from coordinator.machine.state.integrity import check_integrity
from coordinator.machine.state.schema import IDLE_FILE_INDEXES, META_DEFAULTS, MIGRATIONS, SCHEMA_VERSION, STATEMENTS
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView, FileFacts, PartitionView
from protos import records_pb2 as rec
from snapshot import page_checksums
from snapshot.page_checksums import CHECKSUM_BYTES, is_checksum_damage

log = logging.getLogger(__name__)

WRITER_CACHE_BYTES_DEFAULT = 64 * 1024 * 1024  # diskless.coordinator.state.cache.bytes
BATCH_ID_SPACE = 2**40  # batch ids are unique across coordinators: coordinator id in the high bits

AppliedFrame = tuple[int, Sequence[rec.MetadataRecord]]  # (end offset of the frame, its records)


# Errors of the disk or the machine, not of the file's content.
_ENVIRONMENT_ERRORS = (apsw.FullError, apsw.IOError, apsw.CantOpenError, apsw.ReadOnlyError, apsw.NoMemError)


class StateCorrupt(Exception):
    """The SQLite file cannot be read as this coordinator's state."""


def _connect(path: Path, *, readonly: bool, checksums: bool) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    return page_checksums.connect(path, flags, checksums)


def _is_new(path: Path) -> bool:
    """No file, or an empty one with nothing in a WAL beside it: the next write creates the database."""
    wal = path.with_name(path.name + "-wal")
    return not path.exists() or (path.stat().st_size == 0 and (not wal.exists() or wal.stat().st_size == 0))


def _open_writer(path: Path, checksums: bool) -> apsw.Connection:
    """The writer's connection; a new file gets page checksums, an older file without them is converted first."""
    new = _is_new(path)
    writer = _connect(path, readonly=False, checksums=checksums)
    if not checksums:
        return writer
    if new:
        page_checksums.reserve_page_checksums(writer)  # before the first write, which lays out the pages
        return writer
    reserved = page_checksums.reserved_bytes(writer)
    if reserved == CHECKSUM_BYTES:
        return writer
    writer.close()
    if reserved != 0:
        raise StateCorrupt(f"{path}: its pages reserve {reserved} bytes, not the {CHECKSUM_BYTES} of checksums")
    # Written before page checksums: checked as a whole (the only check a file without them allows), then
    # rewritten with them. Once per file; damage found here sets it aside for a rebuild like any other.
    report = check_integrity(path)
    if report.problem is not None:
        raise StateCorrupt(report.problem)
    page_checksums.add_page_checksums(path)
    log.warning("%s: added page checksums (VACUUM, %.2fs for the check)", path, report.seconds)
    return _connect(path, readonly=False, checksums=checksums)


def truncation_problem(path: Path) -> str | None:
    """Whether a SQLite file is shorter than its header says (a cut copy), when no WAL holds the rest.

    SQLite notices missing pages only when a query touches them; this catches
    a truncated file at open. With a non-empty -wal the newest pages may live
    there, so the check is skipped (the file header is then a checkpoint's).
    """
    wal = path.with_name(path.name + "-wal")
    if not path.exists() or (wal.exists() and wal.stat().st_size > 0):
        return None
    with open(path, "rb") as file:
        header = file.read(100)
    size = path.stat().st_size
    if size == 0:
        return None  # a new, empty database
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return f"{path}: not a SQLite file ({size} bytes)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    # The header's page count is valid only when its change counter matches the version-valid-for number.
    if header[24:28] == header[92:96] and page_count * page_size > size:
        return f"{path}: {size} bytes, its header says {page_count} pages of {page_size} bytes (truncated)"
    return None


def open_reader(path: Path, checksums: bool = True) -> apsw.Connection:
    """A read-only connection to a state file (WAL mode: it reads committed transactions, also from another process)."""
    return _connect(path, readonly=True, checksums=checksums)


class StateStore:
    def __init__(
        self,
        path: Path,
        coordinator_id: int,
        cache_bytes: int = WRITER_CACHE_BYTES_DEFAULT,
        checkpoint_pages: int = CHECKPOINT_PAGES_DEFAULT,
        checksums: bool = True,
    ) -> None:
        self.path = path
        self.coordinator_id = coordinator_id
        # What the load that opened this file repaired to get it (coordinator/runtime/shard/state_opening.py): the
        # coordinator counts each in diskless_coordinator_repairs_total.
        self.repairs: list[str] = []
        self.checksums = (
            checksums  # pages and WAL frames verified on every read (diskless.coordinator.state.page.checksums)
        )
        problem = truncation_problem(path)
        if problem is not None:
            raise StateCorrupt(problem)
        try:
            self._writer = _open_writer(path, checksums)
            self._writer.execute("PRAGMA journal_mode=WAL")
            # The log is the durable copy: a lost SQLite commit is replayed from it.
            self._writer.execute("PRAGMA synchronous=NORMAL")
            # Inserts land all over the batches B-tree (one tail per partition): a cache that holds those
            # pages doubles replay at a million batches (SQLite's default is 2 MiB).
            self._writer.execute(f"PRAGMA cache_size=-{max(1, cache_bytes // 1024)}")
            with self._writer:
                for statement in STATEMENTS:
                    self._writer.execute(statement)
                defaults = dict(META_DEFAULTS, coordinator_id=coordinator_id)
                defaults["next_batch_id"] = coordinator_id * BATCH_ID_SPACE
                self._writer.executemany(
                    "INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)", list(defaults.items())
                )
                self._migrate()
                for statement in IDLE_FILE_INDEXES:  # a new file's (its schema is today's: nothing migrates)
                    self._writer.execute(statement)
            self.meta = dict(self._writer.execute("SELECT name, value FROM meta"))
        except _ENVIRONMENT_ERRORS as error:
            if is_checksum_damage(error):  # a page or a WAL frame that fails its checksum: damage
                raise StateCorrupt(f"{path}: {error}") from error
            raise  # a full or failing disk is not a damaged state: it is reported (and retried) as what it is
        except apsw.Error as error:
            raise StateCorrupt(f"{path}: {error}") from error
        if self.meta["schema_version"] != SCHEMA_VERSION or self.meta["coordinator_id"] != coordinator_id:
            raise StateCorrupt(
                f"{path}: schema {self.meta['schema_version']} of coordinator {self.meta['coordinator_id']}, "
                f"expected schema {SCHEMA_VERSION} of coordinator {coordinator_id}"
            )
        # 0: SQLite's automatic checkpoint, inside the apply that passes its threshold (a baseline).
        self._checkpoints: WalCheckpoints | None = None
        if checkpoint_pages > 0:
            self._checkpoints = WalCheckpoints(path, coordinator_id, checkpoint_pages, self._writer, checksums)
        self.reader = open_reader(path, checksums)
        self._detached_reads: set[DetachedRead] = set()  # open on threads of their own; closed before the store
        # The committed producer windows, packed as stored, kept in memory so apply never reads them back.
        try:
            self.producer_windows = self._read_producer_windows()
        except apsw.Error as error:
            self.close()
            if is_checksum_damage(error) or isinstance(error, apsw.CorruptError | apsw.NotADBError):
                # The first read of the producers' pages, at open: damage like any other found opening the state
                # (set aside and rebuilt at once), not a failed load waiting to be tried again.
                raise StateCorrupt(f"{path}: {error}") from error
            raise
        self.producer_count = sum(map(len, self.producer_windows.values()))  # (partition, producer) states kept
        # Each partition's time-index tail once a commit needed it (coordinator/machine/state/time_index.py): so a
        # commit reads none from SQLite. Transactions change it in place; a failed one clears it.
        self.time_tails: dict[int, time_index.Tail] = {}

    def _migrate(self) -> None:
        """Brings a state file of an older schema to this one, in the open transaction."""
        (version,) = reads.one_row(
            self._writer.execute("SELECT value FROM meta WHERE name = 'schema_version'"), "the schema version"
        )
        while version in MIGRATIONS:
            for step in MIGRATIONS[version]:
                if isinstance(step, str):
                    self._writer.execute(step)
                else:
                    step(self._writer)
            (version,) = reads.one_row(
                self._writer.execute("SELECT value FROM meta WHERE name = 'schema_version'"), "the schema version"
            )

    def _read_producer_windows(self) -> dict[int, dict[int, PackedWindow]]:
        windows: dict[int, dict[int, PackedWindow]] = {}
        for key, producer_id, epoch, window, last_timestamp in self._writer.execute(
            "SELECT partition_key, producer_id, producer_epoch, window, last_timestamp FROM producers"
        ):
            windows.setdefault(key, {})[producer_id] = (epoch, window, last_timestamp)
        return windows

    @property
    def checkpoints_completed(self) -> int:
        """Checkpoints run on the state's own thread (none when SQLite checkpoints by itself)."""
        return 0 if self._checkpoints is None else self._checkpoints.completed

    @property
    def checkpoints_in_apply(self) -> int:
        """Checkpoints an apply ran itself, the WAL past its hard bound (none when SQLite checkpoints by itself)."""
        return 0 if self._checkpoints is None else self._checkpoints.completed_in_apply

    @property
    def applied_offset(self) -> int:
        return int(self.meta["applied_offset"])

    def close(self) -> None:
        for detached in list(self._detached_reads):
            detached.close(wait=True)
        self.reader.close()
        if self._checkpoints is not None:
            self._checkpoints.close()
        self._writer.close()

    def _follow_producer_windows(self, transaction: StateTransaction) -> None:
        """The committed windows in memory after a transaction: expiries first, then the windows written after."""
        windows_of = self.producer_windows
        count = self.producer_count
        for key, producer_id in transaction.expired_windows:
            windows = windows_of.get(key)
            if windows is not None and windows.pop(producer_id, None) is not None:
                count -= 1
                if not windows:
                    del windows_of[key]
        for key in transaction.deleted_partition_keys:
            count -= len(windows_of.pop(key, ()))
        for (key, producer_id), window in transaction.changed_windows.items():
            windows = windows_of.get(key)
            if windows is None:
                windows = windows_of[key] = {}
            if producer_id not in windows:
                count += 1
            windows[producer_id] = window
        self.producer_count = count

    # ------------------------------------------------------------------ loading

    def load_view(self) -> CoordinatorView:
        """The view of the committed state (nothing pending)."""
        view = CoordinatorView(
            self.coordinator_id,
            self.committed_file,
            self.committed_batches,
            self.committed_last_offsets,
            next_partition_key=self.meta["next_partition_key"],
            next_batch_id=self.meta["next_batch_id"],
            next_file_id=self.meta["next_file_id"],
            leader_epoch=self.meta["leader_epoch"],
            committed_run=self.committed_run,
            committed_replacement=self.committed_replacement,
            file_is_committed=self.file_is_committed,
        )
        for row in self._writer.execute(
            "SELECT p.partition_key, topic_id, topic_name, partition, log_start_offset, high_watermark, "
            "local_log_start_offset, seal_offset, switch_leader_epoch, classic_log_start_offset, "
            "COALESCE(m.to_coordinator, -1), COALESCE(m.move_id, -1), COALESCE(m.catching_up, 0) = 1 "
            "FROM partitions AS p LEFT JOIN partition_moves AS m ON m.partition_key = p.partition_key"
        ):
            view.load_partition(PartitionView(*row))
        for key, windows in self.producer_windows.items():
            for producer_id, (epoch, packed, last_timestamp) in windows.items():
                view.load_producer(key, producer_id, decode_window(epoch, packed, last_timestamp))
        for topic_id, configs in reads.topic_configs(self._writer).items():
            view.load_topic_configs(topic_id, configs)
        for staged in adoptions.staged_moves(self._writer):
            view.staged_moves[(staged.from_coordinator, staged.move_id)] = staged
        view.adopted_moves = adoptions.adopted_moves(self._writer)
        view.adopted_keys = adoptions.adopted_keys(self._writer)
        view.abandoned_moves = adoptions.abandoned_moves(self._writer)
        view.moved_out = adoptions.moved_out(self._writer)
        for row in self._writer.execute(
            "SELECT partition_key, producer_id, coordinator_epoch, first_offset FROM producer_transactions"
        ):
            view.load_transaction_state(*row)
        return view

    def committed_file(self, object_key: str) -> FileFacts | None:
        """The committed file with this key (on the writer's connection: checks and apply share the loop)."""
        return file_reads.file_facts(self._writer, object_key)

    def file_is_committed(self, object_key: str) -> bool:
        """Whether a committed file has this key (the writer's, as above): the key's index alone, no row read."""
        return self._writer.execute("SELECT 1 FROM files WHERE object_key = ?", (object_key,)).fetchone() is not None

    def committed_batches(self, file_id: int, partition_keys: Collection[int]) -> list[CommittedBatch]:
        """A committed file's batches on these partitions (on the writer's connection, as `committed_file`)."""
        return file_reads.file_batches(self._writer, file_id, partition_keys)

    def committed_last_offsets(self, partition_key: int, from_offset: int, below_offset: int, limit: int) -> list[int]:
        """Last offsets of a partition's committed batches in [from, below), ascending (the writer's, as above)."""
        return reads.last_offsets_between(self._writer, partition_key, from_offset, below_offset, limit)

    def committed_run(
        self, partition_key: int, from_offset: int, to_offset: int, limit: int
    ) -> list[tuple[int, int, int]]:
        """The committed batches holding offsets in [from, to] (the writer's, as above; DESIGN §4c)."""
        return reads.batches_holding(self._writer, partition_key, from_offset, to_offset, limit)

    def committed_replacement(self, file_id: int) -> bytes | None:
        """The stored extents of the ReplaceBatches that recorded the file (the writer's, as above)."""
        row = self._writer.execute("SELECT extents FROM file_replacements WHERE file_id = ?", (file_id,)).fetchone()
        return None if row is None else bytes(row[0])

    def read_transaction(self) -> contextlib.AbstractContextManager[apsw.Connection]:
        """A read transaction: every query inside sees the same committed state."""
        return read_transaction(self.reader)

    def detached_read(self, one_snapshot: bool = True) -> DetachedRead:
        """A read transaction on a connection and thread of its own, which may stay open across awaits (with
        `one_snapshot=False`: reads on that thread, each a transaction of its own).

        The store closes it when it closes (its next read then raises DetachedReadClosed).
        """
        detached = DetachedRead(self.path, self._detached_reads.discard, self.checksums, one_snapshot)
        self._detached_reads.add(detached)
        return detached

    # ------------------------------------------------------------------ the only writer

    def apply(self, frames: Sequence[AppliedFrame]) -> None:
        """Applies frames (in log order, following the applied offset) in one transaction."""
        if not frames:
            return
        check_invariant(
            frames[0][0] > self.applied_offset,
            f"apply of a frame ending at {frames[0][0]} at applied offset {self.applied_offset}",
        )
        meta = dict(self.meta)
        try:
            with self._writer:
                transaction = StateTransaction(
                    self._writer, self.coordinator_id, meta, self.producer_windows, self.time_tails
                )
                previous_end = self.applied_offset
                for end_offset, records in frames:
                    check_invariant(
                        end_offset > previous_end, f"frames out of order: {end_offset} after {previous_end}"
                    )
                    previous_end = end_offset
                    for record in records:
                        kinds.apply(transaction, record)
                transaction.finish()
                meta["applied_offset"] = previous_end
                self._writer.executemany(
                    "UPDATE meta SET value = ? WHERE name = ?",
                    [(value, name) for name, value in meta.items() if self.meta.get(name) != value],
                )
        except BaseException:
            self.time_tails.clear()  # changed in place by the transaction rolled back: read again when needed
            self.meta = dict(self._writer.execute("SELECT name, value FROM meta"))
            raise
        self.meta = meta
        self._follow_producer_windows(transaction)
        if self._checkpoints is not None:
            self._checkpoints.written()
