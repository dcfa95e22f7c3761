"""This node's part in the cluster (DESIGN §6a): its session in etcd, elections, and each coordinator's role.

- **Session.** The node registers under a lease and renews it every heartbeat; when a renewal has not come back
  within the lease's time to live, every coordinator it leads steps down before etcd can let the lease expire, so two
  leaders never both answer writes. A lease etcd let expire is registered anew.
- **Forming, incarnations, coordinators added.** `joining.py`: the configuration stored once, each coordinator
  placed once (compare-and-set on an absent key), each ISR told whether this node is the replica it knew; a count an
  add raised (`diskless coordinators add`) is read at each refresh, the added coordinators placed where no node
  placed them yet, and made here (`on_count_raised`).
- **Reassignments.** At each refresh the leader of a coordinator being reassigned takes its next step
  (`reassignment.py`), by compare-and-set.
- **Refreshing.** Every `cluster.refresh.interval.ms` the node reads the assignments and the live nodes; where a
  leader's node is gone it elects the first live in-sync replica (`isr_changes.elect_where_leaders_lost`) by
  compare-and-set, and it tells each of its coordinators what it now is.
- **Peer-observed death.** A follower whose fetch finds its leader's node unreachable names it
  (`peer_unreachable`); where its port refuses two connects, its process is gone and its lease is revoked
  (`peer_death.py`), so its coordinators elect at once rather than after the session timeout.
- **Preferred leaders.** Every `cluster.leader.imbalance.check.interval.ms` the live node of the lowest id gives
  leadership back to each coordinator's first replica where it is in the ISR (`preferred_leaders.py`, by CAS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from coordinator.base.clock import Clock
from coordinator.cluster import isr_changes
from coordinator.cluster.assignment import NO_INCARNATIONS
from coordinator.cluster.incarnation import Incarnation, next_incarnation, next_mark
from coordinator.cluster.joining import (
    missing_coordinators,
    place_missing,
    reconcile_incarnation,
    register,
    renew_while_forming,
)
from coordinator.cluster.peer_death import PeerDeathWatch
from coordinator.cluster.preferred_leaders import (
    ElectionOutcome,
    ElectionRefused,
    PreferredElection,
    balance_leaders,
    elect_preferred_leaders,
)
from coordinator.cluster.reassignment import ReassignmentResult, drive_reassignments, reassign
from coordinator.cluster.roles import RoleHolder, StubSource, incarnations_of, role_of
from coordinator.cluster.store import (
    ClusterConfig,
    ClusterStore,
    NodeEndpoint,
    NodeSession,
    SessionExpired,
    VersionedAssignment,
)
from coordinator.cluster.waiting import renewal_wait_ms, run_within
from coordinator.config.settings import Settings
from coordinator.runtime.replication.role import ReplicaRole
from protos import internal_pb2_grpc as internal_grpc

log = logging.getLogger(__name__)
FORMING_WAIT_MAX_MS = 600_000  # a cluster that has not formed by then is misconfigured: say so and stop


class ClusterController:
    """The node's etcd session and the coordinators' roles; also the replication's `ClusterLink`.

    `replica_on_disk(c)`: whether this node's data directory holds a log of coordinator c (a replica the ISR may
    have known); the node's incarnation is read from (and written to) its data directory when it joins.
    """

    def __init__(
        self,
        settings: Settings,
        endpoint: NodeEndpoint,
        store: ClusterStore,
        clock: Clock,
        replica_on_disk: Callable[[int], bool],
    ) -> None:
        self._settings = settings
        self._endpoint = endpoint
        self._replica_on_disk = replica_on_disk
        self._incarnation = Incarnation("", "")
        self._stubs: StubSource | None = None
        self._store = store
        self._clock = clock
        self._session: NodeSession | None = None
        self.config = ClusterConfig(settings.coordinators, settings.replication_factor)
        self.assignments: dict[int, VersionedAssignment] = {}
        self.live: dict[int, NodeEndpoint] = {}
        self._holders: list[RoleHolder] = []
        self.leader_changes = 0  # elections this node won or saw (a metric)
        # A refresh reads etcd, changes it and sets the roles from what it read; a preferred election sets the roles
        # from what it wrote. One at a time, or a refresh that read before an election would set them back to the
        # older leader epoch.
        self._changing = asyncio.Lock()
        # Coordinators whose replica here is damaged and found no healthy copy: this node does not shrink their ISR
        # to itself (`_refresh`), so that the members it waits for can lead once back (`leave_isr_damaged`).
        self._damaged: set[int] = set()
        # Called with the stored count once an add raised it above the coordinators this node holds, each of them
        # placed: the node makes and loads them, then `hold`s them (coordinator/node/cluster_growth.py).
        self.on_count_raised: Callable[[int], Awaitable[None]] | None = None
        self.deaths = PeerDeathWatch(
            endpoint.node_id, store, clock, self._refuses_connections, self._refresh_after_death,
            settings.peer_death_probe_interval_ms, settings.peer_death_probe_timeout_ms,
        )  # fmt: skip

    # ------------------------------------------------------------------ joining

    async def join(self) -> ClusterConfig:
        """Registers the node, stores or reads the configuration, waits for the cluster to form, then tells each
        ISR this node is in whether it is the replica the ISR knew."""
        # The mark etcd last recorded of this node's directory: one behind it went back in time (a restored copy).
        recorded_mark = await self._store.directory_mark(self._endpoint.node_id)
        self._incarnation = next_incarnation(self._settings.data_dir, recorded_mark)
        await self._store.record_directory_mark(self._endpoint.node_id, self._incarnation.mark)
        self._endpoint = replace(self._endpoint, incarnation=self._incarnation.current)
        log.info(
            "node %d starts as incarnation %s (previous %s)",
            self._endpoint.node_id, self._incarnation.current, self._incarnation.previous or "none",
        )  # fmt: skip
        self._session = await self._register()
        self.config = await self._store.form(
            ClusterConfig(self._settings.coordinators, self._settings.replication_factor)
        )
        deadline_ms = self._clock.monotonic_ms() + FORMING_WAIT_MAX_MS
        while True:
            self.live = await self._store.live_nodes()
            self.assignments = await self._store.assignments()
            if not missing_coordinators(self.config, self.assignments):
                await reconcile_incarnation(
                    self._store, self.assignments, self._endpoint.node_id, self._incarnation, self._replica_on_disk
                )
                return self.config
            if await place_missing(self._store, self.config, self.assignments, self.live):
                continue
            if self._clock.monotonic_ms() > deadline_ms:
                raise TimeoutError(
                    f"the cluster did not form: {len(self.live)} nodes registered, replication factor "
                    f"{self.config.replication_factor}"
                )
            log.info(
                "waiting for the cluster to form: %d of %d nodes registered",
                len(self.live), self.config.replication_factor,
            )  # fmt: skip
            await self._clock.sleep_ms(self._settings.cluster_refresh_interval_ms)
            assert self._session is not None
            self._session = await renew_while_forming(self._session, self._register, self._endpoint.node_id)

    @property
    def incarnation(self) -> str:
        """The incarnation this node runs as (followers send it with each fetch)."""
        return self._incarnation.current

    async def _register(self) -> NodeSession:
        return await register(self._store, self._endpoint, self._settings.node_session_timeout_ms // 1000, self._clock)

    def initial_roles(self) -> dict[int, ReplicaRole]:
        return {
            c: role_of(self._endpoint.node_id, v.assignment, self.live, self.session_valid(), self.incarnation)
            for c, v in self.assignments.items()
        }

    def attach(self, stubs: StubSource, holders: Sequence[RoleHolder]) -> None:
        """The node's channels to other nodes, and the coordinators whose roles this controller sets."""
        self._stubs = stubs
        self._holders = list(holders)

    def loops(self) -> dict[str, Callable[[], Coroutine[Any, Any, None]]]:
        """The lease keep-alive, the refresh and the other loops this node runs, by worker name: the node's
        supervisor runs them (coordinator/node/worker_registry.py) from once its coordinators are loading until
        before `close`."""
        loops = {
            "cluster-session": self._keep_alive,
            "cluster-refresh": self._refresh_loop,
            "cluster-directory-mark": self._mark_loop,
        }
        if self._settings.peer_death_probe_enable:
            loops["cluster-peer-deaths"] = self.deaths.run
        if self._settings.auto_leader_rebalance_enable:
            loops["cluster-preferred-leaders"] = partial(
                balance_leaders, self, self._clock, self._settings.leader_imbalance_check_interval_ms
            )
        return loops

    async def close(self) -> None:
        """After its loops stopped: moves the mark on, revokes the session."""
        if self._incarnation.mark:  # a clean stop moves the mark on: any copy taken while it ran is behind it
            with contextlib.suppress(Exception):
                await self._move_mark()
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._store.revoke(self._session.lease_id)
        with contextlib.suppress(Exception):
            await self._store.close()

    # ------------------------------------------------------------------ reader processes

    def read_addresses_of(self, node_id: int) -> tuple[str, ...]:
        """The reader processes a live node advertises in its registration, as etcd last said."""
        endpoint = self.live.get(node_id)
        return endpoint.read_addresses if endpoint is not None else ()

    async def advertise_readers(self, addresses: tuple[str, ...]) -> None:
        """Puts this node's reader addresses in its registration (kept by every later one); raises if etcd fails."""
        self._endpoint = replace(self._endpoint, read_addresses=addresses)
        session = self._session
        if session is not None:
            await self._store.update_node(self._endpoint, session.lease_id)

    # ------------------------------------------------------------------ ClusterLink

    def session_valid(self) -> bool:
        return self._session is not None and self._session.valid_for_ms() > 0

    async def alter_isr(
        self,
        coordinator_id: int,
        leader_epoch: int,
        isr: tuple[int, ...],
        joined: Mapping[int, str] = NO_INCARNATIONS,
    ) -> tuple[int, ...] | None:
        node_id = self._endpoint.node_id
        joined = {**joined, node_id: self.incarnation}
        return await isr_changes.alter_isr(self._store, coordinator_id, leader_epoch, node_id, isr, joined)

    async def leave_isr_damaged(self, coordinator_id: int) -> str:
        """This node's replica is damaged: it leaves the ISR (handing leadership on) by CAS, and this node's roles
        follow at once, before it sets its files aside. "" once it is out of the ISR; else why it cannot leave yet
        (no other in-sync replica alive: no healthy copy), or that etcd did not answer."""
        # At once, before any await: a refresh meanwhile must not shrink the ISR to this damaged replica.
        self._damaged.add(coordinator_id)
        fresh = await isr_changes.leave_isr_damaged(self._store, coordinator_id, self._endpoint.node_id)
        if isinstance(fresh, str):
            return fresh
        self._damaged.discard(coordinator_id)
        # The role follows what etcd now says before the files go aside: an empty replica never loads as the leader
        # an older refresh named.
        async with self._changing:
            self._learn(coordinator_id, fresh)
            self._apply_roles()
        return ""

    def _learn(self, coordinator_id: int, fresh: VersionedAssignment) -> None:
        """Keeps an assignment this node wrote or read, unless a refresh since has read a later one."""
        known = self.assignments.get(coordinator_id)
        if known is None or known.assignment.partition_epoch < fresh.assignment.partition_epoch:
            self.assignments[coordinator_id] = fresh

    def internal_stub(self, address: str) -> internal_grpc.CoordinatorInternalAsyncStub:
        assert self._stubs is not None, "attach() comes before any coordinator loads"
        return self._stubs.internal_stub(address)

    def peer_unreachable(self, node_id: int) -> None:
        """A follower's fetch found `node_id` unreachable: probed for death while the watch runs (`peer_death.py`)."""
        if self._settings.peer_death_probe_enable:
            self.deaths.suspect(node_id)

    async def _refresh_after_death(self, node_id: int) -> None:
        """A refresh now, on the watch's task: the dead node's coordinators elect without waiting for the loop's."""
        async with self._changing:
            await self._refresh()

    async def _refuses_connections(self, target: str, timeout_ms: int) -> bool:
        return self._stubs is not None and await self._stubs.refuses_connections(target, timeout_ms)

    # ------------------------------------------------------------------ loops

    async def _keep_alive(self) -> None:
        interval_ms = self._settings.node_heartbeat_interval_ms
        stepped_down = False
        while True:
            session = self._session
            assert session is not None
            sent_at_ms = self._clock.monotonic_ms()
            try:
                # One renewal waits one heartbeat at most, then the next is sent: a renewal that reached a member
                # as etcd's leader died waits there for the next leader (etcd checks once per election timeout)
                # even after one is elected, while a new one is answered at once. Waiting out the first for the
                # whole session made every node step down on an etcd leader's loss, with no lease expiring.
                await run_within(self._clock, session.renew(), renewal_wait_ms(interval_ms, session.valid_for_ms()))
                stepped_down = False
            except SessionExpired:
                log.error("node %d: etcd let its session expire; registering again", self._endpoint.node_id)
                self._step_down()
                self._session = await self._register()
                continue
            except Exception as error:  # etcd unreachable or slow
                log.warning("node %d: session not renewed (%s)", self._endpoint.node_id, error)
            if not self.session_valid() and not stepped_down:
                log.error("node %d: session may have lapsed: stepping down as leader", self._endpoint.node_id)
                self._step_down()
                stepped_down = True
            await self._clock.sleep_ms(interval_ms - (self._clock.monotonic_ms() - sent_at_ms))

    def _step_down(self) -> None:
        if self._session is not None:
            self._session.lapse()
        self._apply_roles()

    async def _move_mark(self) -> None:
        """The directory's mark moves on: durably on disk first, then in etcd (incarnation.py says why)."""
        mark = await asyncio.to_thread(next_mark, self._settings.data_dir, self._incarnation)
        await self._store.record_directory_mark(self._endpoint.node_id, mark)

    async def _mark_loop(self) -> None:
        while True:
            await self._clock.sleep_ms(self._settings.node_incarnation_mark_interval_ms)
            try:
                await self._move_mark()
            except Exception as error:  # etcd unreachable: the file is ahead of etcd, never behind; next time again
                log.warning("node %d: the data directory's mark not recorded: %s", self._endpoint.node_id, error)

    async def _refresh_loop(self) -> None:
        while True:
            try:
                async with self._changing:
                    await self._refresh()
                await self._follow_count()
            except Exception as error:  # etcd unreachable: roles stay as they are; the session decides leadership
                log.warning("cluster refresh failed: %s", error)
            await self._clock.sleep_ms(self._settings.cluster_refresh_interval_ms)

    async def _refresh(self) -> None:
        live = await self._store.live_nodes()
        assignments = await self._store.assignments()
        config = await self._store.cluster_config()
        if config is not None and config.coordinators > self.config.coordinators:  # an add (counts only rise)
            self.config = config
        if self.session_valid() and missing_coordinators(self.config, assignments):
            # An add raised the count: the added coordinators get their replicas here if no node placed them yet.
            await place_missing(self._store, self.config, assignments, live)
            assignments = await self._store.assignments()
        if self.session_valid():  # where a leader's node is gone, the first live in-sync replica leads
            self.leader_changes += await isr_changes.elect_where_leaders_lost(
                self._store, assignments, incarnations_of(live), self._damaged
            )
        if self.session_valid():  # each reassignment's next step, where this node leads (`reassignment.py`)
            node_id = self._endpoint.node_id
            self.leader_changes += await drive_reassignments(self._store, assignments, node_id, incarnations_of(live))
        self.live, self.assignments = live, assignments
        self._apply_roles()

    # ------------------------------------------------------------------ coordinators added

    async def raise_count(self, expected: int, count: int) -> ClusterConfig:
        """Sets the stored count to `count` if it is `expected` (compare-and-set), then places every coordinator of
        the stored count that has no replicas yet and follows the count here; returns the stored configuration.
        ElectionRefused while this node's session is not valid (its view of the live nodes may be stale)."""
        if not self.session_valid():
            raise ElectionRefused(f"node {self._endpoint.node_id}: its etcd session is not valid")
        if count != expected:
            await self._store.change_coordinator_count(expected, count)
        async with self._changing:
            await self._refresh()
        await self._follow_count()
        return self.config

    async def stored_count(self) -> int:
        """The coordinator count etcd holds now (an add on another node may have raised it since the last refresh)."""
        config = await self._store.cluster_config()
        return self.config.coordinators if config is None else max(config.coordinators, self.config.coordinators)

    def placed(self) -> bool:
        """Whether every coordinator of the count this node knows has its replicas (as of its last refresh)."""
        return not missing_coordinators(self.config, self.assignments)

    async def _follow_count(self) -> None:
        """This node makes the coordinators an add raised the count to, once every one of them is placed."""
        count = self.config.coordinators
        if self.on_count_raised is None or count <= len(self._holders):
            return
        if not self.placed():
            return  # too few live nodes to place them yet: the next refresh tries again
        await self.on_count_raised(count)

    async def hold(self, holders: Sequence[RoleHolder]) -> None:
        """Coordinators added here: their roles are set from now on, first at once."""
        async with self._changing:
            held = {holder.coordinator_id for holder in self._holders}
            self._holders.extend(holder for holder in holders if holder.coordinator_id not in held)
            self._apply_roles()

    # ------------------------------------------------------------------ preferred leaders

    @property
    def coordinator_count(self) -> int:
        return self.config.coordinators

    @property
    def replication_factor(self) -> int:
        return self.config.replication_factor

    async def elect_preferred_leaders(self, coordinator_ids: Collection[int] = ()) -> list[PreferredElection]:
        """Leadership back to the preferred replica of each coordinator (all when none given) where it is possible.

        ElectionRefused while this node's session is not valid: its view of the live nodes may be stale.
        """
        if not self.session_valid():
            raise ElectionRefused(f"node {self._endpoint.node_id}: its etcd session is not valid")
        live = incarnations_of(await self._store.live_nodes())
        wanted = sorted(set(coordinator_ids)) if coordinator_ids else range(self.config.coordinators)
        results = await elect_preferred_leaders(self._store, wanted, live)
        async with self._changing:  # not around the etcd calls: a slow etcd must not hold the refresh back
            for result in results:
                if result.outcome is not ElectionOutcome.ELECTED or result.assignment is None:
                    continue
                self.leader_changes += 1
                self._learn(result.coordinator_id, result.assignment)
            if any(r.outcome is ElectionOutcome.ELECTED for r in results):
                self._apply_roles()  # this node may be the new leader or the old: it acts now, the others at refresh
        return results

    async def reassign(self, reassignments: Sequence[tuple[int, Sequence[int]]]) -> list[ReassignmentResult]:
        """Starts (replaces, cancels) each coordinator's reassignment in etcd (`reassignment.reassign`). A known node
        is a live one or a current replica; ElectionRefused while this node's session is not valid."""
        if not self.session_valid():
            raise ElectionRefused(f"node {self._endpoint.node_id}: its etcd session is not valid")
        live = set(await self._store.live_nodes())
        minimum = self._settings.min_insync_replicas
        return [await reassign(self._store, c, replicas, live, minimum) for c, replicas in reassignments]

    async def placement(self) -> tuple[dict[int, VersionedAssignment], list[int]]:
        """Every coordinator's assignment and the live nodes, read from etcd now."""
        return await self._store.assignments(), sorted(await self._store.live_nodes())

    def balances_leaders(self) -> bool:
        """Whether this node runs the periodic elections: the live node of the lowest id, with a valid session."""
        return self.session_valid() and bool(self.live) and min(self.live) == self._endpoint.node_id

    def _apply_roles(self) -> None:
        valid = self.session_valid()
        for holder in self._holders:
            versioned = self.assignments.get(holder.coordinator_id)
            holder.set_role(
                role_of(
                    self._endpoint.node_id,
                    versioned.assignment if versioned else None,
                    self.live,
                    valid,
                    self.incarnation,
                )
            )
