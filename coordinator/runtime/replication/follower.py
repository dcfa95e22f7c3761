"""The follower's side of one coordinator's replicated log (DESIGN §6a, Kafka's replica fetcher).

On becoming a follower it asks the leader where its own last epoch ends and
truncates its log there (KIP-101/KIP-279), never blindly to its high
watermark. Then it fetches from its log end, appends and fdatasyncs what the
leader sends, and applies records up to the leader's high watermark through
the same record kinds as the leader (`StateStore.apply`, `kinds.replay`).
Records are never applied past the high watermark, so truncation never goes
below what SQLite holds. While fetches bring frames, records below the high
watermark may wait up to `replica.apply.linger.ms` (or `replica.apply.max.records`)
so that several rounds go in one SQLite transaction; an answer without frames
applies what waits at once (the next round may be a long poll away).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol, final

import grpc

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.base.errors import ErrorCode
from coordinator.config.settings import Settings
from coordinator.machine import kinds, records
from coordinator.machine.state.store import StateStore
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.log.epoch_cache import LeaderEpochCache
from coordinator.runtime.log.frame import Frame, decode_frame
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.ports import AppliedFrame, TopicRecordsApplied, topic_records
from coordinator.runtime.replication.role import ReplicaRole
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from protos import internal_pb2_grpc as internal_grpc

log = logging.getLogger(__name__)

FAILURE_LOG_EVERY = 20  # failed fetches in a row between two log lines (a leader gone fails every backoff)


class NeedsSnapshot(Exception):
    """The follower cannot go on from its own state: the leader's log no longer starts low enough."""

    def __init__(self, message: str, leader_log_start: int) -> None:
        super().__init__(message)
        self.leader_log_start = leader_log_start


class NodeFetcher(Protocol):
    """The node's replica fetcher (fetcher.py): fetches every coordinator this node follows from one leader node in
    one call, and hands each its part of the answer (`Follower.handle`)."""

    def join(self, follower: Follower) -> None: ...

    def leave(self, follower: Follower) -> None: ...


class LeaderRefused(Exception):
    """The leader answered a fetch with an error the follower waits out (a stale or future epoch, loading)."""


@final
@dataclass(frozen=True, slots=True)
class FollowerStatistics:
    log_end_offset: int
    high_watermark: int
    applied_offset: int
    leader_log_end_offset: int

    @property
    def lag(self) -> int:
        """Offsets behind the leader's log end as the last fetch said (0 before the first answer)."""
        return max(0, self.leader_log_end_offset - self.log_end_offset) if self.leader_log_end_offset >= 0 else 0


def divergence_end(leader_epoch: int, leader_end_offset: int, own_epoch: int, own_end_offset: int, applied: int) -> int:
    """Where a follower truncates its log, given the leader's latest epoch at or below the follower's latest epoch
    and where it ends on the leader, and the follower's own latest epoch at or below the leader's one and where that
    one ends here (KIP-279's rule): at the smaller of the two ends.

    The leader's end alone is not enough: a follower whose latest epoch the leader never had (a leader deposed
    before anything of it was committed) may hold that epoch's records at offsets the leader fills with an older
    epoch's. Truncating to the leader's end alone truncates nothing there, the next fetch diverges again, and the
    follower never catches up. Its own end of the leader's epoch is where its unknown epoch began.
    A leader that knows no epoch that old, or a follower that holds none, keeps only what is committed here.
    """
    if leader_epoch < 0 or own_epoch < 0:
        return applied
    return min(leader_end_offset, own_end_offset)


def decode_fetched(frames: bytes, expected_base: int) -> list[Frame]:
    """Every frame of a fetch answer, verified and contiguous from `expected_base`; ValueError otherwise."""
    decoded, position = [], 0
    while position < len(frames):
        result = decode_frame(frames, position)
        if result is None:
            raise ValueError(f"fetched frame at byte {position} does not verify")
        frame, position = result
        if frame.base_offset != expected_base:
            raise ValueError(f"fetched frame starts at {frame.base_offset}, expected {expected_base}")
        expected_base = frame.end_offset
        decoded.append(frame)
    return decoded


