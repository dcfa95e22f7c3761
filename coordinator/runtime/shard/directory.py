"""A coordinator's directory between its loads: the lock that keeps a second node out, and what the next load
checks first (DESIGN §6): the state verified after a crash or a failure, set aside and rebuilt after damage."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import final

from coordinator.base.directory_lock import DirectoryLock
from coordinator.config.settings import Settings
from coordinator.machine.state.integrity import leave_clean_close_mark, take_clean_close_mark
from coordinator.runtime.replication.role import ReplicaRole, RoleKind
from coordinator.runtime.shard.loading import Loaded, LoadPlan, damage_behind, is_state_damage, open_coordinator

log = logging.getLogger(__name__)


@final
class CoordinatorDirectory:
    def __init__(self, coordinator_id: int, path: Path, settings: Settings) -> None:
        self.coordinator_id = coordinator_id
        self.path = path
        self._settings = settings
        self._lock: DirectoryLock | None = None
        self._verify_state = settings.state_verify_on_load == "always"  # the next load checks the state first
        self._rebuild_state_reason = ""  # the next load sets the state aside and rebuilds it, for this reason

    def open(self, role: ReplicaRole | None) -> Loaded:
        """On the coordinator's thread: takes the directory, opens log and state; on failure leaves nothing open."""
        self.path.mkdir(parents=True, exist_ok=True)
        if self._lock is None:
            self._lock = DirectoryLock(self.path)
        if not take_clean_close_mark(self.path) and self._settings.state_verify_on_load != "never":
            self._verify_state = True  # a crash, or a state this node did not close: it may be damaged
        plan = LoadPlan(
            self.coordinator_id, self.path, self._settings, self._verify_state, self._rebuild_state_reason, role
        )
        loaded = open_coordinator(plan)
        self._verify_state = self._settings.state_verify_on_load == "always"
        self._rebuild_state_reason = ""
        return loaded

    def failed(self, error: BaseException) -> None:
        """What failed may have left the state damaged: the next load checks it, and rebuilds it if it is."""
        if is_state_damage(error):
            cause = damage_behind(error)
            self._rebuild_state_reason = f"{type(cause).__name__}: {cause}"
        if self._settings.state_verify_on_load != "never":
            self._verify_state = True

    def closed_cleanly(self) -> None:
        """On the coordinator's thread, after log and state closed cleanly: the next load need not verify."""
        leave_clean_close_mark(self.path)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def removable(self, role: ReplicaRole) -> bool:
        """Whether the node is out of the coordinator's replicas in a cluster while files of it are here. (A node
        spread over processes names itself the replica of coordinators its other processes lead: never removed.)"""
        return role.kind is RoleKind.NOT_REPLICA and role.node_id not in role.replicas and self.path.exists()

    def remove(self) -> None:
        """On the coordinator's thread, its files closed: this node is no longer one of the coordinator's replicas
        (a reassignment moved it away, perhaps while the node was down), so its log, state and snapshots go."""
        if not self.path.exists():
            return
        self.release()
        self._lock = None
        if any(p.name != "lock" for p in self.path.iterdir()):
            log.warning(
                "coordinator %d: this node is not one of its replicas: deleting its files in %s", self.coordinator_id,
                self.path,
            )  # fmt: skip
        shutil.rmtree(self.path)
