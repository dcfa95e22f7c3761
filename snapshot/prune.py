"""Pruning: keep the newest K snapshots and the log from the oldest of them on (DESIGN §6).

Segments wholly below the oldest kept snapshot's end offset are deleted
first, oldest first (each deletion fsyncs the directory, so a crash leaves
a contiguous log suffix); snapshots older than the kept ones go last. At
every step each kept snapshot plus the log still rebuilds the state: the log
is cut only below the oldest kept snapshot, and the newest snapshot (just
written, its checksum read back from disk) is always among the kept ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.log.segments import MetadataLog
from snapshot.files import crash_point
from snapshot.snapshots import SnapshotId, delete_snapshot, list_snapshots


@dataclass(frozen=True, slots=True)
class PruneResult:
    kept: list[SnapshotId]
    deleted_snapshots: list[SnapshotId]
    deleted_segments: list[int]  # base offsets
    log_start_offset: int


def prune(directory: Path, metadata_log: MetadataLog, retained_count: int) -> PruneResult:
    """Runs on the log's writer thread (the log is not thread-safe)."""
    snapshots = list_snapshots(directory)
    kept, older = snapshots[:retained_count], snapshots[retained_count:]
    if not kept:
        return PruneResult([], [], [], metadata_log.position().start_offset)
    oldest_kept_end = kept[-1].snapshot_id.end_offset
    deleted_segments = metadata_log.delete_segments_below(oldest_kept_end, lambda: crash_point("prune.midway"))
    for manifest in older:
        delete_snapshot(manifest)
    return PruneResult(
        [m.snapshot_id for m in kept],
        [m.snapshot_id for m in older],
        deleted_segments,
        metadata_log.position().start_offset,
    )
