"""Snapshots of one coordinator's SQLite state: taking, listing, verifying, restoring (DESIGN §6).

A snapshot is named as in KRaft (KIP-630) by its end offset (exclusive: the
applied offset the copy holds) and the leader epoch of its last record:
`<coordinator dir>/snapshots/<end offset, 20 digits>-<epoch, 10 digits>.sqlite`
with a manifest `<same>.manifest` (its name and manifest, checksummed: `snapshot/manifests.py`).

The copy uses SQLite's online backup API from a read-only connection that
holds a read transaction for the whole copy: without it the backup restarts
whenever the writer commits and never ends under steady load; with it the
copy is one consistent point (WAL mode lets the writer go on meanwhile).
The id is read inside that transaction, so it names exactly what is copied.
The backup API copies pages as they are, the bytes each reserves with them,
so a copy of a state with page checksums has them too: the source's pages
(and WAL frames) are verified as the copy reads them (a damaged state fails
its snapshot, never passes its damage on under a fresh file CRC), and the
restored copy's pages are verified on every read like any state's
(snapshot/page_checksums.py).

The copy shares a small node with the commit path, so it is kept gentle
(measured on 2 cores with snapshots back to back, bench/recovery.py): it is
flushed one step at a time, so the metadata log's fdatasync never queues
behind more than a step of dirty data; it is paced to a rate bound, so that
on an idle machine it does not burst at the disk's full speed; old
snapshots are freed a few MiB at a time (coordinator/durable_files.py), off the log's
writer thread (coordinator/runtime/shard/pruning.py).

Files appear in this order: the data file's `.part` (written, fsynced), the
manifest's `.part` (fsynced), the data renamed, the manifest renamed, the
directory fsynced. A snapshot exists once its manifest does; start-up deletes
`.part` files and data files without a manifest.
"""

from __future__ import annotations

__all__ = [
    "DATA_SUFFIX", "MANIFEST_SUFFIX", "SnapshotCheck", "SnapshotError", "SnapshotId", "SnapshotManifest",
    "SnapshotMismatch",
    "check_snapshots", "delete_snapshot", "list_snapshots", "remove_incomplete", "restore_newest",
    "restore_snapshot", "snapshot_directory", "snapshots_bytes", "take_snapshot", "upgrade_manifests",
    "verify_snapshot",
]  # fmt: skip

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw

from snapshot import fault_points, page_checksums
from snapshot.durable_files import (
    PART_SUFFIX,
    ChecksumMismatch,
    copy_durably,
    delete_in_chunks,
    file_checksum,
    flush_and_fsync,
    fsync_directory,
    fsync_file,
    part_path,
)
from snapshot.manifests import (
    DATA_SUFFIX,
    MANIFEST_SUFFIX,
    SnapshotError,
    SnapshotId,
    SnapshotManifest,
    data_path,
    manifest_path,
    read_manifest,
    upgrade_manifests,
)

log = logging.getLogger(__name__)

# Rate bound of a snapshot copy, bytes/s (0: none): the default of
# diskless.coordinator.snapshot.copy.max.bytes.per.second, which the node passes. Unbounded on an
# idle machine with a fast disk, the copy writes as fast as the disk takes it and the metadata log's
# fdatasyncs queue behind it; bounded, it leaves gaps between steps. Above what the copy reaches on
# the 2-core bench machine (about 250 MB/s with its checksum), so the target of >= 200 MB/s holds.
COPY_BYTES_PER_SECOND_MAX = 320 * 1024 * 1024


class SnapshotMismatch(AssertionError):
    """A copy that does not hold the position it was taken at: a broken invariant, never a snapshot to keep."""


@dataclass(frozen=True, slots=True)
class SnapshotCheck:
    """A snapshot and whether it verifies (`problem` is None) or why not."""

    manifest: SnapshotManifest
    problem: str | None


def snapshot_directory(coordinator_directory: Path) -> Path:
    return coordinator_directory / "snapshots"


