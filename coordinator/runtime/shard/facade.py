"""One coordinator (a shard, leader of one metadata-log partition) as the rest of the node sees it.

Writes go in as typed operations (`submit`); reads go through the read API
below (`read_transaction`, `open_detached_read`, `file_facts`, `file_in_flight`,
`partitions`, `leader_epoch`); nothing outside this package touches the coordinator's
log, state or view. The work is done by its parts: `lifecycle` (load, serve,
reload), `loading`, `pipeline` and `snapshots`; what it tells about itself is in `facts`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import final

import apsw

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.executors import ExecutorFactory, thread_executor
from coordinator.base.metrics import Metrics
from coordinator.base.workers import SupervisionBounds, WorkerSupervisor
from coordinator.config.settings import Settings
from coordinator.machine.state import file_reads
from coordinator.machine.state.detached_read import DetachedRead, DetachedReadClosed
from coordinator.machine.state.integrity import IntegrityReport
from coordinator.machine.view import CoordinatorView, FileFacts
from coordinator.runtime.operation import Operation, RequestT, ResponseT
from coordinator.runtime.ports import TopicRecordsApplied
from coordinator.runtime.replication.follower import NodeFetcher
from coordinator.runtime.replication.leader import LeaderReplication
from coordinator.runtime.replication.link import ClusterLink
from coordinator.runtime.replication.progress import ReplicaProgress
from coordinator.runtime.replication.refusals import refused_epoch_end, refused_fetch
from coordinator.runtime.replication.role import ReplicaRole, RoleKind
from coordinator.runtime.shard.append_ticks import AppendTicks
from coordinator.runtime.shard.availability import ShardState
from coordinator.runtime.shard.facts import (
    DiskUsage,
    FileInFlight,
    PartitionName,
    ShardStatistics,
    file_bytes,
    shard_statistics,
)
from coordinator.runtime.shard.lifecycle import Lifecycle
from coordinator.runtime.shard.loading import Loaded
from coordinator.runtime.shard.pipeline import Pipeline
from coordinator.runtime.shard.scrubber import Scrubber, ScrubReport, ScrubStatistics
from coordinator.runtime.shard.snapshots import SnapshotTaken
from coordinator.runtime.worker_specs import SCRUB, SNAPSHOTS
from protos import internal_pb2 as internal
from snapshot.snapshots import SnapshotCheck, snapshot_directory, snapshots_bytes

log = logging.getLogger(__name__)


@final
class CoordinatorShard:
    def __init__(
        self,
        coordinator_id: int,
        directory: Path,
        settings: Settings,
        clock: Clock,
        metrics: Metrics | None = None,
        on_state_change: Callable[[CoordinatorShard], None] | None = None,
        on_topic_records: TopicRecordsApplied | None = None,
        role: ReplicaRole | None = None,
        link: ClusterLink | None = None,
        ticks: AppendTicks | None = None,
        executors: ExecutorFactory = thread_executor,
        fetcher: NodeFetcher | None = None,
        workers: WorkerSupervisor | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        # The node's supervisor runs the coordinator's workers (its life loop, snapshots, scrub, ISR ticker); a
        # coordinator made alone (a test, a tool) has one of its own, open from its load to its close.
        self._own_workers = workers is None
        self._workers = workers or WorkerSupervisor(clock, SupervisionBounds.of(settings), _uncounted, _no_health)
        self.directory = directory
        self._settings = settings
        self._on_state_change = on_state_change
        self._executor = executors(f"coordinator-{coordinator_id}")
        self._lifecycle = Lifecycle(
            coordinator_id,
            directory,
            settings,
            clock,
            metrics or Metrics(),
            self._executor,
            self._state_changed,
            on_topic_records,
            self._workers,
            role,
            link,
            ticks,
            executors,
            fetcher,
        )
        self._snapshots = self._lifecycle.snapshots
        self._scrubber = Scrubber(
            coordinator_id,
            directory,
            settings,
            clock,
            executors(f"scrub-{coordinator_id}"),
            self._lifecycle,
            self._snapshots.files_lock,
            self._snapshots.request_now,
            metrics,
        )

    def _state_changed(self) -> None:
        if self._on_state_change is not None:
            self._on_state_change(self)

    # ------------------------------------------------------------------ lifecycle

    @property
    def state(self) -> ShardState:
        return self._lifecycle.state

    @property
    def damaged(self) -> bool:
        """Damaged, with no healthy replica to repair from: out of service (DescribeCoordinators' state DAMAGED)."""
        return self._lifecycle.damaged

    @property
    def problem(self) -> str:
        """Why the coordinator is not serving; empty while it serves."""
        return self._lifecycle.problem

    async def load(self) -> None:
        """Loads the coordinator and keeps it serving; raises the first attempt's failure.

        After a failure the coordinator goes on by itself: it loads again with bounded backoff
        (unless only an operator can settle it), and after a failure while serving, it answers
        what was waiting and loads again.
        """
        if self._own_workers:
            await self._workers.open()
        first_attempt = self._lifecycle.start()
        scheduler, scrubber = self._snapshots, self._scrubber
        self._workers.start(SNAPSHOTS, lambda: scheduler, self.coordinator_id)
        if scrubber.background:
            self._workers.start(SCRUB, lambda: scrubber, self.coordinator_id)
        failure = await first_attempt
        if failure is not None:
            raise failure

    async def close(self) -> None:
        """Finishes every queued and in-flight operation, then closes the log and state."""
        self._lifecycle.stop()
        # A scrub step or a snapshot copy in progress ends first: neither reads files the close is closing.
        await self._workers.stop_waiting(SCRUB.name, self.coordinator_id)
        await self._workers.stop_waiting(SNAPSHOTS.name, self.coordinator_id)
        await self._lifecycle.wait_closed()
        self._executor.shutdown(wait=True)
        self._snapshots.shutdown()
        self._scrubber.shutdown()
        self._lifecycle.release_directory()
        if self._own_workers:
            await self._workers.close()

    def require_active(self) -> None:
        """Raises CoordinatorUnavailable with the code a caller should see in this state."""
        self._lifecycle.require_active()

    def require_serving(self) -> None:
        """As require_active, but a new leader still applying the log it was elected with passes (writes)."""
        self._lifecycle.require_serving()

    def require_leader(self) -> None:
        """As require_active, and NOT_COORDINATOR where this node only follows the coordinator."""
        self._lifecycle.require_leader()

    @property
    def role(self) -> ReplicaRole | None:
        """What etcd says this node is for the coordinator; None alone (the leader, factor 1)."""
        return self._lifecycle.role

    @property
    def leads(self) -> bool:
        """Whether this node leads the coordinator (always, alone)."""
        role = self._lifecycle.role
        return role is None or (role.kind is RoleKind.LEADER and self._lifecycle.leader is not None)

    @property
    def served_role(self) -> str:
        """LEADER or FOLLOWER as this replica serves now (etcd's role may be ahead while it reloads), or why not."""
        if self.leads:
            return RoleKind.LEADER.value
        if self._lifecycle.follower is not None:
            return RoleKind.FOLLOWER.value
        role = self._lifecycle.role
        return role.kind.value if role is not None and role.kind is not RoleKind.LEADER else "LOADING"

    def set_role(self, role: ReplicaRole) -> None:
        self._lifecycle.set_role(role)

    def report_damage(self, error: Exception) -> None:
        """A read met a damaged state: the coordinator goes out of service, sets the state aside and rebuilds it."""
        self._lifecycle.report_damage(error)

    # ------------------------------------------------------------------ writes

    def has_room(self) -> bool:
        pipeline = self._lifecycle.pipeline
        return pipeline is None or pipeline.has_room()

    def submit(self, operation: Operation[RequestT, ResponseT], may_linger: bool = False) -> asyncio.Future[ResponseT]:
        """Queues an operation; its future resolves with the check's response once applied.

        `may_linger`: the caller saw other operations under way, so the group may wait for more
        (`append.linger.ms`); a lone caller's operation is written at once.
        """
        self.require_leader()
        return self._serving_pipeline().submit(operation, may_linger)

    async def prefetch(self, read: Callable[[apsw.Connection], object]) -> None:
        """`read` on a connection and thread of its own, where this node leads the coordinator, its answer dropped:
        the pages that a read or an operation on the loop is about to read, brought into the OS cache first (as
        TigerBeetle prefetches before it commits), so that the loop does not wait for the disk. A hint only: a
        coordinator not serving, a read that fails or meets damage is left to the read that follows, which answers for
        it (a damaged state is then taken out of service there)."""
        if not self.leads:
            return
        try:
            reads = self.open_detached_read(one_snapshot=False)
        except CoordinatorUnavailable:
            return
        try:
            await reads.read(read)
        except (DetachedReadClosed, apsw.Error) as error:
            log.debug(
                "coordinator %d: a prefetch failed (the read after it reads for itself): %s", self.coordinator_id, error
            )
        finally:
            reads.close()

    async def wait_applied(self, offset: int) -> None:
        """Returns once SQLite holds every record below `offset` (a strict read's barrier)."""
        self._lifecycle.require_serving()  # a new leader's unapplied log is below `offset`: waited for, not refused
        if self._lifecycle.follower is not None:
            return  # a follower serves what it applied: everything below its high watermark
        await self._serving_pipeline().wait_applied(offset)

    @property
    def speculative_end_offset(self) -> int:
        """The log end counting records checked but not yet written: what a strict read waits for."""
        follower = self._lifecycle.follower
        if follower is not None:
            return follower.statistics().applied_offset
        pipeline = self._lifecycle.pipeline
        return 0 if pipeline is None else pipeline.speculative_end_offset

    def _view(self) -> CoordinatorView:
        follower = self._lifecycle.follower
        return follower.view if follower is not None else self._serving_pipeline().view

    def _serving_pipeline(self) -> Pipeline:
        pipeline = self._lifecycle.pipeline
        assert pipeline is not None  # ACTIVE: loaded, with its pipeline
        return pipeline

    # ------------------------------------------------------------------ reads (callers check require_active first)

    def read_transaction(self) -> AbstractContextManager[apsw.Connection]:
        """A read transaction on the committed state: every query inside sees the same state."""
        return self._serving_loaded().store.read_transaction()

    def open_detached_read(self, one_snapshot: bool = True) -> DetachedRead:
        """A read transaction of its own that may stay open across awaits (a stream's pages); close it when done.

        Its snapshot is the committed state at its first read; with `one_snapshot=False` each read is a transaction
        of its own, run on the same thread (a worker's reads, off the loop). It ends when the coordinator's files
        close (a reload, a stop): its next read then raises DetachedReadClosed.
        """
        return self._serving_loaded().store.detached_read(one_snapshot)

    def file_facts(self, object_key: str) -> FileFacts | None:
        """The committed file with this key as DescribeFiles sees it: batches of deleted topics awaiting their
        purge are not live (file_reads.described_file_facts), read in one read transaction."""
        with self.read_transaction() as db:
            return file_reads.described_file_facts(db, object_key)

    def file_in_flight(self, object_key: str) -> FileInFlight | None:
        """The file with this key as records not yet applied, or a commit still queued, will add it; None if none.

        On the leader: a commit from the moment it is queued (checked, written, awaiting the in-sync replicas)
        until it is applied; a failure that drops them (the pipeline's, a new leadership) takes the coordinator
        out of service until it has loaded again from its log. On a follower: the records it fetched and has not
        applied; what its leader holds beyond them, it cannot know.
        """
        view = self._view()
        if view.file_pending(object_key):
            if view.pending_replacement(object_key) is not None:  # a merged object (DESIGN §4c): live until applied
                return FileInFlight(None, queued=True)
            return FileInFlight(view.pending_commit(object_key))
        pipeline = self._lifecycle.pipeline
        if self._lifecycle.follower is None and pipeline is not None and pipeline.file_queued(object_key):
            return FileInFlight(None, queued=True)
        return None

    def partitions(self) -> list[PartitionName]:
        """Every partition of this coordinator, creations not yet applied included."""
        view = self._view()
        return [PartitionName(p.topic_id, p.topic_name, p.partition) for p in view.partitions()]

    def frozen_partitions(self) -> set[tuple[bytes, int]]:
        """(topic id, partition) of the partitions here frozen by a move to another coordinator (design §5a)."""
        return {(p.topic_id, p.partition) for p in self._view().partitions() if p.moving_to >= 0}

    def partition_move(self, topic_id: bytes, partition: int) -> tuple[int, int, bool] | None:
        """A partition here: (the coordinator it moves to, the move's id, whether it is still catching up), (-1, -1,
        False) when not moving; None when the partition is not here (design §5a)."""
        found = self._view().partition(topic_id, partition)
        return None if found is None else (found.moving_to, found.move_id, found.catching_up)

    def adoption_progress(self, from_coordinator: int, move_id: int) -> tuple[int, int, bool, bool]:
        """A move this coordinator is the target of (design §5a): (chunks staged, where the next chunk's batches
        start or -1, adopted, abandoned), records not yet applied included."""
        view = self._view()
        move = (from_coordinator, move_id)
        if move in view.adopted_moves or move in view.abandoned_moves:
            return 0, -1, move in view.adopted_moves, move in view.abandoned_moves
        staged = view.staged_moves.get(move)
        return (0, -1, False, False) if staged is None else (staged.chunks, staged.next_offset, False, False)

    def topic_configs(self, topic_id: bytes) -> dict[str, str]:
        """The configurations set on a topic here (empty: all at their defaults), changes not yet applied included."""
        return dict(self._view().topic_configs(topic_id))

    @property
    def leader_epoch(self) -> int:
        """The leader epoch this coordinator serves in; -1 while it is not serving."""
        role = self._lifecycle.role
        if role is not None:
            return role.leader_epoch if self.state is ShardState.ACTIVE else -1
        pipeline = self._lifecycle.pipeline
        return pipeline.view.leader_epoch if self.state is ShardState.ACTIVE and pipeline is not None else -1

    def _serving_loaded(self) -> Loaded:
        self.require_active()
        loaded = self._lifecycle.loaded
        assert loaded is not None  # ACTIVE: loaded
        return loaded

    # ------------------------------------------------------------------ statistics and snapshots

    def statistics(self) -> ShardStatistics:
        return shard_statistics(
            self.coordinator_id, self._lifecycle, self._snapshots.last_snapshot, self._settings,
            "DAMAGED" if self.damaged else self.state.value, self.leader_epoch,
        )  # fmt: skip

    def disk_usage(self) -> DiskUsage:
        """What the replica's files take now (a few stat calls); the coordinator must be serving."""
        loaded = self._serving_loaded()
        state = loaded.store.path
        return DiskUsage(
            state_bytes=file_bytes(state) + file_bytes(state.with_name(state.name + "-wal")),
            log_bytes=loaded.metadata_log.size_bytes(),
            snapshot_bytes=snapshots_bytes(snapshot_directory(self.directory)),
        )

    def replica_progress(self) -> list[ReplicaProgress]:
        """Every replica's log end, lag and fetch ages as this leader sees them; empty where it does not lead."""
        leader = self._lifecycle.leader
        return leader.progress() if leader is not None and self.state is ShardState.ACTIVE else []

    async def create_snapshot(self) -> SnapshotTaken:
        """Snapshots the applied state now, then prunes the log below the snapshots kept."""
        return await self._snapshots.create_snapshot()

    def request_snapshot(self) -> None:
        """A snapshot is wanted at once (a follower needs one and none here verifies); taken in the background."""
        self._snapshots.request_now()

    async def check_state(self) -> IntegrityReport:
        """Checks the state file now; a damaged one takes the coordinator out of service to rebuild it."""
        return await self._snapshots.check_state()

    async def scrub(self) -> ScrubReport:
        """One scrub pass now (paced as the background ones), its findings handed on as a read meeting them would."""
        return await self._scrubber.run_pass()

    def scrub_statistics(self) -> ScrubStatistics:
        return self._scrubber.statistics()

    async def list_snapshots(self, verify: bool) -> list[SnapshotCheck]:
        """The coordinator's snapshots, newest first; with `verify`, each read and checked."""
        return await self._snapshots.list_snapshots(verify)

    # ------------------------------------------------------------------ replication (DESIGN §6a)

    async def fetch_log(self, request: internal.FetchLogRequest) -> internal.FetchLogResponse:
        """A follower's fetch, answered by this node's leader of the coordinator."""
        leader = self._lifecycle.leader
        if leader is None or self.state is not ShardState.ACTIVE:
            return refused_fetch(ErrorCode.NOT_LEADER_OR_FOLLOWER, self._not_leader_here())
        return await leader.fetch(request)

    def replication_leader(self) -> LeaderReplication | str:
        """This node's leader of the coordinator, for followers' fetches; else why there is none here."""
        leader = self._lifecycle.leader
        if leader is None or self.state is not ShardState.ACTIVE:
            return self._not_leader_here()
        return leader

    def _not_leader_here(self) -> str:
        role = self._lifecycle.role
        who = f"node {role.leader_node_id} (epoch {role.leader_epoch})" if role is not None else "unknown"
        return f"this node does not lead coordinator {self.coordinator_id} now; its leader is {who}"

    def offset_for_leader_epoch(
        self, request: internal.OffsetForLeaderEpochRequest
    ) -> internal.OffsetForLeaderEpochResponse:
        """Where the largest epoch <= the one asked ends in this leader's log (KIP-101)."""
        leader = self._lifecycle.leader
        loaded = self._lifecycle.loaded
        if leader is None or loaded is None or self.state is not ShardState.ACTIVE:
            return refused_epoch_end(ErrorCode.NOT_LEADER_OR_FOLLOWER, self._not_leader_here())
        if request.current_leader_epoch != leader.leader_epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH
            if request.current_leader_epoch > leader.leader_epoch:
                code = ErrorCode.UNKNOWN_LEADER_EPOCH
            return refused_epoch_end(
                code, f"leader epoch {request.current_leader_epoch}, the leader's is {leader.leader_epoch}"
            )
        epoch, end = loaded.epoch_cache.end_offset_for(request.leader_epoch, leader.log_end_offset)
        return internal.OffsetForLeaderEpochResponse(error_code=ErrorCode.NONE, leader_epoch=epoch, end_offset=end)


def _uncounted(name: str, coordinator_id: int) -> None:
    """A coordinator made alone counts no worker failure in metrics (the supervisor still logs each)."""


def _no_health() -> None:
    """A coordinator made alone has no health to tell."""
