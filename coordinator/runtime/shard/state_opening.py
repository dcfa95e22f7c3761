"""Opening a coordinator's SQLite state: as it is, or set aside and rebuilt (DESIGN §6).

The state is a cache of the log. A missing, damaged or pruned-past state is
set aside (never deleted) and replaced by the newest snapshot that verifies,
passes the structural check and that the log continues; the log tail then
replays. Without such a snapshot the whole log replays if it starts at 0.
Whatever would serve a shortened history (a snapshot past the log end, a
pruned log without a snapshot) refuses instead: that would hand acknowledged
offsets out again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from coordinator.base.invariants import check_invariant
from coordinator.machine.state.integrity import check_integrity
from coordinator.machine.state.store import StateCorrupt, StateStore
from coordinator.runtime.log.segments import LogPosition
from snapshot.snapshots import list_snapshots, restore_newest, snapshot_directory
from snapshot.wal_frames import wal_damage

log = logging.getLogger(__name__)


class LoadFailed(Exception):
    """The coordinator's log and state disagree in a way only an operator can settle."""


@dataclass(frozen=True, slots=True)
class StatePlace:
    """Where a coordinator's state lives and how it is opened."""

    coordinator_id: int
    directory: Path  # the coordinator's directory: state.sqlite, snapshots/
    cache_bytes: int
    checkpoint_pages: int
    check_restored: bool  # a restored snapshot passes PRAGMA integrity_check first
    checksums: bool = True  # pages and WAL frames verified on every read (diskless.coordinator.state.page.checksums)

    @property
    def path(self) -> Path:
        return self.directory / "state.sqlite"

    def open_store(self) -> StateStore:
        return StateStore(self.path, self.coordinator_id, self.cache_bytes, self.checkpoint_pages, self.checksums)


def open_state(place: StatePlace, position: LogPosition, verify: bool, rebuild_reason: str) -> StateStore:
    """SQLite as it is, or rebuilt when missing, damaged (`verify` checks it first), or behind the log start.

    `rebuild_reason`: a read met damage that the check may not see; the state is rebuilt whatever it says.
    """
    path = place.path
    if not path.exists():
        if position.end_offset == 0 and not list_snapshots(snapshot_directory(place.directory)):
            return place.open_store()  # a new coordinator
        return replace_state(place, f"{path} is missing", position)
    if rebuild_reason:
        return replace_state(place, f"a read of {path} met damage ({rebuild_reason})", position)
    wal = path.with_name(path.name + "-wal")
    if place.checksums and wal.exists():  # left by a crash (or by readers still open): checked before SQLite
        problem = wal_damage(wal)  # recovers it, which would drop every frame after a damaged one
        if problem is not None:
            return replace_state(place, problem, position)
    if verify:
        report = check_integrity(path)
        log.info(
            "coordinator %d: checked %s (%d MB) in %.2fs: %s",
            place.coordinator_id, path.name, report.size_bytes // 1_000_000, report.seconds, report.problem or "ok",
        )  # fmt: skip
        if report.problem is not None:
            return replace_state(place, report.problem, position)
    try:
        store = place.open_store()
    except StateCorrupt as error:
        return replace_state(place, str(error), position)
    if store.applied_offset < position.start_offset:
        store.close()
        return replace_state(
            place,
            f"{path} is applied to {store.applied_offset}, below the log start {position.start_offset} "
            "(the log was pruned past it)",
            position,
        )
    return store


def replace_state(place: StatePlace, reason: str, position: LogPosition) -> StateStore:
    """Sets the bad file aside, then restores the newest sound snapshot, else replays the whole log."""
    path, coordinator_id = place.path, place.coordinator_id
    snapshots = snapshot_directory(place.directory)
    ahead = [m.snapshot_id for m in list_snapshots(snapshots) if m.snapshot_id.end_offset > position.end_offset]
    if ahead:
        # A snapshot ends past the log: the log lost records that were applied, so acknowledged. An older
        # snapshot plus this log would serve a shortened history and hand those offsets out again.
        raise LoadFailed(
            f"coordinator {coordinator_id}: {reason}, and snapshot {ahead[0]} ends past the log end "
            f"{position.end_offset}: the log lost acknowledged records; see what is lost and recover with "
            f"`diskless log recover --data-dir DIR --coordinator {coordinator_id}` on the stopped node"
        )
    if path.exists():
        aside = path.with_name(f"state.sqlite.corrupt-{time.time_ns()}")
        path.rename(aside)
        reason = f"{reason}; moved it to {aside.name}"
    for suffix in ("-wal", "-shm"):  # a stale WAL beside a new file would be replayed into it
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    accept = _restored_state_problem if place.check_restored else None
    skipped: list[str] = []
    restored = restore_newest(snapshots, path, position.start_offset, position.end_offset, accept, skipped)
    if restored is not None:
        store = place.open_store()
        store.repairs += ["snapshot_skipped"] * len(skipped) + ["state_from_snapshot"]
        check_invariant(
            (store.applied_offset, store.meta["leader_epoch"])
            == (restored.snapshot_id.end_offset, restored.snapshot_id.epoch),
            f"coordinator {coordinator_id}: snapshot {restored.snapshot_id} restored as applied offset "
            f"{store.applied_offset}, epoch {store.meta['leader_epoch']}",
        )
        log.warning(
            "coordinator %d: %s; restored snapshot %s, replaying the log from %d to %d",
            coordinator_id, reason, restored.snapshot_id, store.applied_offset, position.end_offset,
        )  # fmt: skip
        return store
    if position.start_offset > 0:
        raise LoadFailed(
            f"coordinator {coordinator_id}: {reason}, no snapshot verifies and the log starts at "
            f"{position.start_offset}: the state cannot be rebuilt; restore a snapshot (diskless snapshot restore)"
        )
    # SQLite is a cache of the log: with the whole log at hand, rebuild it by replay.
    log.warning("coordinator %d: %s; no snapshot verifies: rebuilding from the whole log", coordinator_id, reason)
    store = place.open_store()
    store.repairs += ["snapshot_skipped"] * len(skipped) + ["state_from_log"]
    return store


def _restored_state_problem(path: Path) -> str | None:
    return check_integrity(path).problem