def list_snapshots(directory: Path) -> list[SnapshotManifest]:
    """The snapshots whose manifest reads, newest first (an unreadable manifest is logged and left out)."""
    manifests = []
    for path in directory.glob(f"*{MANIFEST_SUFFIX}") if directory.is_dir() else ():
        try:
            manifests.append(read_manifest(path))
        except SnapshotError as error:
            log.warning("skipping snapshot: %s", error)
    return sorted(manifests, key=lambda m: m.snapshot_id, reverse=True)


def verify_snapshot(manifest: SnapshotManifest) -> str | None:
    """None when the data file has the manifest's size and CRC-32, else what is wrong."""
    try:
        size, crc = file_checksum(manifest.data_path)
    except OSError as error:
        return f"{manifest.data_path}: {error.strerror or error}"
    if size != manifest.size_bytes:
        return f"{manifest.data_path}: {size} bytes, the manifest says {manifest.size_bytes}"
    if crc != manifest.crc32:
        return f"{manifest.data_path}: CRC-32 {crc:08x}, the manifest says {manifest.crc32:08x}"
    return None


def check_snapshots(directory: Path) -> list[SnapshotCheck]:
    return [SnapshotCheck(manifest, verify_snapshot(manifest)) for manifest in list_snapshots(directory)]


def remove_incomplete(directory: Path) -> list[Path]:
    """Deletes what a crash mid-snapshot leaves: `.part` files and data files without a manifest."""
    if not directory.is_dir():
        return []
    removed = []
    for path in directory.iterdir():
        stem = path.name[: -len(DATA_SUFFIX)] if path.name.endswith(DATA_SUFFIX) else None
        orphan = stem is not None and not (directory / f"{stem}{MANIFEST_SUFFIX}").exists()
        if path.name.endswith(PART_SUFFIX) or orphan or path.name.endswith(("-wal", "-shm", "-journal")):
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        fsync_directory(directory)
    return removed


def snapshots_bytes(directory: Path) -> int:
    """Bytes of the snapshots kept: data files and manifests, not a copy under way (a file gone meanwhile counts 0)."""
    total = 0
    for path in directory.iterdir() if directory.is_dir() else ():
        if path.name.endswith((DATA_SUFFIX, MANIFEST_SUFFIX)):
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
    return total


def delete_snapshot(manifest: SnapshotManifest) -> None:
    """Manifest first: the snapshot stops existing in one step; the data file is then an orphan to delete.

    A crash in between may leave the manifest of a shrunk data file: that
    snapshot no longer verifies and is skipped, as one older than the kept
    ones it is never needed, and the next prune deletes it again.
    """
    directory = manifest.data_path.parent
    manifest_path(directory, manifest.snapshot_id).unlink(missing_ok=True)
    delete_in_chunks(manifest.data_path)
    fsync_directory(directory)


# ---------------------------------------------------------------------- taking


def _read_position(connection: apsw.Connection) -> tuple[int, int, int]:
    """(applied offset, leader epoch, coordinator id) from `meta`, inside the caller's transaction."""
    meta = dict(
        connection.execute(
            "SELECT name, value FROM meta WHERE name IN ('applied_offset', 'leader_epoch', 'coordinator_id')"
        )
    )
    return int(meta["applied_offset"]), int(meta["leader_epoch"]), int(meta["coordinator_id"])


def take_snapshot(
    state_path: Path,
    directory: Path,
    copy_step_pages: int,
    now_ms: int,
    copy_bytes_per_second_max: int = COPY_BYTES_PER_SECOND_MAX,
    checksums: bool = True,
) -> SnapshotManifest:
    """Copies the committed state at `state_path` into a new snapshot (runs on a thread of its own).

    Returns the existing snapshot when one with the same id is already there
    (nothing was applied since) and verifies; a damaged one is copied again. Commits go on during the copy.
    """
    directory.mkdir(parents=True, exist_ok=True)
    source = page_checksums.connect(state_path, apsw.SQLITE_OPEN_READONLY, checksums)
    try:
        source.execute("BEGIN")
        try:
            applied_offset, epoch, coordinator_id = _read_position(source)
            snapshot_id = SnapshotId(applied_offset, epoch)
            existing = manifest_path(directory, snapshot_id)
            if existing.exists():
                found = read_manifest(existing)
                if verify_snapshot(found) is None:
                    return found
                log.error("snapshot %s does not verify: taking it again", snapshot_id)  # a fresh copy replaces it
            data_part = part_path(data_path(directory, snapshot_id))
            data_part.unlink(missing_ok=True)
            _backup(source, data_part, snapshot_id, copy_step_pages, copy_bytes_per_second_max)
        finally:
            source.execute("COMMIT")
    finally:
        source.close()
    fsync_file(data_part)
    # Of the whole file once written, not step by step: the backup API keeps the target's write transaction
    # open to the end and writes pages as its cache spills them, then the header page last, so bytes read
    # during the copy could still change.
    size, crc = file_checksum(data_part)
    manifest = SnapshotManifest(
        snapshot_id, coordinator_id, size, crc, applied_offset, now_ms, data_path(directory, snapshot_id)
    )
    _publish(manifest, data_part)
    return manifest


