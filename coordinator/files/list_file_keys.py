"""ListFileKeys: every object key a coordinator knows, streamed in pages from one snapshot (DESIGN §7).

The orphan scan anti-joins its listing of object storage against these keys, as
Iceberg's DeleteOrphanFiles does against the files its metadata knows, and
re-checks each key it would delete with DescribeFiles just before deleting it.
One snapshot serves every page of a stream (a `DetachedRead`): each file row of
that moment is in exactly one page, whatever is committed, handed over or
deleted while the stream runs.

Only the coordinator's leader answers (NOT_COORDINATOR on a follower): its state
holds every commit it acknowledged, since a commit is answered only once
applied, where a follower's state may lag. The stream ends with an error page
when the coordinator stops leading or changes epoch under it, when it reloads
(its files close, and the read with them), or once it has run longer than
`diskless.coordinator.file.keys.stream.max.ms`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import final

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, MalformedRequest, Overloaded
from coordinator.config.settings import Settings, property_name
from coordinator.machine.state import file_reads, reads
from coordinator.machine.state.detached_read import DetachedReadClosed
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import CoordinatorShard
from protos import coordinator_pb2 as pb


def request_problem(request: pb.ListFileKeysRequest, coordinators: int, settings: Settings) -> str | None:
    """Why the request cannot be answered at all (INVALID_ARGUMENT), or None."""
    if not 0 <= request.coordinator_id < coordinators:
        return f"coordinator_id must be 0..{coordinators - 1} (the coordinators), got {request.coordinator_id}"
    page_max_keys = settings.file_keys_page_max_keys
    if not 0 <= request.page_max_keys <= page_max_keys:
        return (
            f"page_max_keys must be 0..{page_max_keys} ({property_name('file_keys_page_max_keys')}; 0 for that "
            f"maximum), got {request.page_max_keys}"
        )
    return None


def page_bounds(request: pb.ListFileKeysRequest, settings: Settings) -> tuple[int, int]:
    """(keys, key bytes) one page carries at most: half the message bound leaves room for the page's framing."""
    return request.page_max_keys or settings.file_keys_page_max_keys, settings.request_max_bytes // 2


def error_page(coordinator_id: int, error_code: ErrorCode, message: str) -> pb.ListFileKeysPage:
    return pb.ListFileKeysPage(
        coordinator_id=coordinator_id, error_code=wire_code(error_code), error_message=message, last=True
    )


@final
class FileKeyStreams:
    """The node's ListFileKeys streams: at most `file_keys_streams_max` at once, each on one snapshot."""

    def __init__(self, coordinators: NodeCoordinators, clock: Clock) -> None:
        self._coordinators = coordinators
        self._clock = clock
        self.open_streams = 0

    async def list_file_keys(self, request: pb.ListFileKeysRequest) -> AsyncGenerator[pb.ListFileKeysPage, None]:
        settings = self._coordinators.settings
        problem = request_problem(request, len(self._coordinators.shards), settings)
        if problem:
            raise MalformedRequest(problem)
        if self.open_streams >= settings.file_keys_streams_max:
            raise Overloaded(
                f"{self.open_streams} ListFileKeys streams are open on this node, its bound "
                f"({property_name('file_keys_streams_max')}={settings.file_keys_streams_max}); retry with backoff"
            )
        shard = self._coordinators.shard(request.coordinator_id)
        try:
            shard.require_leader()
        except CoordinatorUnavailable as error:
            yield error_page(request.coordinator_id, error.error_code, error.message)
            return
        self.open_streams += 1
        try:
            async with contextlib.aclosing(self._pages(shard, *page_bounds(request, settings))) as pages:
                async for page in pages:
                    yield page
        finally:
            self.open_streams -= 1

    async def _pages(
        self, shard: CoordinatorShard, max_keys: int, max_bytes: int
    ) -> AsyncGenerator[pb.ListFileKeysPage, None]:
        coordinator_id, epoch = shard.coordinator_id, shard.leader_epoch
        started_ms = self._clock.now_ms()
        snapshot = shard.open_detached_read()
        try:
            applied_offset = await snapshot.read(reads.applied_offset)  # the first read takes the snapshot
            keys = await snapshot.read(file_reads.file_keys)
            count = 0
            while True:
                interruption = self._interruption(shard, epoch, started_ms)
                if interruption is not None:
                    yield error_page(coordinator_id, *interruption)
                    return
                page = await snapshot.read(lambda _: file_reads.next_key_page(keys, max_keys, max_bytes))
                count += len(page.object_keys)
                yield pb.ListFileKeysPage(
                    coordinator_id=coordinator_id, leader_epoch=epoch, applied_offset=applied_offset,
                    object_keys=page.object_keys, states=page.states, last=page.exhausted,
                    key_count=count if page.exhausted else 0,
                )  # fmt: skip
                if page.exhausted:
                    return
        except DetachedReadClosed:
            message = f"coordinator {coordinator_id} closed its state during the stream (a reload or a stop); retry"
            yield error_page(coordinator_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, message)
        except reads.DAMAGE_ERRORS as error:
            damaged = self._coordinators.damaged(shard, error)
            yield error_page(coordinator_id, damaged.error_code, damaged.message)
        finally:
            snapshot.close()

    def _interruption(self, shard: CoordinatorShard, epoch: int, started_ms: int) -> tuple[ErrorCode, str] | None:
        """Why the stream must end before its next page, or None."""
        try:
            shard.require_leader()
        except CoordinatorUnavailable as error:
            return error.error_code, error.message
        if shard.leader_epoch != epoch:
            return ErrorCode.NOT_COORDINATOR, (
                f"coordinator {shard.coordinator_id} moved from leader epoch {epoch} to {shard.leader_epoch} "
                "during the stream; retry"
            )
        elapsed_ms = self._clock.now_ms() - started_ms
        max_ms = self._coordinators.settings.file_keys_stream_max_ms
        if elapsed_ms > max_ms:
            return ErrorCode.REQUEST_TIMED_OUT, (
                f"the stream ran {elapsed_ms} ms, past {property_name('file_keys_stream_max_ms')}={max_ms}: its "
                "snapshot holds the state's WAL checkpoints back; read it faster (or raise the bound)"
            )
        return None
