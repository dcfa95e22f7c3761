"""One coordinator's SQLite file: opening it, loading the view, and `apply`, its only writer.

`apply` runs every record of a group in one transaction that also stores the
applied log offset (DESIGN §3 step 5), so the state always equals
apply(log[0 .. applied offset]) (invariant I1). Reads for FindBatches and
friends go through a separate connection (WAL mode) and see committed state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from coordinator.invariants import InvariantViolation, check_invariant
from coordinator.producers import PackedWindow, WindowEntry, advance_packed_window, decode_window
from coordinator.records import BATCH_LAYOUT
from coordinator.state import reads
from coordinator.state.schema import META_DEFAULTS, MIGRATIONS, SCHEMA_VERSION, STATEMENTS
from coordinator.view import CoordinatorView, FileFacts, PartitionView
from protos import records_pb2 as rec

WRITER_CACHE_BYTES_DEFAULT = 64 * 1024 * 1024  # diskless.coordinator.state.cache.bytes
BATCH_ID_SPACE = 2**40  # batch ids are unique across coordinators: coordinator id in the high bits

AppliedFrame = tuple[int, Sequence[rec.MetadataRecord]]  # (end offset of the frame, its records)


class StateCorrupt(Exception):
    """The SQLite file cannot be read as this coordinator's state."""


def _connect(path: Path, *, readonly: bool) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    connection = apsw.Connection(str(path), flags=flags)
    connection.set_busy_timeout(5000)
    return connection


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


class StateStore:
    def __init__(self, path: Path, coordinator_id: int, cache_bytes: int = WRITER_CACHE_BYTES_DEFAULT) -> None:
        self.path = path
        self.coordinator_id = coordinator_id
        problem = truncation_problem(path)
        if problem is not None:
            raise StateCorrupt(problem)
        try:
            self._writer = _connect(path, readonly=False)
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
            self.meta = dict(self._writer.execute("SELECT name, value FROM meta"))
        except apsw.Error as error:
            raise StateCorrupt(f"{path}: {error}") from error
        if self.meta["schema_version"] != SCHEMA_VERSION or self.meta["coordinator_id"] != coordinator_id:
            raise StateCorrupt(
                f"{path}: schema {self.meta['schema_version']} of coordinator {self.meta['coordinator_id']}, "
                f"expected schema {SCHEMA_VERSION} of coordinator {coordinator_id}"
            )
        self.reader = _connect(path, readonly=True)
        # The committed producer windows, packed as stored, kept in memory so apply never reads them back.
        self.producer_windows = self._read_producer_windows()

    def _migrate(self) -> None:
        """Brings a state file of an older schema to this one, in the open transaction."""
        (version,) = self._writer.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        while version in MIGRATIONS:
            for statement in MIGRATIONS[version]:
                self._writer.execute(statement)
            (version,) = self._writer.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()

    def _read_producer_windows(self) -> dict[int, dict[int, PackedWindow]]:
        windows: dict[int, dict[int, PackedWindow]] = {}
        for key, producer_id, epoch, window in self._writer.execute(
            "SELECT partition_key, producer_id, producer_epoch, window FROM producers"
        ):
            windows.setdefault(key, {})[producer_id] = (epoch, window)
        return windows

    @property
    def applied_offset(self) -> int:
        return int(self.meta["applied_offset"])

    def close(self) -> None:
        self.reader.close()
        self._writer.close()

    # ------------------------------------------------------------------ loading

    def load_view(self) -> CoordinatorView:
        """The view of the committed state (nothing pending)."""
        view = CoordinatorView(
            self.coordinator_id,
            self.committed_file,
            next_partition_key=self.meta["next_partition_key"],
            next_batch_id=self.meta["next_batch_id"],
            next_file_id=self.meta["next_file_id"],
            leader_epoch=self.meta["leader_epoch"],
        )
        for row in self._writer.execute(
            "SELECT partition_key, topic_id, topic_name, partition, log_start_offset, high_watermark FROM partitions"
        ):
            view.load_partition(PartitionView(*row))
        for key, windows in self.producer_windows.items():
            for producer_id, (epoch, packed) in windows.items():
                view.load_producer(key, producer_id, decode_window(epoch, packed))
        return view

    def committed_file(self, object_key: str) -> FileFacts | None:
        """The committed file with this key (on the writer's connection: checks and apply share the loop)."""
        return reads.file_facts(self._writer, object_key)

    @contextlib.contextmanager
    def read_snapshot(self) -> Iterator[apsw.Connection]:
        """A read transaction: every query inside sees the same committed state."""
        self.reader.execute("BEGIN")
        try:
            yield self.reader
        finally:
            try:
                self.reader.execute("COMMIT")
            except apsw.Error:
                # A read that met damage leaves its statement failed, and COMMIT reports that failure again;
                # the reader already said so. A read transaction has nothing to lose: end it either way.
                if self.reader.in_transaction:
                    with contextlib.suppress(apsw.Error):
                        self.reader.execute("ROLLBACK")

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
                applier = _Applier(self._writer, self.coordinator_id, meta, self.producer_windows)
                previous_end = self.applied_offset
                for end_offset, records in frames:
                    check_invariant(
                        end_offset > previous_end, f"frames out of order: {end_offset} after {previous_end}"
                    )
                    previous_end = end_offset
                    for record in records:
                        applier.apply(record)
                applier.finish()
                meta["applied_offset"] = previous_end
                self._writer.executemany(
                    "UPDATE meta SET value = ? WHERE name = ?",
                    [(value, name) for name, value in meta.items() if self.meta.get(name) != value],
                )
        except BaseException:
            self.meta = dict(self._writer.execute("SELECT name, value FROM meta"))
            raise
        self.meta = meta
        for key in applier.deleted_partition_keys:
            self.producer_windows.pop(key, None)
        for (key, producer_id), window in applier.changed_windows.items():
            self.producer_windows.setdefault(key, {})[producer_id] = window