def _publish(manifest: SnapshotManifest, data_part: Path) -> None:
    """Writes the manifest beside the fsynced data `.part`, then renames both into place."""
    manifest_file = manifest_path(manifest.data_path.parent, manifest.snapshot_id)
    with open(part_path(manifest_file), "wb") as file:
        file.write(manifest.encode())
        flush_and_fsync(file)
    fault_points.reach("snapshot.before_rename")
    os.replace(data_part, manifest.data_path)
    os.replace(part_path(manifest_file), manifest_file)
    fsync_directory(manifest.data_path.parent)
    fault_points.reach("snapshot.after_rename")


def received_part(directory: Path, snapshot_id: SnapshotId) -> Path:
    """Where a snapshot fetched from another replica is written before it is checked and published."""
    directory.mkdir(parents=True, exist_ok=True)
    return part_path(data_path(directory, snapshot_id))


def publish_received(
    directory: Path, snapshot_id: SnapshotId, coordinator_id: int, expected_crc32: int, created_at_ms: int
) -> SnapshotManifest:
    """Checks a fetched snapshot's data (at `received_part`) against the sender's CRC-32 and publishes it.

    Raises SnapshotError (and removes the part) when it does not match: a transfer is never installed damaged.
    """
    data_part = received_part(directory, snapshot_id)
    fsync_file(data_part)
    size, crc = file_checksum(data_part)
    if crc != expected_crc32:
        data_part.unlink(missing_ok=True)
        raise SnapshotError(f"fetched snapshot {snapshot_id}: CRC-32 {crc:08x}, the leader's is {expected_crc32:08x}")
    manifest = SnapshotManifest(
        snapshot_id, coordinator_id, size, crc, snapshot_id.end_offset, created_at_ms,
        data_path(directory, snapshot_id),
    )  # fmt: skip
    _publish(manifest, data_part)
    return manifest


def _pace(started: float, copied_bytes: int, bytes_per_second_max: int) -> None:
    """Sleeps while the copy is ahead of its rate bound: the commit path gets the disk and the CPU meanwhile."""
    if bytes_per_second_max > 0:
        ahead_s = started + copied_bytes / bytes_per_second_max - time.monotonic()
        if ahead_s > 0:
            time.sleep(ahead_s)


