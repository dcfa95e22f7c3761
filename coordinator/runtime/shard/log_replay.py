"""Replaying a metadata log into SQLite, and the logical dump that invariant I1 compares."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import apsw

from coordinator.machine import records
from coordinator.machine.state.schema import STATEMENTS
from coordinator.machine.state.store import AppliedFrame, StateStore
from coordinator.runtime.log.segments import MetadataLog
from snapshot import page_checksums

# Every table of the schema, read from its statements: a new table is compared without a second list to keep.
DUMPED_TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", "\n".join(STATEMENTS)))
REPLAY_CHUNK_DEFAULT = 2000


def replay_log(
    store: StateStore,
    metadata_log: MetadataLog,
    chunk_frames: int = REPLAY_CHUNK_DEFAULT,
    end_offset: int | None = None,
) -> int:
    """Applies every frame after the store's applied offset (up to `end_offset`), `chunk_frames` per transaction.

    Returns the number of frames applied.
    """
    replayed = 0
    chunk: list[AppliedFrame] = []
    for frame in metadata_log.read(store.applied_offset):
        if end_offset is not None and frame.end_offset > end_offset:
            break
        chunk.append((frame.end_offset, records.decode_batch(frame.payload)))
        if len(chunk) >= chunk_frames:
            store.apply(chunk)
            replayed += len(chunk)
            chunk = []
    store.apply(chunk)
    return replayed + len(chunk)


def rebuild_from_log(coordinator_dir: Path, coordinator_id: int, target: Path, end_offset: int | None = None) -> None:
    """Builds a fresh SQLite state at `target` from the coordinator's whole log, or its first `end_offset` records.

    The server is stopped (or the log is a copy).
    """
    if target.exists():
        raise FileExistsError(target)
    metadata_log = MetadataLog(coordinator_dir / "log", segment_bytes=2**62)
    store = StateStore(target, coordinator_id)
    try:
        replay_log(store, metadata_log, end_offset=end_offset)
    finally:
        store.close()
        metadata_log.close()


def logical_dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every state table, sorted: two states are equal when their dumps are."""
    connection = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY)
    try:
        return {
            table: sorted(tuple(row) for row in connection.execute(f"SELECT * FROM {table}")) for table in DUMPED_TABLES
        }
    finally:
        connection.close()
