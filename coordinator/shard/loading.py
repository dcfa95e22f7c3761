"""Loading a coordinator (DESIGN §6): open the log, open or restore the state, replay, verify, new leader epoch.

The one place that chooses the concrete metadata log and state (`MetadataLog`,
`StateStore`); the pipeline sees them only through `coordinator.shard.ports`,
so a replicated log can be substituted here.
"""

from __future__ import annotations

import contextlib
import errno
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import final

import apsw

from coordinator import interpreter, records
from coordinator.invariants import InvariantViolation, check_invariant
from coordinator.log.frame import encode_frame
from coordinator.log.segments import CorruptLogError, LogPosition, MetadataLog
from coordinator.settings import Settings
from coordinator.state.opening import LoadFailed, StatePlace, open_state, replace_state
from coordinator.state.reads import StateDamaged
from coordinator.state.replay import replay_log
from coordinator.state.store import StateCorrupt, StateStore
from coordinator.view import CoordinatorView
from snapshot.snapshots import remove_incomplete, snapshot_directory

log = logging.getLogger(__name__)

# Failures that loading again cannot cure: the coordinator stays out of service until an operator acts.
NEEDS_OPERATOR = (LoadFailed, CorruptLogError)
# Failures that mean the state file itself is damaged: the next load sets it aside and rebuilds it.
STATE_DAMAGE = (apsw.CorruptError, apsw.NotADBError, StateDamaged)
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def failure_kind(error: BaseException) -> str:
    """A short name for why a coordinator went out of service (a metric label)."""
    if isinstance(error, CorruptLogError):
        return "log_damaged"
    if isinstance(error, LoadFailed):
        return "needs_operator"
    if isinstance(error, apsw.FullError) or (isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS):
        return "disk_full"
    if isinstance(error, apsw.CorruptError | apsw.NotADBError | StateCorrupt | StateDamaged):
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


def open_coordinator(plan: LoadPlan) -> Loaded:
    """Opens log and state, replays, starts a leader epoch; on failure leaves nothing open (blocking)."""
    settings = plan.settings
    metadata_log = MetadataLog(plan.directory / "log", settings.log_segment_bytes)
    place = StatePlace(
        plan.coordinator_id, plan.directory, settings.state_cache_bytes, settings.state_verify_on_load != "never"
    )
    store: StateStore | None = None
    try:
        position = metadata_log.position()
        for leftover in remove_incomplete(snapshot_directory(plan.directory)):
            log.warning("coordinator %d: removed %s, left by an interrupted snapshot", plan.coordinator_id, leftover)
        store = open_state(place, position, plan.verify_state, plan.rebuild_state_reason)
        try:
            replayed = _replay(plan, store, metadata_log, position)
            view = store.load_view()
        except apsw.CorruptError as error:  # SQLite finds damage only when a read touches it
            store.close()
            store = None
            store = replace_state(place, f"{place.path}: {error}", position)
            replayed = _replay(plan, store, metadata_log, position)
            view = store.load_view()
        end = _start_leader_epoch(settings, metadata_log, store, view, position)
    except BaseException:
        metadata_log.close()
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        raise
    return Loaded(metadata_log, store, view, position, end, replayed, metadata_log.flush_count)


def _replay(plan: LoadPlan, store: StateStore, metadata_log: MetadataLog, position: LogPosition) -> int:
    if store.applied_offset > position.end_offset:
        raise LoadFailed(
            f"coordinator {plan.coordinator_id}: SQLite state is applied to {store.applied_offset}, past the log "
            f"end {position.end_offset}: the log lost acknowledged records; restore it or a snapshot"
        )
    return replay_log(store, metadata_log, plan.settings.replay_batch_operations)


def _start_leader_epoch(
    settings: Settings, metadata_log: MetadataLog, store: StateStore, view: CoordinatorView, position: LogPosition
) -> int:
    """Appends and applies this node's leader change; returns the log end after it."""
    epoch = max(view.leader_epoch, position.last_epoch) + 1
    change = [records.leader_change(epoch, settings.node_id)]
    end = metadata_log.end_offset + 1
    frame = encode_frame(metadata_log.end_offset, epoch, 1, records.encode_batch(change))
    metadata_log.append(frame, end, epoch)
    store.apply([(end, change)])
    interpreter.replay(view, change[0], end)
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
