"""Loading a coordinator (DESIGN §6): open the log, open or restore the state, replay, verify, new leader epoch.

Alone, a node's whole log is committed: it is replayed into SQLite and each
load starts a new leader epoch. In a cluster (DESIGN §6a) only the records
below the high watermark may be applied, and SQLite's applied offset is the
high watermark this replica knew: the log after it is replayed into the view
only (a leader) and applied once the high watermark passes it; a leader
starts the epoch etcd gave it, a follower starts none.

The one place that chooses the concrete metadata log and state (`MetadataLog`,
`StateStore`); the pipeline sees them only through `coordinator.runtime.ports`,
so a replicated log can be substituted here.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import final

import apsw

from coordinator.base.invariants import InvariantViolation, check_invariant
from coordinator.config.settings import Settings
from coordinator.machine import kinds, records
from coordinator.machine.state.reads import StateDamaged
from coordinator.machine.state.store import StateCorrupt, StateStore
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.log.epoch_cache import LeaderEpochCache
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segments import CorruptLogError, LogPosition, MetadataLog
from coordinator.runtime.ports import AppliedFrame
from coordinator.runtime.replication.role import ReplicaRole, RoleKind
from coordinator.runtime.shard.log_replay import replay_log
from coordinator.runtime.shard.state_opening import LoadFailed, StatePlace, open_state, replace_state
from snapshot.page_checksums import is_checksum_damage
from snapshot.snapshots import remove_incomplete, snapshot_directory, upgrade_manifests

log = logging.getLogger(__name__)

# Failures that loading again cannot cure: the coordinator stays out of service until an operator acts.
NEEDS_OPERATOR = (LoadFailed, CorruptLogError)
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# SQLite reports some writes on a full disk as a plain I/O error, not SQLITE_FULL: growing the WAL index
# (-shm, SQLITE_IOERR_SHMSIZE) or a write through a memory map. With less than this free beside it, an I/O
# error is taken for what it almost surely is: the disk full (the operator's cure is space, not hardware).
DISK_NEARLY_FULL_BYTES = 1024 * 1024


class NotThisClustersLog(LoadFailed):
    """The log holds a later leader epoch than etcd gave: a data directory of another cluster (the operator's)."""


def is_state_damage(error: BaseException) -> bool:
    """The state file itself is damaged (a corrupt page, a page or WAL frame failing its checksum, rows that
    break an invariant): the next load sets it aside and rebuilds it."""
    if is_checksum_damage(error):
        return True
    # SQLite ends a transaction by itself on some errors: leaving `with connection:` then fails its ROLLBACK.
    for seen in (error, error.__context__):
        if isinstance(seen, apsw.CorruptError | apsw.NotADBError | StateDamaged):
            return True
    return False


def damage_behind(error: BaseException) -> BaseException:
    """What to say of a failure: the damage behind a failed ROLLBACK (SQLite ended the transaction itself on
    meeting it, so leaving `with connection:` raised "cannot rollback" instead), else the failure itself."""
    context = error.__context__
    if isinstance(error, apsw.SQLError) and context is not None and is_state_damage(context):
        return damage_behind(context)
    return error


def free_bytes(directory: Path) -> int | None:
    """The bytes an unprivileged writer may still use on the directory's file system; None if unknown."""
    try:
        found = os.statvfs(directory)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def failure_kind(error: BaseException, free: int | None = None) -> str:
    """A short name for why a coordinator went out of service (a metric label); `free`: the bytes left on the
    coordinator's file system when it failed (None: unknown)."""
    if isinstance(error, CorruptLogError):
        return "log_damaged"
    if isinstance(error, LoadFailed):
        return "needs_operator"
    if isinstance(error, apsw.FullError) or (isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS):
        return "disk_full"
    io_error = isinstance(error, OSError | apsw.IOError) and not is_state_damage(error)
    if io_error and free is not None and free < DISK_NEARLY_FULL_BYTES:
        return "disk_full"
    if isinstance(error, StateCorrupt) or is_state_damage(error):
        return "state_damaged"
    if isinstance(error, OSError | apsw.IOError | apsw.CantOpenError | apsw.ReadOnlyError):
        return "io_error"
    if isinstance(error, InvariantViolation):
        return "invariant"
    return "error"


@final
@dataclass(frozen=True, slots=True)
class LoadPlan:
    """How one load opens a coordinator's files."""

    coordinator_id: int
    directory: Path
    settings: Settings
    verify_state: bool  # run SQLite's integrity check before trusting the state
    rebuild_state_reason: str  # non-empty: set the state aside and rebuild it, for this reason
    role: ReplicaRole | None = None  # in a cluster: leader or follower in etcd's epoch; None: alone


@final
@dataclass(frozen=True, slots=True)
class Loaded:
    """A coordinator's open log and state, with the view at the log end after this load's leader change."""

    metadata_log: MetadataLog
    store: StateStore
    view: CoordinatorView
    position: LogPosition  # the log as found, before this load's leader change
    end_offset: int  # the log end after it
    replayed: int  # log batches replayed into the state
    flush_count_at_load: int
    epoch_cache: LeaderEpochCache
    # In a cluster: the log's records after the applied offset, the leader's epoch start included; they are
    # applied once the high watermark passes them (a leader has replayed them into the view already).
    unapplied: list[AppliedFrame]
    repairs: tuple[str, ...] = ()  # what this load repaired (diskless_coordinator_repairs_total's repair label)


def open_coordinator(plan: LoadPlan) -> Loaded:
    """Opens log and state, replays, starts a leader epoch; on failure leaves nothing open (blocking)."""
    settings = plan.settings
    metadata_log = MetadataLog(plan.directory / "log", settings.log_segment_bytes)
    place = StatePlace(
        plan.coordinator_id,
        plan.directory,
        settings.state_cache_bytes,
        settings.state_checkpoint_pages,
        settings.state_verify_on_load != "never",
        settings.state_page_checksums,
    )
    store: StateStore | None = None
    try:
        position = metadata_log.position()
        for leftover in remove_incomplete(snapshot_directory(plan.directory)):
            log.warning("coordinator %d: removed %s, left by an interrupted snapshot", plan.coordinator_id, leftover)
        upgrade_manifests(snapshot_directory(plan.directory))
        store = open_state(place, position, plan.verify_state, plan.rebuild_state_reason)
        try:
            replayed = _replay(plan, store, metadata_log, position)
            view = store.load_view()
        except apsw.Error as error:  # SQLite finds damage only when a read touches it
            if not is_state_damage(error):
                raise
            store.close()
            store = None
            store = replace_state(place, f"{place.path}: {damage_behind(error)}", position)
            replayed = _replay(plan, store, metadata_log, position)
            view = store.load_view()
        epoch_cache = LeaderEpochCache.open(plan.directory, metadata_log)
        unapplied: list[AppliedFrame] = []
        if plan.role is None:
            end = _start_leader_epoch(settings, metadata_log, store, view, position, epoch_cache)
        else:
            unapplied = _unapplied_tail(store, metadata_log)
            end = metadata_log.end_offset
            if plan.role.kind is RoleKind.LEADER:
                for frame_end, batch in unapplied:
                    for record in batch:
                        kinds.replay(view, record, frame_end)
                end = _start_cluster_epoch(plan, metadata_log, view, epoch_cache, unapplied)
    except BaseException:
        metadata_log.close()
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        raise
    repairs = (*store.repairs, *(("epoch_checkpoint",) if epoch_cache.rebuilt else ()))
    return Loaded(
        metadata_log, store, view, position, end, replayed, metadata_log.flush_count, epoch_cache, unapplied, repairs
    )


def _replay(plan: LoadPlan, store: StateStore, metadata_log: MetadataLog, position: LogPosition) -> int:
    if store.applied_offset > position.end_offset:
        raise LoadFailed(
            f"coordinator {plan.coordinator_id}: SQLite state is applied to {store.applied_offset}, past the log "
            f"end {position.end_offset}: the log lost acknowledged records; restore it or a snapshot"
        )
    if plan.role is not None:
        return 0  # in a cluster the log after the applied offset may not be committed yet
    return replay_log(store, metadata_log, plan.settings.replay_batch_operations)


def _unapplied_tail(store: StateStore, metadata_log: MetadataLog) -> list[AppliedFrame]:
    return [
        (frame.end_offset, records.decode_batch(frame.payload)) for frame in metadata_log.read(store.applied_offset)
    ]


def _start_cluster_epoch(
    plan: LoadPlan,
    metadata_log: MetadataLog,
    view: CoordinatorView,
    epoch_cache: LeaderEpochCache,
    unapplied: list[AppliedFrame],
) -> int:
    """A new leader appends its epoch's first record (not yet applied: it commits with the tail before it)."""
    assert plan.role is not None
    epoch = plan.role.leader_epoch
    if epoch < metadata_log.position().last_epoch or epoch < view.leader_epoch:
        raise NotThisClustersLog(
            f"coordinator {plan.coordinator_id}: etcd names this node leader in epoch {epoch}, but its log already "
            f"holds epoch {max(metadata_log.position().last_epoch, view.leader_epoch)}: the data directory is not "
            "this cluster's"
        )
    if epoch == metadata_log.position().last_epoch and metadata_log.end_offset > 0:
        return metadata_log.end_offset  # a reload within the same epoch (after a failure): it has begun already
    change = [records.leader_change(epoch, plan.settings.node_id)]
    base = metadata_log.end_offset
    metadata_log.append(encode_frame(base, epoch, 1, records.encode_batch(change)), base + 1, epoch)
    epoch_cache.assign(epoch, base)
    kinds.replay(view, change[0], base + 1)
    unapplied.append((base + 1, change))
    return base + 1


def _start_leader_epoch(
    settings: Settings,
    metadata_log: MetadataLog,
    store: StateStore,
    view: CoordinatorView,
    position: LogPosition,
    epoch_cache: LeaderEpochCache,
) -> int:
    """Appends and applies this node's leader change; returns the log end after it."""
    epoch = max(view.leader_epoch, position.last_epoch) + 1
    change = [records.leader_change(epoch, settings.node_id)]
    end = metadata_log.end_offset + 1
    frame = encode_frame(metadata_log.end_offset, epoch, 1, records.encode_batch(change))
    metadata_log.append(frame, end, epoch)
    epoch_cache.assign(epoch, end - 1)
    store.apply([(end, change)])
    kinds.replay(view, change[0], end)
    check_invariant(store.applied_offset == metadata_log.end_offset, "loaded state must equal the log end")
    return end


def close_loaded(loaded: Loaded, coordinator_id: int) -> bool:
    """Closes log and state (on the coordinator's thread); False if either failed to close."""
    cleanly = True
    for closeable in (loaded.metadata_log, loaded.store):
        try:
            closeable.close()
        except Exception as error:  # closing after a failure may fail the same way: nothing more to do
            cleanly = False
            log.warning("coordinator %d: closing %s failed: %s", coordinator_id, type(closeable).__name__, error)
    return cleanly
