"""One coordinator (a shard, leader of one metadata-log partition) and its write pipeline.

DESIGN §3, in one ordered pipeline on the event loop:

1. check each queued operation against the speculative view (pure);
2. replay its records into the view and frame them (one frame per operation);
3. while one group is being written and fsynced on the coordinator's own
   thread, the next operations are checked and join the following group
   (group commit: one fdatasync serves every operation in it);
4. once durable (the high watermark, with one replica), the group's records
   are applied to SQLite in one transaction carrying the applied offset;
5. only then are the group's callers answered, in order.

An operation with no records (a rejection, a duplicate) still waits for the
group it was checked in: its answer may depend on pending records (I2).
A failed write or apply answers every operation not yet answered at once
(COORDINATOR_NOT_AVAILABLE, retriable), takes the coordinator out of service
and loads it again from SQLite plus the log; a load that fails for a reason
that may pass (a full disk, an I/O error) is tried again with bounded backoff,
so the coordinator serves again by itself once the cause is gone. Damage that
only an operator can settle (a log damaged inside, a state ahead of its log)
keeps it out of service, saying where and what.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
from snapshot.files import DirectoryLock
from snapshot.prune import PruneResult, delete_snapshots, prune_log
from snapshot.snapshots import (
    SnapshotCheck,
    SnapshotManifest,
    check_snapshots,
    list_snapshots,
    remove_incomplete,
    snapshot_directory,
    take_snapshot,
)

from coordinator import records
from coordinator.clock import Clock
from coordinator.errors import CoordinatorUnavailable, ErrorCode, Overloaded
from coordinator.invariants import InvariantViolation, check_invariant
from coordinator.log.frame import encode_frame
from coordinator.log.segments import CorruptLogError, LogPosition, MetadataLog
from coordinator.metrics import Metrics
from coordinator.result import Result
from coordinator.settings import Settings, property_name
from coordinator.state.integrity import (
    IntegrityReport,
    check_integrity,
    leave_clean_close_mark,
    take_clean_close_mark,
)
from coordinator.state.opening import LoadFailed, StatePlace, open_state, replace_state
from coordinator.state.reads import StateDamaged
from coordinator.state.replay import replay_log
from coordinator.state.store import AppliedFrame, StateCorrupt, StateStore
from coordinator.view import CoordinatorView

log = logging.getLogger(__name__)

Check = Callable[[CoordinatorView, int], Result[Any]]  # (view, now_ms) -> Result


class ShardState(enum.Enum):
    LOADING = "LOADING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    CLOSED = "CLOSED"


_TRANSITIONS = {
    ShardState.LOADING: {ShardState.ACTIVE, ShardState.FAILED, ShardState.CLOSED},
    ShardState.ACTIVE: {ShardState.FAILED, ShardState.CLOSED},
    ShardState.FAILED: {ShardState.LOADING, ShardState.CLOSED},
    ShardState.CLOSED: set(),
}


@dataclass(slots=True)
class _Operation:
    check: Check
    future: asyncio.Future[Any]
    may_linger: bool
    result: Result[Any] | None = None


@dataclass(slots=True)
class _Group:
    operations: list[_Operation] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    applied: list[AppliedFrame] = field(default_factory=list)
    end_offset: int = 0
    opened_at: float = -1.0  # loop time the linger started, -1 before
    may_linger: bool = False  # an operation in it came while other callers' operations were under way


@dataclass(frozen=True, slots=True)
class ShardStatistics:
    coordinator_id: int
    state: str
    leader_epoch: int
    queued_operations: int
    queue_max_operations: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    applied_offset: int
    log_flush_count: int
    log_append_count: int
    last_snapshot_end_offset: int = -1
    last_snapshot_created_at_ms: int = -1  # -1 when the coordinator has no snapshot
    problem: str = ""  # why it is not serving (empty while ACTIVE)


@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    manifest: SnapshotManifest
    pruned: PruneResult


# Failures that loading again cannot cure: the coordinator stays out of service until an operator acts.
NEEDS_OPERATOR = (LoadFailed, CorruptLogError)


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def failure_kind(error: BaseException) -> str:
    """A short name for why a coordinator went out of service (a metric label)."""
    if isinstance(error, CorruptLogError):
        return "log_damaged"
    if isinstance(error, LoadFailed):
        return "needs_operator"
    if isinstance(error, apsw.FullError) or (
        isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)
    ):
        return "disk_full"
    if isinstance(error, apsw.CorruptError | apsw.NotADBError | StateCorrupt | StateDamaged):
        return "state_damaged"
    if isinstance(error, OSError | apsw.IOError | apsw.CantOpenError | apsw.ReadOnlyError):
        return "io_error"
    if isinstance(error, InvariantViolation):
        return "invariant"
    return "error"


class CoordinatorShard:
    def __init__(
        self,
        coordinator_id: int,
        directory: Path,
        settings: Settings,
        clock: Clock,
        metrics: Metrics | None = None,
        on_state_change: Callable[[CoordinatorShard], None] | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        metrics = metrics or Metrics()
        self._group_operations = metrics.group_operations.labels(str(coordinator_id))
        self._failures = metrics.coordinator_failures
        self._on_state_change = on_state_change
        self.directory = directory
        self._settings = settings
        self._clock = clock
        self._state = ShardState.LOADING
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"coordinator-{coordinator_id}")
        self._queue: asyncio.Queue[_Operation] = asyncio.Queue(maxsize=settings.queue_max_operations)
        self._wakeup = asyncio.Event()
        self._group = _Group()
        self._inflight: asyncio.Future[None] | None = None
        self._inflight_group = _Group()
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closing = False
        self._linger_timer: asyncio.TimerHandle | None = None
        self._lifecycle: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()  # set by close: ends a wait between load attempts
        self._problem = ""  # why the coordinator is not serving, for callers, DescribeCoordinators and the log
        self._reported_damage: Exception | None = None  # a reader met a damaged state: fail and rebuild
        self._rebuild_state_reason = ""  # the next load sets the state aside and rebuilds it, for this reason
        self._verify_state = settings.state_verify_on_load == "always"  # the next load checks the state first
        self._store: StateStore | None = None
        self._log: MetadataLog | None = None
        self._view: CoordinatorView | None = None
        self._next_offset = 0  # speculative log end: records checked, maybe not yet written
        self._high_watermark = 0
        self._append_count = 0
        self._flush_count_before = 0
        # Snapshots (DESIGN §6): copied on a thread of their own so that neither the event loop nor the
        # log writer waits for them; the lock keeps a copy and a reload of the state from overlapping.
        self._snapshots = snapshot_directory(directory)
        self._snapshot_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"snapshot-{coordinator_id}")
        self._snapshot_lock = asyncio.Lock()
        self._snapshot_wakeup = asyncio.Event()
        self._snapshot_worker: asyncio.Task[None] | None = None
        self._last_snapshot: SnapshotManifest | None = None
        self._last_snapshot_at_ms = 0
        self._log_bytes_at_snapshot = 0  # the log's appended_bytes when the last snapshot was taken
        self._directory_lock: DirectoryLock | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def state(self) -> ShardState:
        return self._state

    def _transition(self, target: ShardState) -> None:
        check_invariant(
            target in _TRANSITIONS[self._state], f"coordinator {self.coordinator_id}: {self._state} -> {target}"
        )
        self._state = target
        if self._on_state_change is not None:
            self._on_state_change(self)

    async def load(self) -> None:
        """Loads the coordinator and keeps it serving; raises the first attempt's failure.

        After a failure the coordinator goes on by itself: it loads again with bounded backoff
        (unless only an operator can settle it), and after a failure while serving, it answers
        what was waiting and loads again.
        """
        first_attempt: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self._lifecycle = asyncio.create_task(self._live(first_attempt), name=f"coordinator-{self.coordinator_id}")
        self._lifecycle.add_done_callback(self._lifecycle_ended)
        self._snapshot_worker = asyncio.create_task(
            self._run_snapshots(), name=f"coordinator-{self.coordinator_id}-snapshots"
        )
        failure = await first_attempt
        if failure is not None:
            raise failure

    async def _live(self, first_attempt: asyncio.Future[BaseException | None]) -> None:
        """Load, serve, and after a failure load again, until closed or an operator is needed."""
        backoff_ms = self._settings.reload_backoff_ms
        while not self._closing:
            failure = await self._attempt_load()
            if not first_attempt.done():
                first_attempt.set_result(failure)
            if failure is None:
                backoff_ms = self._settings.reload_backoff_ms
                failure = await self._run()
                if failure is None:
                    return  # closing
                await self._take_out_of_service(failure)
                continue  # the first load after a failure while serving is at once
            if isinstance(failure, NEEDS_OPERATOR):
                return
            self._problem = f"{self._problem}; loading again in {backoff_ms} ms"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, self._settings.reload_backoff_max_ms)
        if not first_attempt.done():
            first_attempt.set_result(CoordinatorUnavailable(ErrorCode.NOT_COORDINATOR, "closed while loading"))

    async def _attempt_load(self) -> BaseException | None:
        """One load: ACTIVE and None, or FAILED (nothing left open) and the reason."""
        if self._state is not ShardState.LOADING:
            self._transition(ShardState.LOADING)
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            async with self._snapshot_lock:  # a snapshot copy never reads a state being reopened or restored
                replayed = await loop.run_in_executor(self._executor, self._load_blocking)
        except Exception as error:
            self._out_of_service(error, "cannot load")
            return error
        self._problem = ""
        self._transition(ShardState.ACTIVE)
        self._wakeup.set()
        log.info(
            "coordinator %d loaded in %.2fs: replayed %d log batches, log end %d, leader epoch %d",
            self.coordinator_id, time.monotonic() - started, replayed, self._next_offset, self.view.leader_epoch,
        )  # fmt: skip
        return None

    def _out_of_service(self, error: BaseException, what: str) -> None:
        """FAILED, with the reason said once: to callers, in DescribeCoordinators, a metric and the log."""
        kind = failure_kind(error)
        self._problem = f"{what}: {error}" if isinstance(error, NEEDS_OPERATOR) else f"{what}: {kind}: {error}"
        self._failures.labels(str(self.coordinator_id), kind).inc()
        log.error("coordinator %d out of service (%s): %s", self.coordinator_id, kind, self._problem)
        if isinstance(error, apsw.CorruptError | apsw.NotADBError | StateDamaged):
            self._rebuild_state_reason = f"{type(error).__name__}: {error}"
        if self._settings.state_verify_on_load != "never":
            self._verify_state = True  # whatever failed may have left the state damaged
        self._transition(ShardState.FAILED)

    def _lifecycle_ended(self, task: asyncio.Task[None]) -> None:
        """The lifecycle ends on close or when an operator is needed; anything else is a bug, reported loudly."""
        if task.cancelled() or task.exception() is None:
            return
        log.critical("coordinator %d lifecycle died", self.coordinator_id, exc_info=task.exception())
        if self._state is not ShardState.FAILED and self._state is not ShardState.CLOSED:
            self._problem = f"internal error: {task.exception()}"
            self._transition(ShardState.FAILED)
        self._fail_queued(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {self.coordinator_id} failed")

    def _load_blocking(self) -> int:
        """Opens log and state, replays, starts a leader epoch; on failure leaves nothing open."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._directory_lock is None:
            self._directory_lock = DirectoryLock(self.directory)
        if not take_clean_close_mark(self.directory) and self._settings.state_verify_on_load != "never":
            self._verify_state = True  # a crash, or a state this node did not close: it may be damaged
        metadata_log = MetadataLog(self.directory / "log", self._settings.log_segment_bytes)
        store: StateStore | None = None
        try:
            position = metadata_log.position()
            for leftover in remove_incomplete(self._snapshots):
                log.warning(
                    "coordinator %d: removed %s, left by an interrupted snapshot", self.coordinator_id, leftover
                )
            store = open_state(self._state_place(), position, self._verify_state, self._rebuild_state_reason)
            try:
                replayed = self._replay(store, metadata_log, position)
                view = store.load_view()
            except apsw.CorruptError as error:  # SQLite finds damage only when a read touches it
                store.close()
                store = None
                store = replace_state(self._state_place(), f"{self.directory / 'state.sqlite'}: {error}", position)
                replayed = self._replay(store, metadata_log, position)
                view = store.load_view()
            epoch = max(view.leader_epoch, position.last_epoch) + 1
            change = [records.leader_change(epoch, self._settings.node_id)]
            end = metadata_log.end_offset + 1
            frame = encode_frame(metadata_log.end_offset, epoch, 1, records.encode_batch(change))
            metadata_log.append(frame, end, epoch)
            store.apply([(end, change)])
            view.replay(change[0], end)
            check_invariant(store.applied_offset == metadata_log.end_offset, "loaded state must equal the log end")
        except BaseException:
            metadata_log.close()
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()
            raise
        self._verify_state = self._settings.state_verify_on_load == "always"
        self._rebuild_state_reason = ""
        self._store, self._log, self._view = store, metadata_log, view
        self._next_offset = self._high_watermark = end
        self._flush_count_before = metadata_log.flush_count
        self._note_newest_snapshot(position)
        return replayed

    def _replay(self, store: StateStore, metadata_log: MetadataLog, position: LogPosition) -> int:
        if store.applied_offset > position.end_offset:
            raise LoadFailed(
                f"coordinator {self.coordinator_id}: SQLite state is applied to {store.applied_offset}, past the log "
                f"end {position.end_offset}: the log lost acknowledged records; restore it or a snapshot"
            )
        return replay_log(store, metadata_log, self._settings.replay_batch_operations)

    def _state_place(self) -> StatePlace:
        check_restored = self._settings.state_verify_on_load != "never"
        return StatePlace(self.coordinator_id, self.directory, self._settings.state_cache_bytes, check_restored)

    def _note_newest_snapshot(self, position: LogPosition) -> None:
        """Starts the snapshot triggers from the newest snapshot on disk, counting the log tail after it."""
        newest = next(iter(list_snapshots(self._snapshots)), None)
        self._last_snapshot = newest
        self._last_snapshot_at_ms = newest.created_at_ms if newest else self._clock.now_ms()
        end = newest.snapshot_id.end_offset if newest else position.start_offset
        assert self._log is not None
        self._log_bytes_at_snapshot = self._log.appended_bytes - self._log.bytes_after(end)

    async def close(self) -> None:
        """Finishes every queued and in-flight operation, then closes the log and state."""
        self._closing = True
        self._stopping.set()
        self._wakeup.set()
        self._snapshot_wakeup.set()
        if self._snapshot_worker is not None:
            await self._snapshot_worker
        if self._lifecycle is not None:
            await asyncio.wait([self._lifecycle])  # its failure, if any, was reported by _lifecycle_ended
        serving = self._state is ShardState.ACTIVE
        if self._state != ShardState.CLOSED:
            self._transition(ShardState.CLOSED)
        loop = asyncio.get_running_loop()
        closed_cleanly = await loop.run_in_executor(self._executor, self._close_files)
        if serving and closed_cleanly:
            await loop.run_in_executor(self._executor, leave_clean_close_mark, self.directory)
        self._executor.shutdown(wait=True)
        self._snapshot_executor.shutdown(wait=True)
        if self._directory_lock is not None:
            self._directory_lock.release()

    def _close_files(self) -> bool:
        """Closes log and state (on the coordinator's thread); False if either failed to close."""
        cleanly = True
        for closeable in (self._log, self._store):
            if closeable is None:
                continue
            try:
                closeable.close()
            except Exception as error:  # closing after a failure may fail the same way: nothing more to do
                cleanly = False
                log.warning(
                    "coordinator %d: closing %s failed: %s", self.coordinator_id, type(closeable).__name__, error
                )
        self._log = self._store = None
        return cleanly

    # ------------------------------------------------------------------ facts

    def require_active(self) -> None:
        """Raises CoordinatorUnavailable with the code a caller should see in this state."""
        if self._state is ShardState.ACTIVE and not self._closing:
            return
        if self._closing or self._state is ShardState.CLOSED:
            raise CoordinatorUnavailable(ErrorCode.NOT_COORDINATOR, f"coordinator {self.coordinator_id} is closing")
        if self._state is ShardState.LOADING:
            after = f" after a failure ({self._problem})" if self._problem else ""
            raise CoordinatorUnavailable(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"coordinator {self.coordinator_id} is loading{after}"
            )
        raise CoordinatorUnavailable(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {self.coordinator_id} is out of service: {self._problem}"
        )

    @property
    def problem(self) -> str:
        """Why the coordinator is not serving; empty while it serves."""
        return self._problem

    def report_damage(self, error: Exception) -> None:
        """A read met a damaged state: the coordinator goes out of service, sets the state aside and rebuilds it."""
        if self._state is ShardState.ACTIVE and self._reported_damage is None:
            log.error("coordinator %d: a read met damage in its state: %s", self.coordinator_id, error)
            self._reported_damage = error
            self._wakeup.set()

    @property
    def store(self) -> StateStore:
        """The committed state for reads; callers check `require_active` first."""
        assert self._store is not None
        return self._store

    @property
    def view(self) -> CoordinatorView:
        assert self._view is not None
        return self._view

    @property
    def speculative_end_offset(self) -> int:
        return self._next_offset

    def has_room(self) -> bool:
        return not self._queue.full()

    def statistics(self) -> ShardStatistics:
        log_position = self._log.position() if self._log else None
        return ShardStatistics(
            coordinator_id=self.coordinator_id,
            state=self._state.value,
            leader_epoch=self._view.leader_epoch if self._view else -1,
            queued_operations=self._queue.qsize(),
            queue_max_operations=self._settings.queue_max_operations,
            log_start_offset=log_position.start_offset if log_position else -1,
            log_end_offset=self._next_offset,
            high_watermark=self._high_watermark,
            applied_offset=self._store.applied_offset if self._store else -1,
            log_flush_count=(self._log.flush_count - self._flush_count_before) if self._log else 0,
            log_append_count=self._append_count,
            last_snapshot_end_offset=self._last_snapshot.snapshot_id.end_offset if self._last_snapshot else -1,
            last_snapshot_created_at_ms=self._last_snapshot.created_at_ms if self._last_snapshot else -1,
            problem=self._problem,
        )

    # ------------------------------------------------------------------ submitting

    def submit(self, check: Check, may_linger: bool = False) -> asyncio.Future[Any]:
        """Queues an operation; its future resolves with the check's response once applied.

        `may_linger`: the caller saw other operations under way, so the group may wait for more
        (`append.linger.ms`); a lone caller's operation is written at once.
        """
        self.require_active()
        if self._queue.full():
            raise Overloaded(
                f"coordinator {self.coordinator_id} has {self._queue.qsize()} operations queued "
                f"({property_name('queue_max_operations')}); retry with backoff"
            )
        operation = _Operation(check, asyncio.get_running_loop().create_future(), may_linger)
        self._queue.put_nowait(operation)
        self._wakeup.set()
        return operation.future

    async def wait_applied(self, offset: int) -> None:
        """Returns once SQLite holds every record below `offset` (a strict read's barrier)."""
        self.require_active()
        if self.store.applied_offset >= offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((offset, waiter))
        await waiter

    # ------------------------------------------------------------------ the pipeline

    async def _run(self) -> BaseException | None:
        """The pipeline while ACTIVE: None once closed and drained, else the failure that stopped it."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                if self._reported_damage is not None:
                    damage, self._reported_damage = self._reported_damage, None
                    raise damage
                if self._inflight is not None and self._inflight.done():
                    self._finish_flush()
                if self._inflight is None or self._settings.pipeline_enable:
                    self._check_queued()
                if self._inflight is None and self._group.operations and self._linger_over():
                    self._start_flush()
            except Exception as error:  # a failed write or apply, a broken invariant, a damaged state
                return error
            if self._closing and self._inflight is None and not self._group.operations and self._queue.empty():
                return None

    def _check_queued(self) -> None:
        view = self.view
        group = self._group
        # Without pipelining every operation is its own group: check, append, fsync, apply, answer.
        group_max = self._settings.group_commit_max_operations if self._settings.pipeline_enable else 1
        epoch = view.leader_epoch
        while not self._queue.empty() and len(group.operations) < group_max:
            operation = self._queue.get_nowait()
            if operation.future.done():  # the caller gave up before the check
                continue
            try:
                result = operation.check(view, self._clock.now_ms())
            except InvariantViolation:
                raise
            except Exception as error:  # a check is pure: failing one operation leaves nothing behind
                log.exception("coordinator %d: check failed", self.coordinator_id)
                operation.future.set_exception(error)
                continue
            operation.result = result
            group.operations.append(operation)
            group.may_linger = group.may_linger or operation.may_linger
            if result.records:
                count = len(result.records)
                base_offset = self._next_offset
                end_offset = base_offset + count
                for record in result.records:
                    view.replay(record, end_offset)
                group.frames.append(encode_frame(base_offset, epoch, count, records.encode_batch(result.records)))
                group.applied.append((end_offset, result.records))
                self._next_offset = group.end_offset = end_offset

    def _linger_over(self) -> bool:
        """Whether the open group may be written now: linger elapsed, group full, nothing to wait for, or closing.

        A group waits only when its operations came while other callers' were under way: more are then
        on their way, and one SQLite transaction and one fsync will serve them all. A lone caller's
        operation is written at once, so the linger costs nothing when there is nothing to group.
        """
        linger_s = self._settings.append_linger_ms / 1000
        if linger_s <= 0 or self._closing or not self._group.may_linger or not self._settings.pipeline_enable:
            return True
        if len(self._group.operations) >= self._settings.group_commit_max_operations:
            return True
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._group.opened_at < 0:
            self._group.opened_at = now
        remaining_s = self._group.opened_at + linger_s - now
        if remaining_s <= 0:
            return True
        if self._linger_timer is None:  # re-armed after an early fire: timers may run a hair before time
            self._linger_timer = loop.call_later(remaining_s, self._linger_ended)
        return False

    def _linger_ended(self) -> None:
        self._linger_timer = None
        self._wakeup.set()

    def _start_flush(self) -> None:
        group, self._group = self._group, _Group()
        self._inflight_group = group
        self._group_operations.observe(len(group.operations))
        epoch = self.view.leader_epoch
        self._inflight = asyncio.get_running_loop().run_in_executor(
            self._executor, self._write, b"".join(group.frames), group.end_offset, epoch
        )
        self._inflight.add_done_callback(lambda _: self._wakeup.set())

    def _write(self, frames: bytes, end_offset: int, epoch: int) -> None:
        """On the coordinator's thread, which runs no Python while the loop checks: append + fdatasync."""
        if frames:
            assert self._log is not None
            self._log.append(frames, end_offset, epoch)

    def _finish_flush(self) -> None:
        # The group stays in flight until it is applied: if the write or the apply fails, the failure
        # path answers its callers (a group dropped here would leave them to their request timeout).
        inflight, group = self._inflight, self._inflight_group
        assert inflight is not None
        inflight.result()  # raises the write failure
        if group.applied:
            self._high_watermark = group.end_offset
            if self._snapshot_bytes_due():
                self._snapshot_wakeup.set()
            # Applied here, on the loop, rather than on the writer thread: Python on two threads
            # fights over the GIL and costs more than the SQLite work it would overlap.
            self.store.apply(group.applied)
            self._append_count += len(group.applied)
        self._inflight, self._inflight_group = None, _Group()
        applied_offset = self.store.applied_offset
        check_invariant(
            self._next_offset >= self._high_watermark >= applied_offset,
            f"coordinator {self.coordinator_id}: log end {self._next_offset} >= high watermark "
            f"{self._high_watermark} >= applied {applied_offset} must hold",
        )
        self.view.forget_applied_files(applied_offset)
        for operation in group.operations:
            if not operation.future.done():
                assert operation.result is not None
                operation.future.set_result(operation.result.response)
        if self._applied_waiters:
            still_waiting = []
            for offset, waiter in self._applied_waiters:
                if offset <= applied_offset:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    still_waiting.append((offset, waiter))
            self._applied_waiters = still_waiting

    # ------------------------------------------------------------------ failure

    async def _take_out_of_service(self, error: BaseException) -> None:
        """Answers everything waiting at once (retriable), then closes log and state for the next load.

        An answer given here may be for records that did reach the disk (the write was in flight): a
        broker's retry of such a batch is then answered DUPLICATE with its original offsets (I5).
        """
        self._out_of_service(error, "failed")
        unavailable = CoordinatorUnavailable(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {self.coordinator_id} failed ({error}); retry"
        )
        for operation in (*self._inflight_group.operations, *self._group.operations):
            if not operation.future.done():
                operation.future.set_exception(unavailable)
        for _, waiter in self._applied_waiters:
            if not waiter.done():
                waiter.set_exception(unavailable)
        self._fail_queued(unavailable.error_code, unavailable.message)
        if self._inflight is not None:
            with contextlib.suppress(Exception):  # the failure being handled, or the same write's
                await self._inflight
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self._inflight, self._inflight_group, self._group, self._applied_waiters = None, _Group(), _Group(), []
        loop = asyncio.get_running_loop()
        async with self._snapshot_lock:
            await loop.run_in_executor(self._executor, self._close_files)

    def _fail_queued(self, code: ErrorCode, message: str) -> None:
        while not self._queue.empty():
            operation = self._queue.get_nowait()
            if not operation.future.done():
                operation.future.set_exception(CoordinatorUnavailable(code, message))

    # ------------------------------------------------------------------ snapshots (DESIGN §6)

    def _snapshot_bytes_due(self) -> bool:
        interval = self._settings.snapshot_interval_bytes
        return (
            interval > 0
            and self._log is not None
            and self._log.appended_bytes - self._log_bytes_at_snapshot >= interval
        )

    def _snapshot_time_left_s(self) -> float | None:
        """Seconds until the time trigger, None without one."""
        interval = self._settings.snapshot_interval_ms
        if interval <= 0:
            return None
        return max(0.0, (self._last_snapshot_at_ms + interval - self._clock.now_ms()) / 1000)

    def _snapshot_due(self) -> bool:
        if self._state is not ShardState.ACTIVE or self._store is None:
            return False
        if self._snapshot_bytes_due():
            return True
        changed = (
            self._last_snapshot is None or self._store.applied_offset != self._last_snapshot.snapshot_id.end_offset
        )
        return changed and self._snapshot_time_left_s() == 0

    async def _run_snapshots(self) -> None:
        """Waits for "enough log or time since the last snapshot" or close; a failure is logged and retried."""
        backoff_ms = self._settings.snapshot_retry_backoff_ms
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._snapshot_wakeup.wait(), self._snapshot_time_left_s())
            self._snapshot_wakeup.clear()
            if self._closing or not self._snapshot_due():
                if self._snapshot_time_left_s() == 0:  # nothing applied since: look again one interval later
                    self._last_snapshot_at_ms = self._clock.now_ms()
                continue
            try:
                await self.create_snapshot()
                backoff_ms = self._settings.snapshot_retry_backoff_ms
            except Exception as error:  # best effort: the log still holds everything; try again later
                log.error(
                    "coordinator %d: snapshot failed (%s: %s); retrying in %d ms",
                    self.coordinator_id, type(error).__name__, error, backoff_ms,
                )  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._snapshot_wakeup.wait(), backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, self._settings.snapshot_retry_backoff_max_ms)

    async def create_snapshot(self) -> SnapshotTaken:
        """Snapshots the applied state now (copy on the snapshot thread), then prunes (on the log's thread)."""
        self.require_active()
        loop = asyncio.get_running_loop()
        async with self._snapshot_lock:
            self.require_active()
            assert self._log is not None
            log_bytes_before = self._log.appended_bytes
            now_ms = self._clock.now_ms()
            started = time.monotonic()
            manifest = await loop.run_in_executor(
                self._snapshot_executor,
                take_snapshot,
                self.directory / "state.sqlite",
                self._snapshots,
                self._settings.snapshot_copy_step_pages,
                now_ms,
                self._settings.snapshot_copy_max_bytes_per_second,
            )
            copied_s = time.monotonic() - started
            self._last_snapshot, self._last_snapshot_at_ms = manifest, now_ms
            self._log_bytes_at_snapshot = log_bytes_before
            pruned = await loop.run_in_executor(
                self._executor, prune_log, self._snapshots, self._log, self._settings.snapshot_retained_count
            )
            # Freeing a state-sized file takes tens of milliseconds: on the snapshot thread, not the log's.
            await loop.run_in_executor(
                self._snapshot_executor, delete_snapshots, self._snapshots, pruned.deleted_snapshots
            )
        log.info(
            "coordinator %d: snapshot %s (%d bytes) in %.2fs; log starts at %d (%d segments, %d snapshots pruned)",
            self.coordinator_id, manifest.snapshot_id, manifest.size_bytes, copied_s, pruned.log_start_offset,
            len(pruned.deleted_segments), len(pruned.deleted_snapshots),
        )  # fmt: skip
        return SnapshotTaken(manifest, pruned)

    async def check_state(self) -> IntegrityReport:
        """Checks the state file now (on the snapshot thread); a damaged one takes the coordinator out to rebuild it."""
        self.require_active()
        loop = asyncio.get_running_loop()
        async with self._snapshot_lock:  # never while the state is being reopened or restored
            self.require_active()
            report = await loop.run_in_executor(
                self._snapshot_executor, check_integrity, self.directory / "state.sqlite"
            )
        log.info(
            "coordinator %d: checked state.sqlite (%d MB) on demand in %.2fs: %s",
            self.coordinator_id, report.size_bytes // 1_000_000, report.seconds, report.problem or "ok",
        )  # fmt: skip
        if report.problem is not None:
            self.report_damage(StateDamaged(report.problem))
        return report

    async def list_snapshots(self, verify: bool) -> list[SnapshotCheck]:
        """The coordinator's snapshots, newest first; with `verify`, each read and checked (off the loop)."""
        loop = asyncio.get_running_loop()
        if not verify:
            return [SnapshotCheck(m, None) for m in list_snapshots(self._snapshots)]
        return await loop.run_in_executor(self._snapshot_executor, check_snapshots, self._snapshots)
