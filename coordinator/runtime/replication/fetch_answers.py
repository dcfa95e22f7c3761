"""The leader node's side of FetchLogs: one follower node's fetch of every coordinator it follows here.

Each partition is answered by its coordinator's leader (`LeaderReplication`) by the same rules as FetchLog:
fencing, the offset's range, divergence, the follower's progress and ISR changes (`start_fetch`), then frames
(`read_fetch`). Only the long poll is the node's: the call waits once, for all of them, until any coordinator
asked has frames past its fetch offset (or leadership ended there), or the wait's bound (Kafka's delayed fetch over
several partitions). The answer's frames are bounded as a whole too (`replica.fetch.response.max.bytes`): once
the bound is spent the remaining partitions are answered without frames (their high watermarks still go back), and
the follower node asks for them again at once.

Before answering, the call lingers (at most `replica.fetch.linger.ms`) for the writes its coordinators' leaders
had begun and not ended: one append tick writes every coordinator's group, each on its own thread with its own
fdatasync, so they end a little apart, and an answer sent at the first would carry one coordinator and leave the
rest to another round trip (and another append and apply round on the follower node). Only writes begun before
the linger count, so a leader writing without pause never holds an answer longer than the bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.base.clock import Clock
from coordinator.base.errors import ErrorCode
from coordinator.config.settings import Settings
from coordinator.runtime.replication.leader import LeaderReplication
from coordinator.runtime.replication.refusals import refused_fetch
from protos import internal_pb2 as internal

# The leader of a coordinator on this node, or why there is none (NOT_LEADER_OR_FOLLOWER's message).
LeaderOf = Callable[[int], LeaderReplication | str]


def response_bytes_max(settings: Settings, asked: int) -> int:
    """The frames one FetchLogs answer may carry: what the follower asked, within the setting and half the message
    bound (the other half leaves room for each partition's one frame always sent)."""
    bound = min(settings.replica_fetch_response_max_bytes, settings.request_max_bytes // 2)
    return min(asked, bound) if asked > 0 else bound


async def answer_fetch_logs(
    leader_of: LeaderOf, settings: Settings, clock: Clock, request: internal.FetchLogsRequest
) -> internal.FetchLogsResponse:
    started: list[tuple[internal.FetchLogRequest, LeaderReplication | None, internal.FetchLogResponse | None]] = []
    for partition in request.partitions:
        # The node's identity is the request's: a partition cannot fetch as another node.
        partition.replica_node_id = request.replica_node_id
        partition.replica_incarnation = request.replica_incarnation
        leader = leader_of(partition.coordinator_id)
        if isinstance(leader, str):
            started.append((partition, None, refused_fetch(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader)))
        else:
            started.append((partition, leader, leader.start_fetch(partition)))
    pending = [(partition.fetch_offset, leader) for partition, leader, early in started if leader and not early]
    answer_now = len(pending) < len(started) or any(leader.has_frames_after(offset) for offset, leader in pending)
    if pending and not answer_now and request.max_wait_ms > 0:
        await _wait_for_frames(
            [leader for _, leader in pending], min(request.max_wait_ms, settings.replica_fetch_wait_max_ms), clock
        )
    if pending and settings.replica_fetch_linger_ms > 0:
        await _linger_for_writes([leader for _, leader in pending], settings.replica_fetch_linger_ms, clock)
    budget = response_bytes_max(settings, request.max_bytes)
    response = internal.FetchLogsResponse()
    for partition, serving, early in started:
        if early is None:
            assert serving is not None
            leader = serving
            # A spent budget still answers: the high watermark and log end go back, the frames on the next call.
            max_bytes = min(max(partition.max_bytes, 1), budget) if budget > 0 else 0
            early = await leader.read_fetch(partition.fetch_offset, max_bytes)
            budget -= len(early.frames)
        early.coordinator_id = partition.coordinator_id
        response.partitions.append(early)
    return response


async def _wait_for_frames(leaders: list[LeaderReplication], wait_ms: int, clock: Clock) -> None:
    """Until any of `leaders` appends (or closes), or `wait_ms`; a cancelled call (the follower node asks again with
    another set of coordinators) stops waiting at once."""
    arrived = asyncio.Event()
    for leader in leaders:
        leader.add_data_listener(arrived.set)
    try:
        await clock.wait_event(arrived, wait_ms)
    finally:
        for leader in leaders:
            leader.remove_data_listener(arrived.set)


async def _linger_for_writes(leaders: list[LeaderReplication], linger_ms: int, clock: Clock) -> None:
    """Until every write `leaders` had begun has ended (appended, failed, or leadership ended), or `linger_ms`."""
    begun = [(leader, leader.writes_begun) for leader in leaders if not leader.wrote_through(leader.writes_begun)]
    if not begun:
        return
    ended = asyncio.Event()
    for leader, _ in begun:
        leader.add_data_listener(ended.set)
    deadline_ms = clock.monotonic_ms() + linger_ms
    try:
        while not all(leader.wrote_through(mark) for leader, mark in begun):
            left_ms = deadline_ms - clock.monotonic_ms()
            if left_ms <= 0:
                return
            ended.clear()
            await clock.wait_event(ended, left_ms)
    finally:
        for leader, _ in begun:
            leader.remove_data_listener(ended.set)
