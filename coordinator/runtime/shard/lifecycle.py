"""A coordinator's lifecycle: load, serve, and after a failure load again (DESIGN §3, §6).

A failed write or apply answers every operation not yet answered at once
(COORDINATOR_NOT_AVAILABLE, retriable), takes the coordinator out of service
and loads it again from SQLite plus the log; a load that fails for a reason
that may pass (a full disk, an I/O error) is tried again with bounded backoff,
so the coordinator serves again by itself once the cause is gone. Damage that
only an operator can settle (a log damaged inside, a state ahead of its log)
keeps it out of service, saying where and what.

In a cluster the coordinator serves in the role etcd gives this node
(DESIGN §6a): leader (the pipeline, waiting on the replication's high
watermark) or follower (fetching the leader's log). A change of leadership
drops what is pending (NOT_COORDINATOR to its callers), closes the files and
loads again in the new role. There, damage a load or a read meets that a
healthy replica's copy cures is repaired from it (`repair.py`), by itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import final

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.executors import ExecutorFactory, thread_executor
from coordinator.base.invariants import check_invariant
from coordinator.base.metrics import Metrics
from coordinator.base.workers import LoopWorker, WorkerSupervisor
from coordinator.config.settings import Settings
from coordinator.runtime.ports import TopicRecordsApplied
from coordinator.runtime.replication.follower import Follower, NeedsSnapshot, NodeFetcher
from coordinator.runtime.replication.leader import LeaderReplication, RoleChanged
from coordinator.runtime.replication.link import ClusterLink
from coordinator.runtime.replication.role import ReplicaRole, RoleKind
from coordinator.runtime.shard.append_ticks import AppendTicks
from coordinator.runtime.shard.availability import TRANSITIONS, ShardState, not_leading, unavailable
from coordinator.runtime.shard.directory import CoordinatorDirectory
from coordinator.runtime.shard.leading import following, leading, tell_once_applied
from coordinator.runtime.shard.life_worker import FirstAttempt, start_life, wait_life_ended
from coordinator.runtime.shard.loading import (
    NEEDS_OPERATOR,
    Loaded,
    close_loaded,
    damage_behind,
    failure_kind,
    free_bytes,
)
from coordinator.runtime.shard.pipeline import Pipeline
from coordinator.runtime.shard.repair import ReplicaRepair, repairable_from_replica
from coordinator.runtime.shard.snapshots import SnapshotScheduler
from coordinator.runtime.worker_specs import ISR_TICKER

log = logging.getLogger(__name__)


@final
class Lifecycle:
    """The state callers see, the load-serve-reload loop, and the files a load opened."""

    def __init__(
        self,
        coordinator_id: int,
        directory: Path,
        settings: Settings,
        clock: Clock,
        metrics: Metrics,
        executor: Executor,
        on_state_change: Callable[[], None],
        on_topic_records: TopicRecordsApplied | None,
        workers: WorkerSupervisor,
        role: ReplicaRole | None = None,
        link: ClusterLink | None = None,
        ticks: AppendTicks | None = None,
        executors: ExecutorFactory = thread_executor,
        fetcher: NodeFetcher | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._workers = workers  # the node's: runs this loop (life_worker.py) and the leader's ISR ticker
        self._fetcher = fetcher  # the node's replica fetcher: a follower here fetches through it
        self._ticks = ticks  # the process's append ticks, shared with its other coordinators
        self._role = role  # None: alone, the leader of everything
        self._link = link
        self._role_changed = asyncio.Event()
        self._leader: LeaderReplication | None = None
        self._loaded_role: ReplicaRole | None = role  # the role the files were loaded in
        self._follower: Follower | None = None
        self._directory = CoordinatorDirectory(coordinator_id, directory, settings)
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._executor = executor  # the coordinator's own thread: loads, log writes, closes
        # Snapshots read the files a load opened and take turns with loads (`files_lock`).
        self.snapshots = SnapshotScheduler(
            coordinator_id, directory, settings, clock, executor, self, executors(f"snapshot-{coordinator_id}")
        )
        self._on_state_change = on_state_change
        self._on_topic_records = on_topic_records
        self._state = ShardState.LOADING
        self._closing = False
        self._stopping = asyncio.Event()  # set by close: ends a wait between load attempts
        self._problem = ""  # why the coordinator is not serving, for callers, DescribeCoordinators and the log
        self._loaded: Loaded | None = None
        # The last pipeline stays after a failure: its statistics (log end, high watermark) are still reported.
        self._pipeline: Pipeline | None = None
        self._earlier_append_count = 0  # operations appended by the pipelines of earlier loads
        self._readable_task: asyncio.Task[None] | None = None  # tells the readers' board once a new leader reads
        self.leader_changes = 0  # new leaderships (leader node or epoch) etcd told this replica of since start
        # In a cluster a damaged replica repairs from a healthy one (repair.py); alone, damage waits for an operator.
        self._repair = ReplicaRepair(coordinator_id, directory, settings, clock, link) if link is not None else None
        self._repairing = False  # its files set aside: it loads as a follower first, never as a leader on nothing

    # ------------------------------------------------------------------ facts

    @property
    def state(self) -> ShardState:
        return self._state

    @property
    def problem(self) -> str:
        return self._repair.unrepairable if self._repair is not None and self._repair.unrepairable else self._problem

    @property
    def damaged(self) -> bool:
        """Damaged with no healthy replica to repair from: out of service until one is back (DAMAGED)."""
        return self._repair is not None and bool(self._repair.unrepairable)

    @property
    def loaded(self) -> Loaded | None:
        """The open log and state; None while not loaded."""
        return self._loaded

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def role(self) -> ReplicaRole | None:
        return self._role

    @property
    def leader(self) -> LeaderReplication | None:
        """The leader's replication while this node leads the coordinator in a cluster."""
        return self._leader

    @property
    def follower(self) -> Follower | None:
        """The fetcher while this node follows the coordinator."""
        return self._follower

    @property
    def pipeline(self) -> Pipeline | None:
        """The current pipeline, or the last one after a failure; None before the first load."""
        return self._pipeline

    @property
    def append_count(self) -> int:
        current = self._pipeline.statistics().log_append_count if self._pipeline is not None else 0
        return self._earlier_append_count + current

    def require_serving(self) -> None:
        """Raises CoordinatorUnavailable with the code a caller should see in this state (writes, strict reads)."""
        refusal = unavailable(self.coordinator_id, self._state, self._closing, self.problem, self._role)
        if refusal is not None:
            raise refusal

    def require_active(self) -> None:
        """As require_serving, and a new leader's reads wait until it applied the log it was elected with (a write,
        or a strict read that waits for what is pending, queues behind that log instead)."""
        self.require_serving()
        refusal = self._pipeline.reads_refusal() if self._pipeline is not None else None
        if refusal is not None:
            raise refusal

    def require_leader(self) -> None:
        """As require_serving, and NOT_COORDINATOR on a follower (writes and ListOffsets go to the leader)."""
        self.require_serving()
        leading = self._leader is not None and self._loaded_role is not None
        refusal = not_leading(self.coordinator_id, self._role, self._loaded_role if leading else None)
        if refusal is not None:
            raise refusal

    def set_role(self, role: ReplicaRole) -> None:
        """etcd says what this node now is for the coordinator; a new leadership means a new load."""
        current = self._role
        self._role = role
        if current is not None and current.same_leadership(role):
            if self._leader is not None:
                self._leader.update_replicas(role)
                self._leader.update_isr(role.isr, dict(role.isr_incarnations))
            return
        if current is not None:
            self.leader_changes += 1
        log.info(
            "coordinator %d: %s -> %s (leader node %d, epoch %d)",
            self.coordinator_id, current.kind.value if current else "none", role.kind.value, role.leader_node_id,
            role.leader_epoch,
        )  # fmt: skip
        reason = RoleChanged(
            f"coordinator {self.coordinator_id}: leadership moved to node {role.leader_node_id} "
            f"(epoch {role.leader_epoch}); retry there"
        )
        self._role_changed.set()
        self._interrupt(reason)

    def _close_leader(self, reason: str) -> None:
        """The leadership ended: its waiters are answered, its ISR ticker stops."""
        if self._leader is not None:
            self._leader.close(reason)
            self._workers.stop(ISR_TICKER.name, self.coordinator_id)

    def _interrupt(self, reason: RoleChanged) -> None:
        """Ends whatever serves now: the leader's waiters and pipeline, or the follower's fetching."""
        self._close_leader(str(reason))
        if self._state is ShardState.ACTIVE and self._pipeline is not None and self._leader is not None:
            self._pipeline.report_damage(reason)
        if self._follower is not None:
            self._follower.close()

    def report_damage(self, error: Exception) -> None:
        """A read met a damaged state: the coordinator goes out of service, sets the state aside and rebuilds it."""
        if self._state is not ShardState.ACTIVE:
            return
        reported = self._follower.fail(error) if self._follower is not None else False
        if reported or (self._pipeline is not None and self._pipeline.report_damage(error)):
            log.error("coordinator %d: a read met damage: %s", self.coordinator_id, error)

    def _transition(self, target: ShardState) -> None:
        check_invariant(
            target in TRANSITIONS[self._state], f"coordinator {self.coordinator_id}: {self._state} -> {target}"
        )
        self._state = target
        self._on_state_change()

    # ------------------------------------------------------------------ load, serve, load again

    def start(self) -> FirstAttempt:
        """Starts the loop on the node's supervisor (life_worker.py); the future resolves once the first load attempt
        is over, with its failure if any."""
        return start_life(self._workers, self.coordinator_id, self)

    async def live(self, first_attempt: FirstAttempt) -> None:
        """Load, serve, and after a failure load again, until closed or an operator is needed."""
        backoff = Backoff(self._settings.reload_backoff_ms, self._settings.reload_backoff_max_ms)
        while not self._closing:
            if self._role is not None and (
                self._role.kind in (RoleKind.OFFLINE, RoleKind.NOT_REPLICA)
                or (self._repairing and self._role.kind is RoleKind.LEADER)
            ):
                if not first_attempt.done():
                    first_attempt.set_result(None)
                if self._directory.removable(self._role):
                    async with self.snapshots.files_lock:
                        await asyncio.get_running_loop().run_in_executor(self._executor, self._directory.remove)
                    continue  # the role may have changed meanwhile
                await self._wait_for_role()
                continue
            failure = await self._attempt_load()
            if not first_attempt.done():
                first_attempt.set_result(failure)
            if failure is None:
                backoff.succeeded()
                failure = await self._serve()
                if self.closing and (failure is None or isinstance(failure, RoleChanged)):
                    await self._step_aside("closing")
                    return
                if failure is None or isinstance(failure, RoleChanged):
                    await self._step_aside(str(failure or "leadership changed"))
                    continue  # load again at once, in the new role
                if isinstance(failure, NeedsSnapshot):
                    await self._step_aside(str(failure))
                    if self._repair is not None and self._role is not None:
                        await self._repair.install_snapshot(failure, self._role, backoff, self._stopping)
                    continue
                await self._take_out_of_service(failure)
                await self._repair_if_damaged(failure)
                continue  # the first load after a failure while serving is at once
            if isinstance(failure, NEEDS_OPERATOR):
                if not await self._repair_if_damaged(failure):
                    return
                continue
            wait_ms = backoff.failed()
            self._problem = f"{self._problem}; loading again in {wait_ms} ms"
            await self._clock.wait_event(self._stopping, wait_ms)
        if not first_attempt.done():
            first_attempt.set_result(CoordinatorUnavailable(ErrorCode.NOT_COORDINATOR, "closed while loading"))

    async def _wait_for_role(self) -> None:
        """No leader known (or no replica here): wait until etcd says otherwise, or close."""
        self._role_changed.clear()
        stopping = asyncio.ensure_future(self._stopping.wait())
        changed = asyncio.ensure_future(self._role_changed.wait())
        await asyncio.wait([stopping, changed], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        changed.cancel()

    async def _repair_if_damaged(self, failure: BaseException) -> bool:
        """In a cluster, damage a healthy replica's copy cures: leave the ISR, set the files aside (the next load is
        an empty follower's). False when it is not such damage, or alone (an operator's then)."""
        if self._repair is None or self._role is None or not repairable_from_replica(failure):
            return False
        if await self._repair.leave_isr(failure, self._stopping):
            async with self.snapshots.files_lock:
                await self._repair.set_files_aside(failure, self._executor)
            self._metrics.coordinator_repairs.labels(str(self.coordinator_id), "from_replica").inc()
            self._repairing = True
            self._problem = f"repairing from a healthy replica after damage: {failure}"
        return True

    async def _serve(self) -> BaseException | None:
        """Runs the leader's pipeline or the follower's fetching until it ends; its failure, if any."""
        if self._role is not self._loaded_role and not (
            self._role is not None and self._loaded_role is not None and self._role.same_leadership(self._loaded_role)
        ):
            return RoleChanged(f"coordinator {self.coordinator_id}: the role changed while loading")
        if self._follower is not None:
            return await self._follower.run()
        assert self._pipeline is not None
        return await self._pipeline.run()

    async def _step_aside(self, reason: str) -> None:
        """Leadership (or following) ended: LOADING again, pending callers get NOT_COORDINATOR, files close."""
        # LOADING first: an ACTIVE coordinator has a pipeline or a follower to read from, and another coordinator
        # going ACTIVE while this one closes its files reads every ACTIVE one's partitions (the node's catalog).
        if self._state is ShardState.ACTIVE and not self._closing:
            self._transition(ShardState.LOADING)
        await self._end_serving(CoordinatorUnavailable(ErrorCode.NOT_COORDINATOR, reason))

    async def _end_serving(self, answer: CoordinatorUnavailable) -> None:
        """Closes the leader's replication, answers everything waiting with `answer`, closes log and state."""
        self._close_leader(answer.message)
        if self._pipeline is not None and self._follower is None:
            await self._pipeline.fail_everything(answer)
        self._leader, self._follower = None, None
        async with self.snapshots.files_lock:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close_files)

    async def _attempt_load(self) -> BaseException | None:
        """One load: ACTIVE and None, or FAILED (nothing left open) and the reason."""
        if self._state is not ShardState.LOADING:
            self._transition(ShardState.LOADING)
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        plan_role = self._role
        try:
            async with self.snapshots.files_lock:  # a snapshot copy never reads a state being reopened
                loaded = await loop.run_in_executor(self._executor, self._load_blocking, plan_role)
        except Exception as error:
            self._out_of_service(error, "cannot load")
            return error
        if self._pipeline is not None:
            self._earlier_append_count += self._pipeline.statistics().log_append_count
        self._loaded = loaded
        for repair in loaded.repairs:
            self._metrics.coordinator_repairs.labels(str(self.coordinator_id), repair).inc()
        role = self._loaded_role = plan_role
        if role is not None and role.kind is RoleKind.FOLLOWER:
            self._repairing = False  # from here on it catches up and rejoins the ISR as any follower does
            self._pipeline = None
            assert self._link is not None
            self._follower = following(
                role, self._link, self._settings, self._clock, self._metrics, loaded, self._executor,
                self.snapshots.log_grew, self._on_topic_records, self._fetcher,
            )  # fmt: skip
            if self._closing:
                self._follower.close()
        else:
            self._leader, self._pipeline = leading(
                role, self._link, self._settings, self._clock, self._metrics, loaded, self._executor,
                self.snapshots.log_grew, self._on_topic_records, self.report_damage, self._ticks,
            )  # fmt: skip
            if self._closing:  # closed while loading: the pipeline only drains, and nothing waits for followers
                self._pipeline.close()
                self._close_leader("the node is shutting down")
            elif self._leader is not None:
                leader = self._leader
                self._workers.start(ISR_TICKER, lambda: LoopWorker(leader.run_isr_ticks), self.coordinator_id)
        self._problem = ""
        self._transition(ShardState.ACTIVE)
        if self._pipeline is not None and self._pipeline.reads_refusal() is not None:
            pipeline = self._pipeline
            self._readable_task = asyncio.create_task(
                tell_once_applied(pipeline, partial(self._serves_with, pipeline), self._on_state_change)
            )
        log.info(
            "coordinator %d loaded in %.2fs: replayed %d log batches, log end %d, leader epoch %d",
            self.coordinator_id, time.monotonic() - started, loaded.replayed, loaded.end_offset,
            loaded.view.leader_epoch,
        )  # fmt: skip
        return None

    def _serves_with(self, pipeline: Pipeline) -> bool:
        return pipeline is self._pipeline and self._state is ShardState.ACTIVE

    def _load_blocking(self, role: ReplicaRole | None) -> Loaded:
        """On the coordinator's thread: takes the directory, opens log and state; on failure leaves nothing open."""
        loaded = self._directory.open(role)
        self.snapshots.note_newest_snapshot(loaded)
        return loaded

    def _out_of_service(self, error: BaseException, what: str) -> None:
        """FAILED, with the reason said once: to callers, in DescribeCoordinators, a metric and the log."""
        kind = failure_kind(error, free_bytes(self._directory.path))
        cause = damage_behind(error)
        self._problem = f"{what}: {cause}" if isinstance(error, NEEDS_OPERATOR) else f"{what}: {kind}: {cause}"
        self._metrics.coordinator_failures.labels(str(self.coordinator_id), kind).inc()
        log.error("coordinator %d out of service (%s): %s", self.coordinator_id, kind, self._problem)
        self._directory.failed(error)
        self._transition(ShardState.FAILED)

    async def _take_out_of_service(self, error: BaseException) -> None:
        """Answers everything waiting at once (retriable), then closes log and state for the next load."""
        self._out_of_service(error, "failed")
        cause = damage_behind(error)
        await self._end_serving(
            CoordinatorUnavailable(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {self.coordinator_id} failed ({cause}); retry"
            )
        )

    def died(self, error: Exception) -> None:
        """The loop raised: a bug (the supervisor logs it with its traceback)."""
        log.critical("coordinator %d lifecycle died: %s: %s", self.coordinator_id, type(error).__name__, error)
        if self._state is not ShardState.FAILED and self._state is not ShardState.CLOSED:
            self._problem = f"internal error: {error}"
            self._transition(ShardState.FAILED)
        if self._pipeline is not None:
            self._pipeline.fail_queued(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {self.coordinator_id} failed")

    # ------------------------------------------------------------------ close

    def stop(self) -> None:
        """Refuses new work, lets the pipeline drain and ends the loop (close's first half)."""
        self._closing = True
        self._stopping.set()
        if self._follower is not None:
            self._follower.close()
        if self._pipeline is not None:
            self._pipeline.close()
        # The node's calls are drained by now (the server stops first): what followers have not confirmed is
        # answered NOT_COORDINATOR at once. Waiting would gain nothing, and with the followers gone (the last
        # node to stop) the ISR cannot shrink any more, so the wait would last the whole drain timeout.
        self._close_leader("the node is shutting down")

    async def wait_closed(self) -> None:
        """Waits for the loop to end, then closes log and state, marking a clean close (close's second half)."""
        await wait_life_ended(self._workers, self.coordinator_id)
        serving = self._state is ShardState.ACTIVE
        if self._state != ShardState.CLOSED:
            self._transition(ShardState.CLOSED)
        loop = asyncio.get_running_loop()
        closed_cleanly = await loop.run_in_executor(self._executor, self._close_files)
        if serving and closed_cleanly:
            await loop.run_in_executor(self._executor, self._directory.closed_cleanly)

    def release_directory(self) -> None:
        self._directory.release()

    def _close_files(self) -> bool:
        """Closes log and state (on the coordinator's thread); False if either failed to close."""
        loaded, self._loaded = self._loaded, None
        return True if loaded is None else close_loaded(loaded, self.coordinator_id)
