"""The node's replica fetcher: one fetch loop per leader node, carrying every coordinator this node follows there.

Kafka's `ReplicaFetcherManager` runs one fetcher thread per source broker and adds or removes partitions as
leadership moves; here a follower (`Follower`, one coordinator's replica in one leader epoch) joins the session of
its leader's node once it has truncated to the leader's log (KIP-101/KIP-279, still per coordinator), and leaves
it when it closes (promotion, demotion, a new leader or epoch: the coordinator's lifecycle closes it and a new
follower joins the new leader's session). Each session sends one FetchLogs call for all its coordinators, every
fetch offset acknowledging what is durable here (cumulative), and hands each coordinator its part of the answer
with the high watermark it carries. The appends of one answer run together, each on its coordinator's own
thread, so their fdatasyncs overlap: one round of the loop per answer, not per coordinator.

A coordinator the leader refused (stale or future epoch, loading, a frame that does not verify) backs off alone
while the others go on; a failed call (the leader node unreachable) backs the whole session off. A joining
coordinator ends the call in flight (a long poll), so it waits no long-poll round for its first fetch.

The fetcher is one worker of the node (REPLICA_FETCHER, run by its `WorkerSupervisor`): it runs the sessions under
one TaskGroup of its own. A session whose followers all left waits idle for the next to join (there are as many
sessions as leader nodes, at most). A session that raises ends the fetcher; the supervisor counts it and runs the
fetcher again after its backoff, every session anew (their followers stay joined, so none has to come back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, cast, final

import grpc

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.config.settings import Settings
from coordinator.runtime.replication.follower import FAILURE_LOG_EVERY, Follower, LeaderRefused, NeedsSnapshot
from coordinator.runtime.replication.link import ClusterLink
from protos import internal_pb2 as internal

log = logging.getLogger(__name__)


@final
@dataclass(slots=True)
class _Member:
    follower: Follower
    backoff: Backoff
    failures: int = 0  # refused fetches in a row: the first is logged, then one in FAILURE_LOG_EVERY


@final
@dataclass(frozen=True, slots=True)
class FetcherStatistics:
    sessions: int  # leader nodes fetched from (idle ones included)
    members: int  # coordinators fetched, over all sessions
    calls: int  # FetchLogs calls answered since start
    partitions_fetched: int  # coordinators' parts of those calls


@final
@dataclass(slots=True)
class _Counts:
    calls: int = 0
    partitions: int = 0


@final
class _Session:
    """Every coordinator this node follows on one leader node (by its address), fetched in one call at a time."""

    def __init__(self, address: str, settings: Settings, clock: Clock, link: ClusterLink, counts: _Counts) -> None:
        self.address = address
        self._settings = settings
        self._clock = clock
        self._link = link
        self._counts = counts
        self.members: dict[int, _Member] = {}  # by coordinator id
        self._changed = asyncio.Event()  # a member joined (or a backoff should be looked at again)
        self._closed = False
        self._rotation = 0  # where the next request starts in the members' order, so none always comes last
        # The open FetchLogsStream to the leader node (None: opened at the next round); calls instead when the
        # setting says so or the leader node is of a version without the stream.
        self._stream: Any = None
        self._by_calls = not settings.replica_fetch_stream_enable

    def join(self, follower: Follower) -> None:
        backoff = Backoff(self._settings.replica_fetch_backoff_ms, self._settings.node_session_timeout_ms)
        self.members[follower.coordinator_id] = _Member(follower, backoff)
        self._changed.set()

    def leave(self, follower: Follower) -> None:
        member = self.members.get(follower.coordinator_id)
        if member is not None and member.follower is follower:
            del self.members[follower.coordinator_id]

    def close(self) -> None:
        self._closed = True
        self._close_stream()
        self._changed.set()

    async def run(self) -> None:
        call_backoff = Backoff(self._settings.replica_fetch_backoff_ms, self._settings.node_session_timeout_ms)
        call_failures = 0
        while not self._closed:
            now = self._clock.now_ms()
            ready = [m for m in self.members.values() if not m.follower.closed and m.backoff.ready(now)]
            if not ready:
                self._changed.clear()
                waits = [m.backoff.retry_at_ms - now for m in self.members.values() if not m.follower.closed]
                await self._clock.wait_event(self._changed, max(1, min(waits)) if waits else None)
                continue
            start = self._rotation % len(ready)
            self._rotation += 1
            ready = ready[start:] + ready[:start]
            try:
                answer = await self._call(ready)
            except (grpc.RpcError, OSError) as error:  # the leader node unreachable or failing: all wait
                code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
                if code == grpc.StatusCode.UNIMPLEMENTED and not self._by_calls:
                    log.info(
                        "node at %s answers no FetchLogsStream (an earlier version): FetchLogs calls", self.address
                    )
                    self._by_calls = True
                    continue
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    self._let_go(ready)
                    continue
                if code == grpc.StatusCode.UNAVAILABLE:
                    ready[0].follower.leader_unreachable()
                wait_ms = call_backoff.failed()
                if call_failures % FAILURE_LOG_EVERY == 0:
                    log.info(
                        "fetch of coordinators %s from %s failed %d times in a row (%s); again in %d ms",
                        sorted(m.follower.coordinator_id for m in ready), self.address, call_failures + 1,
                        _short(error), wait_ms,
                    )  # fmt: skip
                call_failures += 1
                self._changed.clear()
                await self._clock.wait_event(self._changed, wait_ms)
                continue
            if answer is None:
                continue  # a coordinator joined meanwhile: ask again with it
            call_backoff.succeeded()
            call_failures = 0
            await asyncio.gather(*(self._hand(member, offset, part) for member, offset, part in answer))

    def _let_go(self, members: list[_Member]) -> None:
        """The leader node is of an earlier version (no FetchLogs): each of `members` fetches alone with FetchLog,
        as before, until its role changes (a rolling upgrade keeps replicating)."""
        log.info(
            "node at %s answers no FetchLogs (an earlier version): coordinators %s fetch alone", self.address,
            sorted(m.follower.coordinator_id for m in members),
        )  # fmt: skip
        for member in members:
            self.leave(member.follower)
            member.follower.fetch_alone()

    async def _call(self, members: list[_Member]) -> list[tuple[_Member, int, internal.FetchLogResponse]] | None:
        """One FetchLogs for `members`: each member with its fetch offset and its part of the answer; None when a
        coordinator joined first (the call is cancelled: the leader node stops its long poll)."""
        partitions = [m.follower.partition_request() for m in members]
        role = members[0].follower.role
        request = internal.FetchLogsRequest(
            replica_node_id=role.node_id,
            replica_incarnation=role.node_incarnation,
            max_wait_ms=self._settings.replica_fetch_wait_max_ms,
            max_bytes=self._settings.replica_fetch_response_max_bytes,
            partitions=partitions,
        )
        timeout_s = (self._settings.replica_fetch_wait_max_ms + self._settings.replica_socket_timeout_ms) / 1000
        self._changed.clear()
        sent = time.monotonic()
        running = asyncio.ensure_future(self._exchange(request, timeout_s))
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait([running, changed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
                await running
            return None
        response = running.result()
        seconds = time.monotonic() - sent
        by_coordinator = {part.coordinator_id: part for part in response.partitions}
        self._counts.calls += 1
        self._counts.partitions += len(partitions)
        answer = []
        for member, partition in zip(members, partitions, strict=True):
            part = by_coordinator.get(member.follower.coordinator_id)
            if part is not None:
                member.follower.observe_fetch(seconds, bool(part.frames))
                answer.append((member, partition.fetch_offset, part))
        return answer

    async def _exchange(self, request: internal.FetchLogsRequest, timeout_s: float) -> internal.FetchLogsResponse:
        """`request`'s answer: over the open stream (opened if none is), or by a FetchLogs call. A stream that failed
        or whose round was cancelled (a coordinator joined) is closed: the next round opens another."""
        stub = self._link.internal_stub(self.address)
        if self._by_calls:
            return await stub.FetchLogs(request, timeout=timeout_s)
        if self._stream is None:
            self._stream = stub.FetchLogsStream()
        stream = self._stream
        try:
            with contextlib.suppress(asyncio.InvalidStateError, grpc.aio.UsageError):
                await stream.write(request)  # on a stream that ended, the read below raises its status
            response = await asyncio.wait_for(stream.read(), timeout_s)
        except BaseException:
            self._close_stream()
            raise
        if response is grpc.aio.EOF:
            self._close_stream()
            raise ConnectionError(f"FetchLogsStream from {self.address} ended")
        return cast(internal.FetchLogsResponse, response)

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    async def _hand(self, member: _Member, fetch_offset: int, part: internal.FetchLogResponse) -> None:
        """One coordinator's part: appended and applied, or its failure where it belongs (the member's backoff, or
        the follower's end)."""
        follower = member.follower
        try:
            await follower.handle(fetch_offset, part)
        except (LeaderRefused, ValueError) as error:
            wait_ms = member.backoff.failed(self._clock.now_ms())
            if member.failures % FAILURE_LOG_EVERY == 0:
                log.info(
                    "coordinator %d: fetch from node %d failed %d times in a row (%s); again in %d ms",
                    follower.coordinator_id, follower.role.leader_node_id, member.failures + 1, error, wait_ms,
                )  # fmt: skip
            member.failures += 1
            return
        except (NeedsSnapshot, OSError) as error:
            follower.fail(error)
            return
        except Exception as error:  # a bug in one coordinator's replica: it reloads, the others go on
            log.exception("coordinator %d: fetched part failed", follower.coordinator_id)
            follower.fail(error)
            return
        member.backoff.succeeded()
        member.failures = 0


