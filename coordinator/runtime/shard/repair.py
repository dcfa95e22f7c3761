"""A follower that cannot go on from its own files, in a cluster: the leader's snapshot when it is below the
leader's log start, and repair from a healthy replica when its files are damaged (DESIGN §6a; TigerBeetle's
storage-fault model: a replica whose disk lies repairs from the cluster, by itself).

In a cluster, a replica whose log is damaged inside, or whose state cannot be rebuilt locally (its snapshots
damaged too, or the log the rebuild needs), does not wait for an operator: it leaves the ISR first (handing
leadership on if it led: `cluster.damaged_replica`), so it is never elected nor counted toward
`min.insync.replicas` while damaged; it moves its files aside into `damaged-<ms>/` for the operator; then it loads
as an empty follower, which fetches the leader's snapshot and log and rejoins the ISR by the normal rules.

When no healthy copy exists (no other in-sync replica alive) it stays out of service and says so: state DAMAGED
in DescribeCoordinators with the file and offset, health NOT_SERVING, the `diskless_coordinator_damaged` gauge,
one log line. It asks again with bounded backoff, and repairs once another in-sync replica is back.
Alone (no cluster) damage inside the log stays refused, for the operator (`diskless log recover`).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from pathlib import Path
from typing import final

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.config.settings import Settings
from coordinator.runtime.log.damage import CorruptLogError
from coordinator.runtime.replication.follower import NeedsSnapshot
from coordinator.runtime.replication.link import ClusterLink
from coordinator.runtime.replication.role import ReplicaRole, RoleKind
from coordinator.runtime.replication.snapshot_transfer import install_snapshot
from coordinator.runtime.shard.damaged_files import set_aside
from coordinator.runtime.shard.loading import NEEDS_OPERATOR, NotThisClustersLog

log = logging.getLogger(__name__)


def repairable_from_replica(error: BaseException) -> bool:
    """Damage that a healthy replica's copy cures: the log damaged inside, a state that cannot be rebuilt here, a
    log that lost what the state or a snapshot holds. Not a directory of another cluster: that one is the
    operator's."""
    return isinstance(error, NEEDS_OPERATOR) and not isinstance(error, NotThisClustersLog)


def where_damaged(error: BaseException) -> str:
    """The file and offset of the damage, as an operator looks for it."""
    if isinstance(error, CorruptLogError) and error.damage is not None:
        damage = error.damage
        return (
            f"{damage.segment_path}, byte {damage.byte_position} of {damage.segment_size_bytes}, where log offset "
            f"{damage.expected_offset} was expected ({damage.problem})"
        )
    return str(error)


@final
class ReplicaRepair:
    """One coordinator replica's repair: leave the ISR, set the files aside; or wait, DAMAGED, for a healthy copy."""

    def __init__(
        self, coordinator_id: int, directory: Path, settings: Settings, clock: Clock, link: ClusterLink
    ) -> None:
        self.coordinator_id = coordinator_id
        self._directory = directory
        self._settings = settings
        self._clock = clock
        self._link = link
        self.unrepairable = ""  # while no healthy copy exists: what is damaged and why it waits (else empty)
        self.repairs = 0  # repairs begun since the node started (files set aside)

    async def leave_isr(self, failure: BaseException, stopping: asyncio.Event) -> bool:
        """Leaves the ISR, waiting (DAMAGED) while no healthy copy exists; False when closing first."""
        backoff = Backoff(self._settings.reload_backoff_ms, self._settings.reload_backoff_max_ms)
        while not stopping.is_set():
            try:
                reason = await self._link.leave_isr_damaged(self.coordinator_id)
            except Exception as error:  # etcd unreachable: ask again
                reason = f"etcd did not answer ({error})"
            if not reason:
                self.unrepairable = ""
                return True
            if not self.unrepairable:
                log.error(
                    "coordinator %d DAMAGED: %s; it cannot repair: %s. It stays unavailable until another in-sync "
                    "replica is back, then repairs from it",
                    self.coordinator_id, where_damaged(failure), reason,
                )  # fmt: skip
            self.unrepairable = f"DAMAGED: {where_damaged(failure)}; {reason}; waiting for a healthy in-sync replica"
            await self._clock.wait_event(stopping, backoff.failed())
        return False

    async def install_snapshot(
        self, reason: NeedsSnapshot, role: ReplicaRole, backoff: Backoff, stopping: asyncio.Event
    ) -> None:
        """The follower cannot go on from its own files (below the leader's log start, or empty after a repair): it
        installs the leader's newest snapshot; a failure waits a backoff, and the next load tries again."""
        if role.kind is not RoleKind.FOLLOWER:
            return  # no longer following: the next load is in the new role
        log.warning("coordinator %d: %s; fetching the leader's snapshot", self.coordinator_id, reason)
        try:
            await install_snapshot(self.coordinator_id, self._directory, role, self._settings, self._link.internal_stub)
        except Exception as error:  # the leader gone, a damaged transfer: the next load tries again
            wait_ms = backoff.failed()
            log.error("coordinator %d: snapshot fetch failed (%s); again in %d ms", self.coordinator_id, error, wait_ms)
            await self._clock.wait_event(stopping, wait_ms)

    async def set_files_aside(self, failure: BaseException, executor: Executor) -> None:
        """Out of the ISR, files closed: every file moves into `damaged-<ms>/`, so the next load starts empty."""
        loop = asyncio.get_running_loop()
        folder = await loop.run_in_executor(
            executor, set_aside, self._directory, self._clock.now_ms(), self._settings.damaged_retained_count
        )
        self.repairs += 1
        log.warning(
            "coordinator %d: damaged (%s); out of the ISR, its files moved to %s; repairing from the leader "
            "(snapshot, then the log)",
            self.coordinator_id, where_damaged(failure), folder,
        )  # fmt: skip