class _Applier:
    """Applies records inside one open transaction; producer windows are written at finish."""

    def __init__(
        self,
        connection: apsw.Connection,
        coordinator_id: int,
        meta: dict[str, Any],
        committed_windows: dict[int, dict[int, PackedWindow]],
    ) -> None:
        self._db = connection
        self._coordinator_id = coordinator_id
        self._meta = meta
        self._committed_windows = committed_windows
        self.changed_windows: dict[tuple[int, int], PackedWindow] = {}
        # partition key -> (high watermark in SQLite, after this transaction's batches so far): written once
        # per partition per transaction, not once per record, and checked against SQLite when written.
        self._high_watermarks: dict[int, tuple[int, int]] = {}
        self.deleted_partition_keys: set[int] = set()

    def apply(self, record: rec.MetadataRecord) -> None:
        kind = record.WhichOneof("record")
        if kind == "file_committed":
            self._file_committed(record.file_committed)
        elif kind == "records_deleted":
            self._records_deleted(record.records_deleted)
        elif kind == "partition_created":
            self._partition_created(record.partition_created)
        elif kind == "topic_deleted":
            self._topic_deleted(record.topic_deleted)
        elif kind == "file_ownership_taken":
            self._file_ownership_taken(record.file_ownership_taken)
        elif kind == "file_handed_over":
            self._file_leaves(record.file_handed_over.file_id, "handed over")
        elif kind == "file_deletion_scheduled":
            scheduled = record.file_deletion_scheduled
            self._update_one_file(
                "UPDATE files SET delete_after_ms = ? WHERE file_id = ? AND live_batches = 0 AND owned = 1 "
                "AND is_last_owner = 1",
                (scheduled.delete_after_ms, scheduled.file_id),
                f"deletion of file {scheduled.file_id} scheduled, but it is not an idle file owned last here",
            )
        elif kind == "file_deleted":
            self._file_leaves(record.file_deleted.file_id, "deleted")
        elif kind == "leader_change":
            check_invariant(
                record.leader_change.leader_epoch > self._meta["leader_epoch"],
                f"leader epoch goes from {self._meta['leader_epoch']} to {record.leader_change.leader_epoch}",
            )
            self._meta["leader_epoch"] = record.leader_change.leader_epoch
        else:
            raise AssertionError(f"unknown metadata record {kind!r}")

    def _write_high_watermarks(self) -> None:
        if not self._high_watermarks:
            return
        changes_before = self._db.total_changes()
        self._db.executemany(
            "UPDATE partitions SET high_watermark = ? WHERE partition_key = ? AND high_watermark = ?",
            [(after, key, before) for key, (before, after) in self._high_watermarks.items()],
        )
        check_invariant(
            self._db.total_changes() - changes_before == len(self._high_watermarks),
            f"committed offsets do not continue the partitions' high watermarks {self._high_watermarks}",
        )
        self._high_watermarks = {}

    def finish(self) -> None:
        self._write_high_watermarks()
        for key in self.deleted_partition_keys:
            self.changed_windows = {k: w for k, w in self.changed_windows.items() if k[0] != key}
        if self.changed_windows:
            self._db.executemany(
                "INSERT OR REPLACE INTO producers (partition_key, producer_id, producer_epoch, window) "
                "VALUES (?,?,?,?)",
                [(key, producer, epoch, packed) for (key, producer), (epoch, packed) in self.changed_windows.items()],
            )

    def _file_committed(self, committed: rec.FileCommitted) -> None:
        meta = self._meta
        file_id = committed.file_id
        check_invariant(file_id == meta["next_file_id"], f"file id {file_id} != {meta['next_file_id']}")
        meta["next_file_id"] = file_id + 1
        append_time = committed.append_time_ms
        owners = list(committed.owner_ids)
        batches = list(BATCH_LAYOUT.iter_unpack(committed.packed_batches))
        self._db.execute(
            "INSERT INTO files (file_id, object_key, file_size, uploader_broker_id, owner_ids, committed_at_ms, "
            "live_batches, is_last_owner, owned, delete_after_ms) VALUES (?,?,?,?,?,?,?,?,?,-1)",
            (
                file_id,
                committed.object_key,
                committed.file_size,
                committed.uploader_broker_id,
                ",".join(map(str, owners)),
                append_time,
                len(batches),
                int(owners[-1] == self._coordinator_id),
                int(owners[0] == self._coordinator_id),  # the first owner owns a file from its commit
            ),
        )
        if not batches:
            return
        high_watermarks = self._high_watermarks
        changed_windows = self.changed_windows
        committed_windows = self._committed_windows
        next_batch_id = meta["next_batch_id"]
        # Fields unpacked into locals, the invariant checked inline: this loop runs once per batch.
        for (batch_id, key, _, _, base_offset, last_offset, _, producer_id, producer_epoch, base_sequence,
             last_sequence, _, timestamp_type) in batches:  # fmt: skip
            before, after = high_watermarks.get(key, (base_offset, base_offset))
            if batch_id != next_batch_id or base_offset != after or last_offset < base_offset:
                raise InvariantViolation(
                    f"batch {batch_id} (expected id {next_batch_id}) at {base_offset}..{last_offset} does not "
                    f"follow {after} in partition {key}"
                )
            next_batch_id += 1
            high_watermarks[key] = (before, last_offset + 1)
            if producer_id >= 0:
                window_key = (key, producer_id)
                window = changed_windows.get(window_key)
                if window is None:
                    window = committed_windows.get(key, {}).get(producer_id)
                changed_windows[window_key] = advance_packed_window(
                    window,
                    producer_epoch,
                    WindowEntry(base_sequence, last_sequence, base_offset, append_time, timestamp_type),
                )
        meta["next_batch_id"] = next_batch_id
        meta["live_batch_count"] += len(batches)
        tail = (file_id, append_time)
        self._db.executemany("INSERT INTO batches VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [b + tail for b in batches])

    def _file_ownership_taken(self, taken: rec.FileOwnershipTaken) -> None:
        if not taken.new_file:
            self._update_one_file(
                "UPDATE files SET owned = 1 WHERE file_id = ? AND object_key = ?",
                (taken.file_id, taken.object_key),
                f"ownership of file {taken.file_id} ({taken.object_key!r}) taken, but it is not here",
            )
            return
        meta = self._meta
        check_invariant(taken.file_id == meta["next_file_id"], f"file id {taken.file_id} != {meta['next_file_id']}")
        meta["next_file_id"] = taken.file_id + 1
        owners = list(taken.owner_ids)
        self._db.execute(
            "INSERT INTO files (file_id, object_key, file_size, uploader_broker_id, owner_ids, committed_at_ms, "
            "live_batches, is_last_owner, owned, delete_after_ms) VALUES (?,?,?,?,?,?,0,?,1,-1)",
            (
                taken.file_id,
                taken.object_key,
                taken.file_size,
                taken.uploader_broker_id,
                ",".join(map(str, owners)),
                taken.committed_at_ms,
                int(owners[-1] == self._coordinator_id),
            ),
        )

    def _file_leaves(self, file_id: int, how: str) -> None:
        """A file this coordinator owns with no live batch leaves the state (handed over or deleted)."""
        self._update_one_file(
            "DELETE FROM files WHERE file_id = ? AND live_batches = 0 AND owned = 1",
            (file_id,),
            f"file {file_id} {how}, but it is not an idle file owned here",
        )

    def _update_one_file(self, statement: str, bindings: tuple[Any, ...], problem: str) -> None:
        changes_before = self._db.total_changes()
        self._db.execute(statement, bindings)
        check_invariant(self._db.total_changes() - changes_before == 1, problem)

    def _remove_batches_below(self, partition_key: int, offset: int | None) -> None:
        """Removes whole batches of a partition with last offset below `offset` (all when None)."""
        bound = 2**63 - 1 if offset is None else offset
        per_file = list(
            self._db.execute(
                "SELECT file_id, count(*) FROM batches WHERE partition_key = ? AND last_offset < ? GROUP BY file_id",
                (partition_key, bound),
            )
        )
        if not per_file:
            return
        self._db.executemany(
            "UPDATE files SET live_batches = live_batches - ? WHERE file_id = ?", [(n, f) for f, n in per_file]
        )
        self._db.execute("DELETE FROM batches WHERE partition_key = ? AND last_offset < ?", (partition_key, bound))
        self._meta["live_batch_count"] -= sum(n for _, n in per_file)

    def _records_deleted(self, deleted: rec.RecordsDeleted) -> None:
        self._write_high_watermarks()  # the log start is checked against the high watermark
        changes_before = self._db.total_changes()
        self._db.execute(
            "UPDATE partitions SET log_start_offset = ?1 WHERE partition_key = ?2 AND log_start_offset < ?1 "
            "AND high_watermark >= ?1",
            (deleted.log_start_offset, deleted.partition_key),
        )
        check_invariant(
            self._db.total_changes() - changes_before == 1,
            f"log start {deleted.log_start_offset} of partition {deleted.partition_key} goes back or past the end",
        )
        self._remove_batches_below(deleted.partition_key, deleted.log_start_offset)

    def _partition_created(self, created: rec.PartitionCreated) -> None:
        check_invariant(
            created.partition_key == self._meta["next_partition_key"],
            f"partition key {created.partition_key} != {self._meta['next_partition_key']}",
        )
        self._meta["next_partition_key"] = created.partition_key + 1
        self._db.execute(
            "INSERT INTO partitions (partition_key, topic_id, topic_name, partition, log_start_offset, high_watermark) "
            "VALUES (?,?,?,?,0,0)",
            (created.partition_key, created.topic_id, created.topic_name, created.partition),
        )

    def _topic_deleted(self, deleted: rec.TopicDeleted) -> None:
        self._write_high_watermarks()  # before the partitions' rows go
        keys = [
            key
            for (key,) in self._db.execute(
                "SELECT partition_key FROM partitions WHERE topic_id = ?", (deleted.topic_id,)
            )
        ]
        for key in keys:
            self._remove_batches_below(key, None)
            self._db.execute("DELETE FROM producers WHERE partition_key = ?", (key,))
            self._db.execute("DELETE FROM partitions WHERE partition_key = ?", (key,))
        self.deleted_partition_keys.update(keys)