@final
class Follower:
    """One coordinator's replica while this node follows it; a new instance per leader epoch."""

    def __init__(
        self,
        coordinator_id: int,
        role: ReplicaRole,
        settings: Settings,
        clock: Clock,
        metadata_log: MetadataLog,
        epoch_cache: LeaderEpochCache,
        store: StateStore,
        view: CoordinatorView,
        unapplied: list[AppliedFrame],
        executor: Executor,
        stub: Callable[[str], internal_grpc.CoordinatorInternalAsyncStub],
        on_flushed: Callable[[], None],
        on_topic_records: TopicRecordsApplied | None,
        observe_fetch: Callable[[float, bool], None] = lambda seconds, returned_frames: None,
        leader_unreachable: Callable[[int], None] = lambda node_id: None,
        fetcher: NodeFetcher | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._fetcher = fetcher  # the node's fetcher; without one this replica fetches alone (FetchLog)
        self._observe_fetch = observe_fetch  # each answered fetch's round trip, long-poll wait included
        self._leader_unreachable = leader_unreachable  # told of each UNAVAILABLE: the node may be gone (kill -9)
        self._role = role
        self._settings = settings
        self._clock = clock
        self._log = metadata_log
        self._epoch_cache = epoch_cache
        self._store = store
        self.view = view
        self._unapplied = unapplied  # in the log, not yet known to be below the high watermark
        self._executor = executor
        self._stub = stub
        self._on_flushed = on_flushed
        self._on_topic_records = on_topic_records
        self.high_watermark = store.applied_offset
        self.leader_log_end_offset = -1
        self._ready_since_ms: int | None = None  # when records below the high watermark began to wait, if any do
        self._closed = False
        self._wake = asyncio.Event()  # ends a backoff sleep early
        self._closing = asyncio.Event()  # ends a call in flight: a paused leader would hold it to its deadline
        self._closing_or_alone = asyncio.Event()  # ends fetching through the node's fetcher
        self._failure: Exception | None = None  # damage a read met: `run` ends with it

    def fail(self, error: Exception) -> bool:
        """A read of this replica met damage, or the node's fetcher met what it cannot go on from (a snapshot needed,
        its log's write failed): fetching ends and `run` returns it. False if one is reported."""
        if self._failure is not None or self._closed:
            return False
        self._failure = error
        self.close()
        return True

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._closing.set()
        self._closing_or_alone.set()

    @property
    def role(self) -> ReplicaRole:
        return self._role

    @property
    def closed(self) -> bool:
        return self._closed

    def observe_fetch(self, seconds: float, returned_frames: bool) -> None:
        self._observe_fetch(seconds, returned_frames)

    def leader_unreachable(self) -> None:
        """A call to the leader's node failed as unreachable: the node may be gone (kill -9)."""
        self._leader_unreachable(self._role.leader_node_id)

    def statistics(self) -> FollowerStatistics:
        return FollowerStatistics(
            self._log.end_offset, self.high_watermark, self._store.applied_offset, self.leader_log_end_offset
        )

    async def run(self) -> BaseException | None:
        """Truncates, then fetches until closed (None) or until something fails (the failure)."""
        backoff = Backoff(self._settings.replica_fetch_backoff_ms, self._settings.node_session_timeout_ms)
        truncated = False
        failures = 0  # in a row: the first is logged, then one in FAILURE_LOG_EVERY
        while not self._closed:
            try:
                if not truncated:
                    await self._unless_closed(self._truncate_to_leader())
                    truncated = True
                if self._fetcher is not None:
                    await self._fetch_with_node()
                    if self.closed:
                        return self._failure
                    continue  # let go by the node's fetcher (the leader's node has no FetchLogs): fetch alone
                await self._unless_closed(self._fetch_once())
                backoff.succeeded()
                failures = 0
            except (NeedsSnapshot, OSError) as error:
                return error
            except (grpc.RpcError, LeaderRefused, ValueError) as error:
                # The leader is gone, not ready or refused: the controller will name a new one; wait a little.
                if isinstance(error, grpc.aio.AioRpcError) and error.code() == grpc.StatusCode.UNAVAILABLE:
                    self._leader_unreachable(self._role.leader_node_id)
                wait_ms = backoff.failed()
                if failures % FAILURE_LOG_EVERY == 0:
                    log.info(
                        "coordinator %d: fetch from node %d failed %d times in a row (%s); again in %d ms",
                        self.coordinator_id, self._role.leader_node_id, failures + 1, _short(error), wait_ms,
                    )  # fmt: skip
                failures += 1
                self._wake.clear()
                await self._clock.wait_event(self._wake, wait_ms)
        return self._failure

    async def _fetch_with_node(self) -> None:
        """Fetching is the node's (one call per leader node for all its coordinators) until this replica closes,
        the node's fetcher hands it a failure (`fail`), or lets it go (`fetch_alone`)."""
        fetcher = self._fetcher  # `fetch_alone` forgets it
        assert fetcher is not None
        fetcher.join(self)
        try:
            await self._closing_or_alone.wait()
        finally:
            fetcher.leave(self)

    def fetch_alone(self) -> None:
        """The leader's node answers no FetchLogs (an earlier version): this replica fetches alone with FetchLog, as
        replicas did before, until its role changes (the next follower tries the node's fetcher again)."""
        self._fetcher = None
        self._closing_or_alone.set()

    async def _unless_closed(self, step: Coroutine[Any, Any, None]) -> None:
        """Runs one step; a close cancels it, so a new role does not wait for a call to a silent leader."""
        running = asyncio.ensure_future(step)
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait([running, closing], return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            return
        running.result()

    # ------------------------------------------------------------------ truncation

    async def _truncate_to_leader(self) -> None:
        latest = self._epoch_cache.latest_epoch
        if latest < 0 or self._log.end_offset == self._log.position().start_offset:
            return
        response = await self._stub(self._role.leader_address).OffsetForLeaderEpoch(
            internal.OffsetForLeaderEpochRequest(
                coordinator_id=self.coordinator_id,
                replica_node_id=self._role.node_id,
                current_leader_epoch=self._role.leader_epoch,
                leader_epoch=latest,
            ),
            timeout=self._settings.replica_socket_timeout_ms / 1000,
        )
        if response.error_code != ErrorCode.NONE:
            raise LeaderRefused(f"{pb.ErrorCode.Name(response.error_code)}: {response.error_message}")
        end = self._divergence_end(response.leader_epoch, response.end_offset)
        if end < self._log.end_offset or self._epoch_cache.latest_epoch > max(response.leader_epoch, -1):
            await self._truncate(end, f"leader's epoch {response.leader_epoch} ends at {response.end_offset}")

    def _divergence_end(self, leader_epoch: int, leader_end_offset: int) -> int:
        """Where this replica's log stops agreeing with the leader's, from the leader's answer for our latest epoch."""
        own_epoch, own_end = self._epoch_cache.end_offset_for(leader_epoch, self._log.end_offset)
        return divergence_end(leader_epoch, leader_end_offset, own_epoch, own_end, self._store.applied_offset)

    async def _truncate(self, end: int, why: str) -> None:
        applied = self._store.applied_offset
        if end < applied:
            raise NeedsSnapshot(
                f"coordinator {self.coordinator_id}: truncation to {end} ({why}) would go below the applied "
                f"state at {applied}",
                end,
            )
        removed = self._log.end_offset - end
        await asyncio.get_running_loop().run_in_executor(self._executor, self._truncate_blocking, end)
        self._unapplied = [(e, frame) for e, frame in self._unapplied if e <= end]
        log.info(
            "coordinator %d: truncated %d uncommitted records from the log to %d (%s)",
            self.coordinator_id, removed, end, why,
        )  # fmt: skip

    def _truncate_blocking(self, end: int) -> None:
        self._log.truncate_to(end)
        self._epoch_cache.truncate_from_end(end)

    # ------------------------------------------------------------------ fetching

    async def _fetch_once(self) -> None:
        request = self.partition_request()
        request.max_wait_ms = self._settings.replica_fetch_wait_max_ms
        sent = time.monotonic()
        response = await self._stub(self._role.leader_address).FetchLog(
            request,
            timeout=(self._settings.replica_fetch_wait_max_ms + self._settings.replica_socket_timeout_ms) / 1000,
        )
        self._observe_fetch(time.monotonic() - sent, bool(response.frames))
        await self.handle(request.fetch_offset, response)

    def partition_request(self) -> internal.FetchLogRequest:
        """This replica's part of a fetch: from its log end, which acknowledges everything below it as durable."""
        return internal.FetchLogRequest(
            coordinator_id=self.coordinator_id,
            replica_node_id=self._role.node_id,
            leader_epoch=self._role.leader_epoch,
            replica_incarnation=self._role.node_incarnation,
            fetch_offset=self._log.end_offset,
            last_fetched_epoch=self._epoch_cache.latest_epoch,
            max_bytes=self._settings.replica_fetch_max_bytes,
        )

    async def handle(self, fetch_offset: int, response: internal.FetchLogResponse) -> None:
        """The leader's answer to a fetch from `fetch_offset`: truncates where it diverged, appends and fdatasyncs
        its frames, applies up to its high watermark. Raises NeedsSnapshot or OSError when this replica cannot go
        on (`run` ends with it), LeaderRefused or ValueError when the fetch is to be tried again after a backoff.
        Nothing happens once closed: the coordinator may be closing its files."""
        if self._closed or fetch_offset != self._log.end_offset:
            return  # closed, or an answer to a request sent before a truncation or append since
        code = response.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE and fetch_offset < response.log_start_offset:
            raise NeedsSnapshot(
                f"coordinator {self.coordinator_id}: fetch offset {fetch_offset} is below the leader's log start "
                f"{response.log_start_offset}",
                response.log_start_offset,
            )
        if code != ErrorCode.NONE:
            raise LeaderRefused(f"{pb.ErrorCode.Name(code)}: {response.error_message}")
        if response.diverging_end_offset >= 0:
            end = self._divergence_end(response.diverging_epoch, response.diverging_end_offset)
            await self._truncate(end, f"diverged: the leader's epoch {response.diverging_epoch} ends at "
                                      f"{response.diverging_end_offset}")  # fmt: skip
            return
        self.leader_log_end_offset = response.log_end_offset
        if response.frames:
            await self._append(response.frames, fetch_offset)
            if self.closed:  # closed during the write (the property: mypy would take the check above as still true)
                return  # the coordinator closes its files: the next load replays what was appended
        self._apply_up_to(min(response.high_watermark, self._log.end_offset), lingering=bool(response.frames))

    async def _append(self, frames: bytes, fetch_offset: int) -> None:
        decoded = decode_fetched(frames, fetch_offset)
        for frame in decoded:
            if frame.leader_epoch > self._role.leader_epoch:
                raise ValueError(f"fetched a frame of epoch {frame.leader_epoch} > {self._role.leader_epoch}")
        last = decoded[-1]
        await asyncio.get_running_loop().run_in_executor(self._executor, self._append_blocking, frames, decoded)
        self._unapplied.extend((frame.end_offset, records.decode_batch(frame.payload)) for frame in decoded)
        self._on_flushed()
        assert self._log.end_offset == last.end_offset

    def _append_blocking(self, frames: bytes, decoded: list[Frame]) -> None:
        """On the coordinator's thread: append and fdatasync, then note the epochs the frames start."""
        self._log.append(frames, decoded[-1].end_offset, decoded[-1].leader_epoch)
        for frame in decoded:
            self._epoch_cache.assign(frame.leader_epoch, frame.base_offset)

    def _apply_up_to(self, high_watermark: int, lingering: bool = False) -> None:
        """Applies the fetched records below the high watermark, as the leader applied them; while `lingering` (the
        answer brought frames: more rounds follow soon), only once the first of them waited the apply linger or
        enough of them wait, so that one SQLite transaction takes several rounds."""
        if high_watermark > self.high_watermark:
            self.high_watermark = high_watermark
        ready = [(end, batch) for end, batch in self._unapplied if end <= self.high_watermark]
        if not ready:
            return
        now_ms = self._clock.monotonic_ms()
        if self._ready_since_ms is None:
            self._ready_since_ms = now_ms
        if (
            lingering
            and now_ms - self._ready_since_ms < self._settings.replica_apply_linger_ms
            and ready[-1][0] - self._store.applied_offset < self._settings.replica_apply_max_records
        ):
            return  # held: the next round's records join this transaction
        self._ready_since_ms = None
        self._unapplied = self._unapplied[len(ready) :]
        self._store.apply(ready)
        for end, batch in ready:
            for record in batch:
                kinds.replay(self.view, record, end)
        self.view.forget_applied_files(self._store.applied_offset)
        if self._on_topic_records is not None and (found := topic_records(ready)):
            self._on_topic_records(self.coordinator_id, found)


def _short(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error)