@final
class ReplicaFetcher:
    """The node's fetch sessions, one per leader node; followers join and leave them (`NodeFetcher`)."""

    def __init__(self, settings: Settings, clock: Clock, link: ClusterLink) -> None:
        self._settings = settings
        self._clock = clock
        self._link = link
        self._sessions: dict[str, _Session] = {}  # by the leader node's address
        self._counts = _Counts()
        self._changed = asyncio.Event()  # a session was added, or stop
        self._stopping = False

    def request_stop(self) -> None:
        """Ends `run` once every session's call in flight ended (the supervisor asks, then waits)."""
        self._stopping = True
        self._changed.set()
        for session in self._sessions.values():
            session.close()

    def join(self, follower: Follower) -> None:
        address = follower.role.leader_address
        session = self._sessions.get(address)
        if session is None:
            session = self._sessions[address] = _Session(address, self._settings, self._clock, self._link, self._counts)
            self._changed.set()
        for other in self._sessions.values():
            if other is not session:
                other.leave(follower)  # a coordinator follows one leader at a time
        session.join(follower)

    def leave(self, follower: Follower) -> None:
        for session in self._sessions.values():
            session.leave(follower)

    def statistics(self) -> FetcherStatistics:
        members = sum(len(session.members) for session in self._sessions.values())
        return FetcherStatistics(len(self._sessions), members, self._counts.calls, self._counts.partitions)

    async def run(self) -> None:
        """Runs a session per leader node as followers join, until asked to stop; a session's bug raises here (the
        TaskGroup's ExceptionGroup), to the supervisor."""
        running: set[str] = set()
        async with asyncio.TaskGroup() as group:
            while not self._stopping:
                for address, session in self._sessions.items():
                    if address not in running:
                        running.add(address)
                        group.create_task(session.run(), name=f"replica-fetcher-{address}")
                self._changed.clear()
                await self._changed.wait()


def _short(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error)
