"""The leader's side of one coordinator's replicated log (DESIGN §6a, Kafka's `Partition` on the leader).

The leader tracks each follower's log end (the offset it fetches from), keeps
the high watermark at the minimum log end over the ISR, and tells the pipeline
when a group's records are committed (acks=all). It shrinks the ISR when a
follower lags longer than `replica.lag.time.max.ms` and widens it when one
catches up, each time by a compare-and-set in etcd (AlterPartition); a write
needs `min.insync.replicas` in the ISR, before and after its append.

Nothing here answers a caller while the node's session may have lapsed: a
paused leader whose lease expired may have been replaced.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import replace
from types import MappingProxyType
from typing import final

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.invariants import check_invariant
from coordinator.config.settings import Settings, property_name
from coordinator.runtime.log.damage import CorruptLogError
from coordinator.runtime.log.epoch_cache import LeaderEpochCache
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.replication.progress import FollowerProgress, ReplicaProgress
from coordinator.runtime.replication.role import ReplicaRole
from protos import internal_pb2 as internal

log = logging.getLogger(__name__)

# Asks etcd to set the coordinator's ISR (the leader's AlterPartition); the ISR etcd holds afterwards, or None.
NO_INCARNATIONS: Mapping[int, str] = MappingProxyType({})
AlterIsr = Callable[[tuple[int, ...], Mapping[int, str]], Awaitable[tuple[int, ...] | None]]


class RoleChanged(Exception):
    """This node no longer leads (or follows) the coordinator as it did: pending records get NOT_COORDINATOR."""


@final
class LeaderReplication:
    """One coordinator's replication while this node leads it; a new instance per leader epoch."""

    def __init__(
        self,
        coordinator_id: int,
        role: ReplicaRole,
        settings: Settings,
        clock: Clock,
        metadata_log: MetadataLog,
        epoch_cache: LeaderEpochCache,
        executor: Executor,
        high_watermark: int,
        session_valid: Callable[[], bool],
        alter_isr: AlterIsr,
        on_damage: Callable[[Exception], None] = lambda error: None,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._role = role
        self._settings = settings
        self._clock = clock
        self._log = metadata_log
        self._epoch_cache = epoch_cache
        self._executor = executor  # the coordinator's thread: log reads never race its appends
        self._session_valid = session_valid
        self._alter_isr = alter_isr
        self._on_damage = on_damage  # its own log damaged (met serving a fetch): it steps down and repairs
        self.isr = role.isr
        self.isr_incarnations = dict(role.isr_incarnations)  # node -> the incarnation it was in sync as
        self.log_end_offset = metadata_log.end_offset  # durable on this node
        self.high_watermark = high_watermark
        now = clock.now_ms()
        self.followers = {
            node: FollowerProgress(node, last_caught_up_ms=now) for node in role.replicas if node != role.node_id
        }
        self._recent: collections.deque[tuple[int, int, bytes]] = collections.deque()  # (base, end, frames)
        self._recent_bytes = 0
        self._waiters: list[tuple[int, asyncio.Future[CoordinatorUnavailable | None]]] = []
        self._new_data = asyncio.Event()
        self._data_listeners: dict[Callable[[], None], None] = {}  # ordered: a seeded run replays exactly
        # Writes the pipeline began (`writing`) and ended (appended or failed): a node-level fetch lingers for
        # those begun before it answers (fetch_answers.py).
        self.writes_begun = 0
        self._writes_ended = 0
        self._closed: RoleChanged | None = None
        self._isr_change: asyncio.Task[None] | None = None

    @property
    def leader_epoch(self) -> int:
        return self._role.leader_epoch

    def close(self, reason: str) -> None:
        """Leadership ended: every waiter learns it, fetchers stop waiting."""
        if self._closed is None:
            self._closed = RoleChanged(reason)
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(self._closed)
        self._waiters = []
        self._new_data.set()
        self._tell_data_listeners()
        if self._isr_change is not None:
            self._isr_change.cancel()

    # ------------------------------------------------------------------ the pipeline's side

    def refuse_write(self) -> CoordinatorUnavailable | None:
        """Why a write may not be appended now (checked before it is), or None."""
        if self._closed is not None:
            return CoordinatorUnavailable(ErrorCode.NOT_COORDINATOR, str(self._closed))
        if len(self.isr) < self._settings.min_insync_replicas:
            return CoordinatorUnavailable(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"coordinator {self.coordinator_id}: {len(self.isr)} in-sync replicas {list(self.isr)} < "
                f"{property_name('min_insync_replicas')} {self._settings.min_insync_replicas}; nothing was written",
            )
        return None

    def writing(self) -> None:
        """The pipeline begins writing a group; `appended` or `write_failed` follows."""
        self.writes_begun += 1

    def write_failed(self) -> None:
        self._writes_ended += 1
        self._tell_data_listeners()

    def wrote_through(self, begun: int) -> bool:
        """Whether the first `begun` writes have ended (or leadership has: none will be sent any more)."""
        return self._writes_ended >= begun or self._closed is not None

    def appended(self, frames: bytes, base_offset: int, end_offset: int) -> None:
        """The leader's own log holds these frames durably (called on the loop after the write)."""
        self._writes_ended += 1
        check_invariant(
            base_offset == self.log_end_offset,
            f"coordinator {self.coordinator_id}: frames at {base_offset} after log end {self.log_end_offset}",
        )
        self.log_end_offset = end_offset
        self._recent.append((base_offset, end_offset, frames))
        self._recent_bytes += len(frames)
        while self._recent_bytes > self._settings.replica_buffer_bytes and len(self._recent) > 1:
            self._recent_bytes -= len(self._recent.popleft()[2])
        self._advance_high_watermark()
        self._new_data.set()
        self._tell_data_listeners()

    def _tell_data_listeners(self) -> None:
        for listener in list(self._data_listeners):
            listener()

    async def committed(self, end_offset: int) -> CoordinatorUnavailable | None:
        """Waits for the high watermark to pass `end_offset`; then None, or the error to answer with.

        The records are committed either way (they get applied); the error says the ISR was below
        `min.insync.replicas` when they were (NOT_ENOUGH_REPLICAS_AFTER_APPEND), as Kafka answers acks=all.
        Raises RoleChanged if leadership ends first: then they may never be committed.
        """
        if self._closed is not None:
            raise self._closed
        # With no follower in the ISR (replication factor 1) no fetch ever advances the high watermark: the
        # leader's own log end does, including the epoch's first record, written before this leader existed.
        self._advance_high_watermark()
        if self.high_watermark < end_offset or not self._session_valid():
            waiter: asyncio.Future[CoordinatorUnavailable | None] = asyncio.get_running_loop().create_future()
            self._waiters.append((end_offset, waiter))
            return await waiter
        return self._after_commit_problem()

    def _after_commit_problem(self) -> CoordinatorUnavailable | None:
        if len(self.isr) >= self._settings.min_insync_replicas:
            return None
        return CoordinatorUnavailable(
            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            f"coordinator {self.coordinator_id}: the ISR {list(self.isr)} shrank below "
            f"{property_name('min_insync_replicas')} {self._settings.min_insync_replicas} after the append",
        )

    def _advance_high_watermark(self) -> None:
        ends = [self.log_end_offset]
        ends += [self.followers[node].log_end_offset for node in self.isr if node in self.followers]
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
        if not self._waiters or not self._session_valid():
            return  # a lapsed session answers nothing: the node steps down and the waiters learn it
        problem = self._after_commit_problem()
        still = []
        for end_offset, waiter in self._waiters:
            if end_offset <= self.high_watermark:
                if not waiter.done():
                    waiter.set_result(problem)
            else:
                still.append((end_offset, waiter))
        self._waiters = still

    def progress(self) -> list[ReplicaProgress]:
        """Every replica in assignment order, the leader's own line included (lag 0)."""
        now = self._clock.now_ms()
        lines = []
        for node in self._role.replicas:
            follower = self.followers.get(node)
            if follower is None:  # the leader itself
                lines.append(ReplicaProgress(node, self.log_end_offset, 0, node in self.isr, -1, 0))
                continue
            known = follower.log_end_offset >= 0
            lines.append(
                ReplicaProgress(
                    node,
                    follower.log_end_offset,
                    self.log_end_offset - follower.log_end_offset if known else -1,
                    node in self.isr,
                    now - follower.last_fetch_ms if follower.last_fetch_ms >= 0 else -1,
                    now - follower.last_caught_up_ms,
                )
            )
        return lines

    def update_isr(self, isr: tuple[int, ...], incarnations: Mapping[int, str]) -> None:
        """etcd's ISR changed without a leader change (a dead follower removed, or our own change)."""
        self.isr_incarnations = {n: incarnations[n] for n in isr if incarnations.get(n)}
        if isr != self.isr:
            log.info("coordinator %d: ISR %s -> %s", self.coordinator_id, list(self.isr), list(isr))
            self.isr = isr
            self._advance_high_watermark()

    def update_replicas(self, role: ReplicaRole) -> None:
        """etcd's replicas changed without a leader change (a reassignment): replicas added may fetch and join the
        ISR once caught up; replicas removed may fetch no more."""
        if role.replicas == self._role.replicas:
            return
        now = self._clock.now_ms()
        for node in role.replicas:
            if node != self._role.node_id and node not in self.followers:
                self.followers[node] = FollowerProgress(node, last_caught_up_ms=now)
        for node in [n for n in self.followers if n not in role.replicas]:
            del self.followers[node]
        log.info(
            "coordinator %d: replicas %s -> %s", self.coordinator_id, list(self._role.replicas), list(role.replicas)
        )
        self._role = replace(self._role, replicas=role.replicas, replica_addresses=role.replica_addresses)

    # ------------------------------------------------------------------ followers' fetches

    async def fetch(self, request: internal.FetchLogRequest) -> internal.FetchLogResponse:
        """One follower fetch: records its progress, then answers frames from its fetch offset (long poll)."""
        early = self.start_fetch(request)
        if early is not None:
            return early
        offset = request.fetch_offset
        if offset == self.log_end_offset and request.max_wait_ms > 0:
            self._new_data.clear()
            wait_s = min(request.max_wait_ms, self._settings.replica_fetch_wait_max_ms) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_data.wait(), wait_s)
        return await self.read_fetch(offset, max(request.max_bytes, 1))

    def start_fetch(self, request: internal.FetchLogRequest) -> internal.FetchLogResponse | None:
        """The part of a fetch that never waits: fencing, the offset's range, divergence, then the follower's
        progress (its fetch offset acknowledges everything below it). An answer to send as it is, or None when
        frames from the fetch offset are to be read (`read_fetch`), after a long-poll wait if there are none yet."""
        refusal = self._fencing_problem(request.replica_node_id, request.leader_epoch)
        if refusal is not None:
            return refusal
        follower = self._follower_as(request.replica_node_id, request.replica_incarnation)
        log_start = self._log.position().start_offset
        offset = request.fetch_offset
        if offset < log_start or offset > self.log_end_offset:
            return self._response(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"fetch offset {offset} outside the leader's log {log_start}..{self.log_end_offset}",
            )
        if request.last_fetched_epoch >= 0:
            epoch, end = self._epoch_cache.end_offset_for(request.last_fetched_epoch, self.log_end_offset)
            if epoch != request.last_fetched_epoch or end < offset:
                response = self._response(ErrorCode.NONE, "")
                response.diverging_epoch, response.diverging_end_offset = epoch, end
                return response
        self._record_fetch(follower, offset)
        return None

    def has_frames_after(self, offset: int) -> bool:
        """Whether a fetch from `offset` would be answered at once: frames past it, or leadership ended."""
        return offset < self.log_end_offset or self._closed is not None

    def add_data_listener(self, listener: Callable[[], None]) -> None:
        """`listener` is called on each append and on close, until removed (a node-level fetch waiting on several
        coordinators at once)."""
        self._data_listeners[listener] = None

    def remove_data_listener(self, listener: Callable[[], None]) -> None:
        self._data_listeners.pop(listener, None)

    async def read_fetch(self, offset: int, max_bytes: int) -> internal.FetchLogResponse:
        """A started fetch's answer: frames from `offset`, at most `max_bytes` but always one whole frame if any;
        none at all when `max_bytes` <= 0 (an answer's bound spent on other coordinators)."""
        if self._closed is not None:
            return self._response(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(self._closed))
        if max_bytes <= 0:
            return self._response(ErrorCode.NONE, "")
        # Half the message bound leaves room for the one frame always sent, whatever its size.
        bound = min(self._settings.replica_fetch_max_bytes, self._settings.request_max_bytes // 2)
        max_bytes = min(max_bytes, bound)
        try:
            frames = await self._frames_from(offset, max_bytes)
        except CorruptLogError as error:
            self._on_damage(error)
            return self._response(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the leader's log is damaged: {error}")
        return self._response(ErrorCode.NONE, "", frames)

    def _follower_as(self, node: int, incarnation: str) -> FollowerProgress:
        """The follower's progress, started afresh when it fetches as a new incarnation (a restarted node): a member
        of the ISR that is not the incarnation the ISR knew leaves it at once (KIP-903), to join again once caught
        up."""
        follower = self.followers[node]
        if follower.incarnation != incarnation:
            if follower.incarnation:
                log.info(
                    "coordinator %d: node %d fetches as incarnation %s (was %s)",
                    self.coordinator_id, node, incarnation or "unknown", follower.incarnation,
                )  # fmt: skip
                follower = self.followers[node] = FollowerProgress(node)
            follower.incarnation = incarnation
        recorded = self.isr_incarnations.get(node, "")
        if node in self.isr and recorded and recorded != incarnation:
            log.warning(
                "coordinator %d: node %d fetches as incarnation %s, not the %s the ISR knew: leaving the ISR",
                self.coordinator_id, node, incarnation or "unknown", recorded,
            )  # fmt: skip
            self._change_isr(tuple(n for n in self.isr if n != node))
        return follower

    def _fencing_problem(self, replica: int, epoch: int) -> internal.FetchLogResponse | None:
        if self._closed is not None:
            return self._response(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(self._closed))
        if replica not in self.followers:
            return self._response(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"node {replica} is not a follower of coordinator {self.coordinator_id} (replicas "
                f"{list(self._role.replicas)})",
            )
        if epoch < self.leader_epoch:
            return self._response(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {epoch} < {self.leader_epoch}")
        if epoch > self.leader_epoch:
            return self._response(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {epoch} > {self.leader_epoch}")
        return None

    def _response(self, code: ErrorCode, message: str, frames: bytes = b"") -> internal.FetchLogResponse:
        return internal.FetchLogResponse(
            error_code=code,
            error_message=message,
            high_watermark=self.high_watermark,
            log_start_offset=self._log.position().start_offset,
            log_end_offset=self.log_end_offset,
            frames=frames,
            diverging_epoch=-1,
            diverging_end_offset=-1,
        )

    def _record_fetch(self, follower: FollowerProgress, offset: int) -> None:
        """Kafka's rule: caught up at the last fetch if this one starts where the leader's log ended then."""
        now = self._clock.now_ms()
        if offset >= self.log_end_offset:
            follower.last_caught_up_ms = now
        elif follower.leader_end_at_last_fetch >= 0 and offset >= follower.leader_end_at_last_fetch:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = offset
        follower.last_fetch_ms = now
        follower.leader_end_at_last_fetch = self.log_end_offset
        self._advance_high_watermark()
        if follower.node_id not in self.isr and offset >= self.high_watermark and offset >= self._epoch_start():
            self._change_isr((*self.isr, follower.node_id), {follower.node_id: follower.incarnation})

    def _epoch_start(self) -> int:
        """Where this leader's epoch starts: a follower rejoins only once it holds the epoch's first record."""
        _, end = self._epoch_cache.end_offset_for(self.leader_epoch - 1, self.log_end_offset)
        return max(end, 0)

    async def _frames_from(self, offset: int, max_bytes: int) -> bytes:
        """Whole frames from `offset`: from the recent buffer when it starts there, else from the log on disk."""
        chunks: list[bytes] = []
        size = 0
        started = False
        for base, _end, frames in self._recent:
            if not started:
                if base != offset:
                    continue
                started = True
            if chunks and size + len(frames) > max_bytes:
                break
            chunks.append(frames)
            size += len(frames)
        if started:
            return b"".join(chunks)
        if offset >= self.log_end_offset:
            return b""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._log.read_frame_bytes, offset, max_bytes)

    # ------------------------------------------------------------------ the ISR

    async def run_isr_ticks(self) -> None:
        """Looks for lagging followers every quarter of the lag bound (Kafka's isr-expiration task), until the
        leadership ends. The ISR_TICKER worker (coordinator/runtime/worker_specs.py): the coordinator's lifecycle
        starts it on the node's supervisor with the leadership and stops it when the leadership ends."""
        interval_ms = max(1, self._settings.replica_lag_time_max_ms // 4)
        while not self._ended():
            await self._clock.sleep_ms(interval_ms)
            if self._ended():
                return  # never an ISR change after the leadership ended
            now = self._clock.now_ms()
            lagging = {
                node
                for node in self.isr
                if node in self.followers
                and self.followers[node].log_end_offset < self.log_end_offset
                and now - self.followers[node].last_caught_up_ms > self._settings.replica_lag_time_max_ms
            }
            if lagging:
                log.warning(
                    "coordinator %d: followers %s not caught up for %d ms: leaving the ISR",
                    self.coordinator_id, sorted(lagging), self._settings.replica_lag_time_max_ms,
                )  # fmt: skip
                self._change_isr(tuple(n for n in self.isr if n not in lagging))

    def _ended(self) -> bool:
        return self._closed is not None

    def _change_isr(self, isr: tuple[int, ...], joined: Mapping[int, str] = NO_INCARNATIONS) -> None:
        if self._isr_change is not None and not self._isr_change.done():
            return  # one change at a time; the next fetch or tick tries again
        self._isr_change = asyncio.create_task(self._alter(isr, joined))

    async def _alter(self, isr: tuple[int, ...], joined: Mapping[int, str]) -> None:
        try:
            stored = await self._alter_isr(isr, joined)
        except Exception as error:  # etcd unreachable: the next fetch or tick tries again
            log.warning("coordinator %d: ISR change to %s failed: %s", self.coordinator_id, list(isr), error)
            return
        if stored is not None and self._closed is None:
            self.update_isr(stored, {**self.isr_incarnations, **joined})
