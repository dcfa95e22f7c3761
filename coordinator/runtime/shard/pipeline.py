"""One coordinator's write pipeline over one loaded log and state (DESIGN §3), on the event loop:

1. check each queued operation against the speculative view (pure);
2. replay its records into the view and frame them (one frame per operation);
3. while one group is being written on the coordinator's own thread, the next
   operations are checked and join the following group (group commit: one
   append, one fdatasync, serves every operation in it);
4. once the log answers (the high watermark passed the group), its records are
   applied to SQLite in one transaction carrying the applied offset;
5. topic records are reported, then the group's callers are answered, in order.

An operation with no records (a rejection, a duplicate) still waits for the
group it was checked in: its answer may depend on pending records (I2). A
failure (a write, an apply, a broken invariant, reported damage) ends `run`;
the lifecycle then fails what is waiting and loads the coordinator again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, Protocol, final

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, Overloaded
from coordinator.base.invariants import InvariantViolation, check_invariant
from coordinator.base.metrics import Metrics
from coordinator.base.result import Result
from coordinator.config.settings import Settings, property_name
from coordinator.machine import kinds, records
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.operation import Operation, RequestT, ResponseT
from coordinator.runtime.ports import (
    AppliedFrame,
    AppliedState,
    LogAppender,
    Replication,
    TopicRecordsApplied,
    topic_records,
)
from coordinator.runtime.shard.append_ticks import AppendTicks
from coordinator.runtime.shard.loading import is_state_damage
from protos import records_pb2 as rec
from snapshot import fault_points

log = logging.getLogger(__name__)


class _Waiting(Protocol):
    """An operation in the pipeline, whatever its response type."""

    may_linger: bool

    @property
    def object_key(self) -> str | None: ...

    def abandoned(self) -> bool: ...

    def check(self, view: CoordinatorView, now_ms: int) -> list[rec.MetadataRecord]: ...

    def answer(self) -> None: ...

    def fail(self, error: BaseException) -> None: ...


@final
@dataclass(slots=True)
class _Queued(Generic[RequestT, ResponseT]):
    operation: Operation[RequestT, ResponseT]
    future: asyncio.Future[ResponseT]
    may_linger: bool
    result: Result[ResponseT] | None = None

    @property
    def object_key(self) -> str | None:
        return self.operation.object_key

    def abandoned(self) -> bool:
        """The caller gave up (its timeout), or the operation was already answered."""
        return self.future.done()

    def check(self, view: CoordinatorView, now_ms: int) -> list[rec.MetadataRecord]:
        self.result = self.operation.run(view, now_ms)
        return self.result.records

    def answer(self) -> None:
        if not self.future.done():
            assert self.result is not None
            self.future.set_result(self.result.response)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@dataclass(slots=True)
class _Group:
    operations: list[_Waiting] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    applied: list[AppliedFrame] = field(default_factory=list)
    end_offset: int = 0
    tick: int = -1  # the append tick it is written at, once it waits for one
    may_linger: bool = False  # an operation in it came while other callers' operations were under way


@final
@dataclass(frozen=True, slots=True)
class PipelineStatistics:
    queued_operations: int
    log_end_offset: int  # speculative: records checked, maybe not yet written
    high_watermark: int
    applied_offset: int
    log_append_count: int


@final
class Pipeline:
    """Queue, check, group, write, apply, answer; one instance per load of the coordinator."""

    def __init__(
        self,
        coordinator_id: int,
        settings: Settings,
        clock: Clock,
        metrics: Metrics,
        metadata_log: LogAppender,
        state: AppliedState,
        view: CoordinatorView,
        end_offset: int,
        executor: Executor,
        on_flushed: Callable[[], None],
        on_topic_records: TopicRecordsApplied | None,
        replication: Replication | None = None,
        unapplied: Sequence[AppliedFrame] = (),
        ticks: AppendTicks | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._settings = settings
        self._clock = clock
        self._group_operations = metrics.group_operations.labels(str(coordinator_id))
        self._log, self._state, self.view = metadata_log, state, view
        self._executor = executor  # the coordinator's own thread: log writes never block the loop
        self._on_flushed = on_flushed  # after each write: the snapshot trigger looks at the log's growth
        self._on_topic_records = on_topic_records
        self._replication = replication  # None alone: a durable local write is the high watermark
        self._queue: asyncio.Queue[_Waiting] = asyncio.Queue(maxsize=settings.queue_max_operations)
        # The object keys the queued operations may record, counted until each is taken from the queue (checked,
        # its records then in the view, or dropped): DescribeFiles and KnownFiles count them known (DESIGN §5).
        self._queued_keys: Counter[str] = Counter()
        self._wakeup = asyncio.Event()
        self._wakeup.set()  # the first pass finds whatever is queued
        self._group = _Group()
        self._inflight: asyncio.Future[CoordinatorUnavailable | None] | None = None
        self._inflight_group = _Group()
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # The process's ticks: a commit's parts on several coordinators are written together.
        self._ticks = ticks or AppendTicks(settings.append_linger_ms)
        self._closing = False
        self._reported_damage: Exception | None = None
        self._next_offset = end_offset  # speculative log end: records checked, maybe not yet written
        self._high_watermark = end_offset
        self._append_count = 0
        # A new leader answers no read before it has applied the log tail it was elected with: its state is behind
        # what earlier leaders acknowledged (after a state rebuild, as far behind as an empty state).
        self.read_floor = unapplied[-1][0] if unapplied else 0
        if unapplied:
            # A new leader's log tail (and its epoch's first record): already written, committed once replicated.
            self._high_watermark = state.applied_offset
            self._inflight_group = _Group(applied=list(unapplied), end_offset=unapplied[-1][0])
            self._inflight = asyncio.ensure_future(self._replicate(b"", unapplied[-1][0], unapplied[-1][0]))
            self._inflight.add_done_callback(lambda _: self._wakeup.set())

    # ------------------------------------------------------------------ callers

    def has_room(self) -> bool:
        return not self._queue.full()

    def submit(self, operation: Operation[RequestT, ResponseT], may_linger: bool) -> asyncio.Future[ResponseT]:
        if self._queue.full():
            raise Overloaded(
                f"coordinator {self.coordinator_id} has {self._queue.qsize()} operations queued "
                f"({property_name('queue_max_operations')}); retry with backoff"
            )
        queued = _Queued(operation, asyncio.get_running_loop().create_future(), may_linger)
        self._queue.put_nowait(queued)
        if operation.object_key is not None:
            self._queued_keys[operation.object_key] += 1
        self._wakeup.set()
        return queued.future

    def reads_refusal(self) -> CoordinatorUnavailable | None:
        """Why no read may be answered from this leader's state yet (its elected log tail not applied), or None."""
        applied = self._state.applied_offset
        if applied >= self.read_floor:
            return None
        return CoordinatorUnavailable(
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            f"coordinator {self.coordinator_id}: its new leader has applied its log to {applied}, not yet to "
            f"{self.read_floor} where it was elected (its followers must hold it first); retry shortly",
        )

    async def wait_applied(self, offset: int) -> None:
        if self._state.applied_offset >= offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((offset, waiter))
        await waiter

    @property
    def speculative_end_offset(self) -> int:
        return self._next_offset

    def file_queued(self, object_key: str) -> bool:
        """Whether an operation still in the queue (not yet checked) may record this key."""
        return self._queued_keys[object_key] > 0

    def statistics(self) -> PipelineStatistics:
        return PipelineStatistics(
            queued_operations=self._queue.qsize(),
            log_end_offset=self._next_offset,
            high_watermark=self._high_watermark,
            applied_offset=self._state.applied_offset,
            log_append_count=self._append_count,
        )

    def report_damage(self, error: Exception) -> bool:
        """A read met a damaged state: the next pass fails the pipeline with it. False if one is reported."""
        if self._reported_damage is not None:
            return False
        self._reported_damage = error
        self._wakeup.set()
        return True

    def close(self) -> None:
        """`run` finishes what is queued and in flight, then returns."""
        self._closing = True
        self._wakeup.set()

    # ------------------------------------------------------------------ the loop

    async def run(self) -> BaseException | None:
        """Runs until closed and drained (None) or until something fails (the failure)."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                if self._reported_damage is not None:
                    raise self._reported_damage
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
            operation = self._take_queued()
            if operation.abandoned():  # the caller gave up before the check
                continue
            try:
                checked = operation.check(view, self._clock.now_ms())
            except InvariantViolation:
                raise
            except Exception as error:  # a check is pure: failing one operation leaves nothing behind
                if is_state_damage(error):
                    # The check read a damaged page: a retriable refusal, never an internal error, and the
                    # pipeline fails with it, so the coordinator goes out of service and rebuilds its state.
                    operation.fail(
                        CoordinatorUnavailable(
                            ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            f"coordinator {self.coordinator_id} found its state damaged "
                            f"({type(error).__name__}: {error}) and is rebuilding it; retry",
                        )
                    )
                    raise
                log.exception("coordinator %d: check failed", self.coordinator_id)
                operation.fail(error)
                continue
            if checked and self._replication is not None:
                refusal = self._replication.refuse_write()
                if refusal is not None:  # too few in-sync replicas: refused before anything is appended
                    operation.fail(refusal)
                    continue
            group.operations.append(operation)
            group.may_linger = group.may_linger or operation.may_linger
            if checked:
                count = len(checked)
                base_offset = self._next_offset
                end_offset = base_offset + count
                for record in checked:
                    kinds.replay(view, record, end_offset)
                group.frames.append(encode_frame(base_offset, epoch, count, records.encode_batch(checked)))
                group.applied.append((end_offset, checked))
                self._next_offset = group.end_offset = end_offset

    def _linger_over(self) -> bool:
        """Whether the open group may be written now: its tick came, group full, nothing to wait for, or closing.

        A group waits only when its operations came while other callers' were under way: more are then
        on their way, and one SQLite transaction and one fsync will serve them all. A lone caller's
        operation is written at once, so the linger costs nothing when there is nothing to group. A
        group that waits is written at the process's next append tick, with every other coordinator's.
        """
        if (
            self._settings.append_linger_ms <= 0
            or self._closing
            or not self._group.may_linger
            or not self._settings.pipeline_enable
        ):
            return True
        if len(self._group.operations) >= self._settings.group_commit_max_operations:
            return True
        if self._group.tick < 0:
            self._group.tick = self._ticks.next_tick(self._wakeup)
        return self._ticks.passed(self._group.tick)

    def _start_flush(self) -> None:
        group, self._group = self._group, _Group()
        self._inflight_group = group
        self._group_operations.observe(len(group.operations))
        frames = b"".join(group.frames)
        base_offset = group.applied[0][0] - len(group.applied[0][1]) if group.applied else group.end_offset
        self._inflight = asyncio.ensure_future(self._write_and_replicate(frames, base_offset, group.end_offset))
        self._inflight.add_done_callback(lambda _: self._wakeup.set())

    async def _write_and_replicate(
        self, frames: bytes, base_offset: int, end_offset: int
    ) -> CoordinatorUnavailable | None:
        if frames:
            if self._replication is not None:
                self._replication.writing()  # a follower node's answer may wait for it (replica.fetch.linger.ms)
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._executor, self._write, frames, end_offset, self.view.leader_epoch)
            except BaseException:
                if self._replication is not None:
                    self._replication.write_failed()
                raise
        return await self._replicate(frames, base_offset, end_offset)

    async def _replicate(self, frames: bytes, base_offset: int, end_offset: int) -> CoordinatorUnavailable | None:
        """Alone: nothing to wait for. In a cluster: until the high watermark passes the group (acks=all)."""
        if self._replication is None:
            return None
        if frames:
            self._replication.appended(frames, base_offset, end_offset)
        return await self._replication.committed(end_offset)

    def _write(self, frames: bytes, end_offset: int, epoch: int) -> None:
        """On the coordinator's thread, which runs no Python while the loop checks."""
        fault_points.reach("log.append")  # a test may hold a group here: its operations stay in flight
        self._log.append(frames, end_offset, epoch)

    def _finish_flush(self) -> None:
        # The group stays in flight until it is applied: if the write or the apply fails, the failure
        # path answers its callers (a group dropped here would leave them to their request timeout).
        inflight, group = self._inflight, self._inflight_group
        assert inflight is not None
        refusal = inflight.result()  # raises the write failure, or the end of leadership
        if refusal is not None:  # committed, but not as the callers asked (the ISR shrank below min.insync)
            for operation in group.operations:
                operation.fail(refusal)
        if group.applied:
            self._high_watermark = group.end_offset
            self._on_flushed()
            # Applied here, on the loop, rather than on the writer thread: Python on two threads
            # fights over the GIL and costs more than the SQLite work it would overlap.
            self._state.apply(group.applied)
            self._append_count += len(group.applied)
            self._report_topic_records(group.applied)
        self._inflight, self._inflight_group = None, _Group()
        applied_offset = self._state.applied_offset
        check_invariant(
            self._next_offset >= self._high_watermark >= applied_offset,
            f"coordinator {self.coordinator_id}: log end {self._next_offset} >= high watermark "
            f"{self._high_watermark} >= applied {applied_offset} must hold",
        )
        self.view.forget_applied_files(applied_offset)
        for operation in group.operations:
            operation.answer()
        if self._applied_waiters:
            still_waiting = []
            for offset, waiter in self._applied_waiters:
                if offset <= applied_offset:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    still_waiting.append((offset, waiter))
            self._applied_waiters = still_waiting

    def _report_topic_records(self, applied: Sequence[AppliedFrame]) -> None:
        """Tells the node which partitions the applied records created or deleted, before anyone is answered."""
        if self._on_topic_records is None:
            return
        found = topic_records(applied)
        if found:
            self._on_topic_records(self.coordinator_id, found)

    # ------------------------------------------------------------------ failure

    async def fail_everything(self, error: CoordinatorUnavailable) -> None:
        """Answers every operation and waiter with `error`, then waits for a write in flight to end.

        An answer given here may be for records that did reach the disk (the write was in flight): a
        broker's retry of such a batch is then answered DUPLICATE with its original offsets (I5).
        """
        for operation in (*self._inflight_group.operations, *self._group.operations):
            operation.fail(error)
        for _, waiter in self._applied_waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self.fail_queued(error.error_code, error.message)
        if self._inflight is not None:
            with contextlib.suppress(Exception):  # the failure being handled, or the same write's
                await self._inflight
        self._inflight, self._inflight_group, self._group, self._applied_waiters = None, _Group(), _Group(), []

    def fail_queued(self, code: ErrorCode, message: str) -> None:
        while not self._queue.empty():
            self._take_queued().fail(CoordinatorUnavailable(code, message))

    def _take_queued(self) -> _Waiting:
        """The next queued operation; its key is no longer counted queued (checked at once, or dropped)."""
        operation = self._queue.get_nowait()
        object_key = operation.object_key
        if object_key is not None:
            remaining = self._queued_keys[object_key] - 1
            if remaining > 0:
                self._queued_keys[object_key] = remaining
            else:
                del self._queued_keys[object_key]
        return operation
