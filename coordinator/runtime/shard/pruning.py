"""Pruning: keep the newest K snapshots and the log from the oldest of them on (DESIGN §6).

Segments wholly below the oldest kept snapshot's end offset are deleted
first, oldest first (each deletion fsyncs the directory, so a crash leaves
a contiguous log suffix); snapshots older than the kept ones go last. At
every step each kept snapshot plus the log still rebuilds the state: the log
is cut only below the oldest kept snapshot, and the newest snapshot (just
written, its checksum taken of the bytes on disk) is always among the kept ones.

The two halves run on different threads in a node: `prune_log` on the log's
writer thread (the log is not thread-safe), `delete_snapshots` on the
snapshot thread, since freeing a state-sized file takes tens of milliseconds
that the writer thread would otherwise not spend on appends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.runtime.log.segments import MetadataLog
from snapshot import fault_points
from snapshot.snapshots import SnapshotId, delete_snapshot, list_snapshots


@dataclass(frozen=True, slots=True)
class PruneResult:
    kept: list[SnapshotId]
    deleted_snapshots: list[SnapshotId]  # older than the kept ones: for `delete_snapshots`, or deleted by `prune`
    deleted_segments: list[int]  # base offsets
    log_start_offset: int


def prune_log(directory: Path, metadata_log: MetadataLog, retained_count: int) -> PruneResult:
    """Deletes the segments below the oldest kept snapshot; runs on the log's writer thread."""
    snapshots = list_snapshots(directory)
    kept, older = snapshots[:retained_count], snapshots[retained_count:]
    if not kept:
        return PruneResult([], [], [], metadata_log.position().start_offset)
    oldest_kept_end = kept[-1].snapshot_id.end_offset
    deleted_segments = metadata_log.delete_segments_below(oldest_kept_end, lambda: fault_points.reach("prune.midway"))
    return PruneResult(
        [m.snapshot_id for m in kept],
        [m.snapshot_id for m in older],
        deleted_segments,
        metadata_log.position().start_offset,
    )


def delete_snapshots(directory: Path, snapshot_ids: list[SnapshotId]) -> None:
    """Deletes the snapshots `prune_log` found older than the kept ones (after it: the log no longer needs them)."""
    doomed = set(snapshot_ids)
    for manifest in list_snapshots(directory):
        if manifest.snapshot_id in doomed:
            delete_snapshot(manifest)


def prune(directory: Path, metadata_log: MetadataLog, retained_count: int) -> PruneResult:
    """Both halves on the calling thread (an offline command; a node splits them, see above)."""
    result = prune_log(directory, metadata_log, retained_count)
    delete_snapshots(directory, result.deleted_snapshots)
    return result