def _backup(
    source: apsw.Connection, target: Path, snapshot_id: SnapshotId, copy_step_pages: int, bytes_per_second_max: int
) -> None:
    """The backup API's copy of `source` (inside its read transaction) into a new file `target`."""
    row = source.execute("PRAGMA page_size").fetchone()
    if row is None:
        raise apsw.CorruptError(f"{source.filename}: PRAGMA page_size gave no row")
    (page_size,) = row
    # cksumvfs: the copy's pages keep their checksums (the header page, changed by the copy, gets a new one).
    destination = apsw.Connection(str(target), vfs=page_checksums.vfs_name(False))
    try:
        if page_checksums.reserved_bytes(source) == page_checksums.CHECKSUM_BYTES:
            # cksumvfs computes a page's checksum as it writes it only once its handle has seen a first page
            # reserving 8 bytes. The copy writes the first page last, and pages before it whenever the target's
            # page cache spills (a state of more than about 2 MB): those reached the file without checksums and
            # failed them when read back. A first page with the reserve, written before the copy, avoids that.
            page_checksums.reserve_page_checksums(destination)
            destination.execute("CREATE TABLE reserve_written (x)")
        # The target is a scratch file until renamed: no journal, no syncs (one fsync at the end).
        destination.execute("PRAGMA journal_mode=OFF")
        destination.execute("PRAGMA synchronous=OFF")
        started = time.monotonic()
        first_step = True
        with destination.backup("main", source, "main") as backup:
            while not backup.done:
                backup.step(copy_step_pages)
                # Flushed step by step: one large fsync at the end would queue the metadata log's small
                # fdatasyncs (the commit path) behind tens of megabytes. The backup keeps the target's write
                # transaction open until the end, so a step's pages reach the file as SQLite's page cache
                # spills them: what is flushed is at most a step plus that cache.
                fsync_file(target, data_only=True)
                if first_step and not backup.done:
                    fault_points.reach("snapshot.copy")
                first_step = False
                _pace(started, (backup.page_count - backup.remaining) * page_size, bytes_per_second_max)
        # A self-contained file: rollback-journal mode, so reading it never makes -wal/-shm files.
        destination.execute("PRAGMA journal_mode=DELETE")
        copied_offset, copied_epoch, _ = _read_position(destination)
        if (copied_offset, copied_epoch) != (snapshot_id.end_offset, snapshot_id.epoch):
            raise SnapshotMismatch(
                f"snapshot {snapshot_id} holds applied offset {copied_offset} and epoch {copied_epoch}"
            )
    finally:
        destination.close()


# ---------------------------------------------------------------------- restoring


def restore_snapshot(manifest: SnapshotManifest, state_path: Path) -> None:
    """Replaces the SQLite file at `state_path` with the snapshot (verified as it is copied).

    The old file and its -wal/-shm go first: a stale WAL next to the restored
    file would be replayed into it. A crash in between leaves no state file,
    which the next start restores again.
    """
    part = part_path(state_path)
    try:
        copy_durably(manifest.data_path, part, (manifest.size_bytes, manifest.crc32))
    except FileNotFoundError as error:
        raise ChecksumMismatch(f"{manifest.data_path}: missing") from error
    state_path.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm", "-journal"):
        state_path.with_name(state_path.name + suffix).unlink(missing_ok=True)
    os.replace(part, state_path)
    fsync_directory(state_path.parent)


def restore_newest(
    directory: Path,
    state_path: Path,
    log_start: int,
    log_end: int,
    accept: Callable[[Path], str | None] | None = None,
    skipped: list[str] | None = None,
) -> SnapshotManifest | None:
    """Restores the newest snapshot that verifies and that the log continues (log start <= end <= log end).

    `accept` checks the restored file further (the structural check of the state: the backup API copies
    pages as they are, so a snapshot of a damaged state verifies its checksum and is still damaged); a
    snapshot it refuses is skipped for an older one. `skipped` gets the id of each snapshot passed over as damaged.
    """
    manifests = list_snapshots(directory)
    if skipped is not None and directory.is_dir():  # list_snapshots left each unreadable manifest out
        skipped += ["an unreadable manifest"] * (len(list(directory.glob(f"*{MANIFEST_SUFFIX}"))) - len(manifests))
    for manifest in manifests:
        end = manifest.snapshot_id.end_offset
        if not log_start <= end <= log_end:
            log.warning(
                "snapshot %s does not fit the log %d..%d; trying an older one", manifest.snapshot_id, log_start, log_end
            )
            continue
        try:
            restore_snapshot(manifest, state_path)
        except ChecksumMismatch as error:
            log.error("snapshot %s does not verify (%s); trying an older one", manifest.snapshot_id, error)
            if skipped is not None:
                skipped.append(str(manifest.snapshot_id))
            continue
        problem = accept(state_path) if accept is not None else None
        if problem is not None:
            log.error("snapshot %s is damaged (%s); trying an older one", manifest.snapshot_id, problem)
            state_path.unlink()
            if skipped is not None:
                skipped.append(str(manifest.snapshot_id))
            continue
        return manifest
    return None
