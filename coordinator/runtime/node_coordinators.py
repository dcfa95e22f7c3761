"""The node's coordinators as the operations see them: routing items, admission, running parts, waiting.

Every list in a request gets one result per item, in request order. Items
whose coordinator is not here, or cannot serve now, get that coordinator's
error; the others go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, final

import apsw

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, MalformedRequest, Overloaded
from coordinator.base.logging_output import EveryInterval
from coordinator.base.metrics import Metrics
from coordinator.base.result import ItemError
from coordinator.config.settings import Settings, property_name
from coordinator.machine.catalog import TopicCatalog
from coordinator.machine.state.reads import DAMAGE_ERRORS
from coordinator.machine.topic_names import topic_id_problem
from coordinator.runtime.replication.role import RoleKind
from coordinator.runtime.shard import CoordinatorShard, Operation, ShardState
from protos import coordinator_pb2 as pb

log = logging.getLogger(__name__)

OVERLOAD_LOG_INTERVAL_S = 10.0  # one overload line per coordinator per interval, with the count it stood for
REQUEST_TIMED_OUT_MESSAGE = "the operation did not complete within the request's timeout; it may still complete"

RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")
T = TypeVar("T")

# For a coordinator another process of this node leads (coordinator/node/processes/): why it cannot serve now, or None.
Elsewhere = Callable[[int], CoordinatorUnavailable | None]

Route = int | ItemError  # the coordinator holding an item's partition, or the item's error


class ItemResult(Protocol):
    """A per-item result of a response: every one carries an error code and message."""

    error_code: pb.ErrorCode
    error_message: str


def wire_code(code: ErrorCode) -> pb.ErrorCode:
    """The contract's enum for an error code (the same number: ErrorCode mirrors the contract)."""
    return code


class ItemOutcome(Protocol):
    """An error code with its message: ItemError, CoordinatorUnavailable, a check's per-item outcome."""

    @property
    def error_code(self) -> ErrorCode: ...

    @property
    def message(self) -> str: ...


class ReadableCoordinator(Protocol):
    """A coordinator as a committed read sees it: whether it may be read now, and a read transaction on its state."""

    @property
    def coordinator_id(self) -> int: ...

    def require_active(self) -> None: ...

    def read_transaction(self) -> AbstractContextManager[apsw.Connection]: ...


ReadableT = TypeVar("ReadableT", bound=ReadableCoordinator)


class ReadingCoordinators(Protocol[ReadableT]):
    """What a committed read (FindBatches) needs of the coordinators it reads: the node's own (NodeCoordinators)
    or a reader process's view of their state files (coordinator/reads/readers/state_files.py); one set of read
    rules for both."""

    @property
    def settings(self) -> Settings: ...

    def limit_items(self, count: int, what: str) -> None: ...

    def route(self, topic_id: bytes, partitions: Sequence[int]) -> list[Route]: ...

    def route_missed(self, topic_id: bytes) -> None:
        """The coordinator a route named does not hold the partition (moved out since, design §5a): a route kept
        from before is stale and looked up again by the next call."""

    def shard(self, coordinator_id: int) -> ReadableT: ...

    def damaged(self, shard: ReadableT, error: Exception) -> CoordinatorUnavailable: ...


def limit_items(settings: Settings, count: int, what: str) -> None:
    """Refuses a call carrying more items than diskless.coordinator.request.max.items (INVALID_ARGUMENT)."""
    if count > settings.request_max_items:
        raise MalformedRequest(
            f"{count} {what} in one call, more than {property_name('request_max_items')} ({settings.request_max_items})"
        )


def unknown_partition_error(partition: int) -> ItemError:
    return ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {partition} of the topic is unknown")


def not_in_service_error(partition: int, error: CoordinatorUnavailable) -> ItemError:
    """A partition the catalog lacks while a coordinator is out of service: that coordinator's retriable error."""
    return ItemError(error.error_code, f"partition {partition} may be on a coordinator not in service: {error}")


def damaged_error(coordinator_id: int, error: Exception) -> CoordinatorUnavailable:
    return CoordinatorUnavailable(
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        f"coordinator {coordinator_id} found its state damaged ({type(error).__name__}: {error}) and is "
        "rebuilding it; retry",
    )


def set_error(result: ItemResult, error: ItemOutcome) -> None:
    """Answers an item with a code (NONE too) and its message."""
    result.error_code = wire_code(error.error_code)
    result.error_message = error.message


@final
class NodeCoordinators:
    """The coordinators hosted here and the catalog that says which one holds each partition."""

    def __init__(
        self,
        shards: Sequence[CoordinatorShard],
        catalog: TopicCatalog,
        settings: Settings,
        metrics: Metrics,
        elsewhere: Elsewhere | None = None,
    ) -> None:
        self.shards = list(shards)
        self.catalog = catalog
        self.settings = settings
        self.metrics = metrics
        self._elsewhere = elsewhere
        self._overload_log = EveryInterval(OVERLOAD_LOG_INTERVAL_S)

    def shard(self, coordinator_id: int) -> CoordinatorShard:
        return self.shards[coordinator_id]

    def hosts(self, coordinator_id: int) -> bool:
        return 0 <= coordinator_id < len(self.shards)

    def limit_items(self, count: int, what: str) -> None:
        limit_items(self.settings, count, what)

    def timeout_s(self, timeout_ms: int) -> float:
        chosen = timeout_ms if timeout_ms > 0 else self.settings.request_timeout_ms
        return min(chosen, self.settings.request_timeout_max_ms) / 1000

    # ------------------------------------------------------------------ routing

    def route(self, topic_id: bytes, partitions: Iterable[int]) -> list[Route]:
        """Per partition of one topic of a request: its coordinator, or the item's error.

        A malformed topic id is INVALID_REQUEST for every item of the topic; a partition the catalog
        lacks is unknown (see `unknown_partition`).
        """
        problem = topic_id_problem(topic_id)
        if problem:
            malformed = ItemError(ErrorCode.INVALID_REQUEST, problem)
            return [malformed for _ in partitions]
        entry = self.catalog.topic(topic_id)
        assignment: Mapping[int, int] = {} if entry is None else entry.partitions
        routes: list[Route] = []
        for partition in partitions:
            coordinator_id = assignment.get(partition)
            routes.append(self.unknown_partition(partition) if coordinator_id is None else coordinator_id)
        return routes

    def route_missed(self, topic_id: bytes) -> None:
        """Nothing to drop: the node's catalog follows every move as the logs record it."""

    def unknown_partition(self, partition: int) -> ItemError:
        """A partition the catalog lacks is unknown only if every coordinator could say so.

        While a coordinator is out of service its partitions are missing from the catalog; a broker told
        UNKNOWN_TOPIC_OR_PARTITION would tell its clients the topic does not exist, so it gets that
        coordinator's retriable error instead.
        """
        for shard in self.shards:
            error = self._unavailable(shard)
            if error is not None:
                return not_in_service_error(partition, error)
        return unknown_partition_error(partition)

    def absent(self) -> list[CoordinatorShard]:
        """The coordinators of a cluster this node holds no replica of (`topics/absent.py` asks their leaders)."""
        return [
            s for s in self.shards
            if s.role is not None and s.role.kind is RoleKind.NOT_REPLICA and s.role.node_id not in s.role.replicas
        ]  # fmt: skip

    def unavailable_for_topic_changes(self) -> ItemError | None:
        """Topic-wide rules need every coordinator's partitions: why not now, or None. Those of coordinators this
        node holds no replica of were asked of their leaders first (`topics/absent.py`)."""
        absent = {s.coordinator_id for s in self.absent()}
        for shard in self.shards:
            if shard.coordinator_id in absent:
                continue
            error = self._unavailable(shard, writing=True)
            if error is not None:
                return ItemError(error.error_code, f"topic changes wait for every coordinator: {error.message}")
        return None

    def _unavailable(self, shard: CoordinatorShard, writing: bool = False) -> CoordinatorUnavailable | None:
        """Why the coordinator cannot say what it holds now (led by another process of this node: as it says).

        `writing`: for a change its leader checks again in its pipeline, which queues behind a new leader's
        unapplied log rather than refusing it."""
        role = shard.role
        if self._elsewhere is not None and role is not None and role.kind is RoleKind.NOT_REPLICA:
            return self._elsewhere(shard.coordinator_id)
        try:
            shard.require_serving() if writing else shard.require_active()
        except CoordinatorUnavailable as error:
            return error
        return None

    async def read_at_leaders(
        self,
        topics: Iterable[Any],
        add_topic: Callable[[bytes], Any],
        read: Callable[[apsw.Connection, bytes, Any], None],
        forget: Callable[[Any], None] = lambda _: None,
    ) -> None:
        """Strict reads per partition (DescribeProducers, DescribeDisklessLogs): `topics` (topic_id, partitions)
        answered in the topic results `add_topic` makes, each partition by `read` from its coordinator's leader once
        what was pending there is applied, one read transaction per coordinator. An item whose route, barrier or
        state fails gets that error (`forget` first drops what `read` had set on it)."""
        topics = list(topics)
        self.limit_items(sum(len(t.partitions) for t in topics), "partitions")
        pending: dict[int, list[tuple[bytes, Any]]] = {}
        for topic in topics:
            topic_result = add_topic(topic.topic_id)
            routes = self.route(topic.topic_id, list(topic.partitions))
            for partition, route in zip(topic.partitions, routes, strict=True):
                result = topic_result.partitions.add(partition=partition)
                if isinstance(route, ItemError):
                    set_error(result, route)
                else:
                    pending.setdefault(route, []).append((topic.topic_id, result))
        barriers = await self.wait_all_applied(list(pending), 0, leader_only=True)
        for coordinator_id, its in pending.items():
            failure = barriers.get(coordinator_id)
            if failure is not None:
                for _, result in its:
                    set_error(result, failure)
                continue
            shard = self.shard(coordinator_id)
            try:
                with shard.read_transaction() as db:
                    for topic_id, result in its:
                        read(db, topic_id, result)
            except DAMAGE_ERRORS as error:
                damaged = self.damaged(shard, error)
                for _, result in its:
                    forget(result)
                    set_error(result, damaged)

    def damaged(self, shard: CoordinatorShard, error: Exception) -> CoordinatorUnavailable:
        """A read met damage in a coordinator's state: out of service it goes, to rebuild (DESIGN §6)."""
        shard.report_damage(error)
        return damaged_error(shard.coordinator_id, error)

    # ------------------------------------------------------------------ running parts

    def require_room(self, coordinator_ids: Iterable[int]) -> None:
        """Refuses the call before anything is queued when any coordinator's queue is full."""
        for coordinator_id in coordinator_ids:
            shard = self.shard(coordinator_id)
            if shard.state is ShardState.ACTIVE and not shard.has_room():
                self.metrics.overloaded_calls.labels(str(coordinator_id)).inc()
                if self._overload_log.allow(coordinator_id):
                    log.warning(
                        "coordinator %d overloaded: queue full (%d), refusing calls with RESOURCE_EXHAUSTED "
                        "(%d more refusals since the last line)",
                        coordinator_id,
                        self.settings.queue_max_operations,
                        self._overload_log.take_suppressed(coordinator_id),
                    )
                raise Overloaded(
                    f"coordinator {coordinator_id}'s queue is full ({property_name('queue_max_operations')}="
                    f"{self.settings.queue_max_operations}); retry with backoff"
                )

    async def run_parts(
        self,
        operations: Mapping[int, Operation[RequestT, ResponseT]],
        timeout_ms: int,
        may_linger: bool = False,
    ) -> dict[int, ResponseT | CoordinatorUnavailable]:
        """Submits one operation per coordinator; returns per coordinator its response or its error.

        Coordinators that refused at once come first, then the others in the order given. Operations with a
        prefetch have it run first (all at once, within the call's timeout; the rest of it is left for the parts).
        """
        timeout_s = self.timeout_s(timeout_ms)
        prefetches = [
            asyncio.ensure_future(self.shard(coordinator_id).prefetch(operation.prefetch_read()))
            for coordinator_id, operation in operations.items()
            if operation.prefetch is not None and self.hosts(coordinator_id)
        ]
        for prefetch in prefetches:
            prefetch.add_done_callback(_consume)  # a hint: whatever becomes of it, nobody waits for its outcome
        if prefetches:
            started = asyncio.get_running_loop().time()
            # Not cancelled past the timeout: a read on its thread goes on regardless, and ends on its own.
            await asyncio.wait(prefetches, timeout=timeout_s)
            timeout_s = max(0.0, timeout_s - (asyncio.get_running_loop().time() - started))
        futures: dict[int, asyncio.Future[ResponseT]] = {}
        outcomes: dict[int, ResponseT | CoordinatorUnavailable] = {}
        for coordinator_id, operation in operations.items():
            try:
                futures[coordinator_id] = self.shard(coordinator_id).submit(operation, may_linger)
            except CoordinatorUnavailable as error:
                outcomes[coordinator_id] = error
        if futures:
            try:
                await asyncio.wait(futures.values(), timeout=timeout_s)
            except asyncio.CancelledError:
                # The caller went (its RPC's deadline): the operations stay queued and are answered later, an error
                # too (the ISR shrank after the append), which nobody would then retrieve.
                for future in futures.values():
                    future.add_done_callback(_consume)
                raise
        for coordinator_id, future in futures.items():
            outcome = _outcome(future)
            outcomes[coordinator_id] = outcome
        return outcomes

    async def wait_all_applied(
        self, coordinator_ids: Sequence[int], timeout_ms: int, leader_only: bool = False
    ) -> dict[int, CoordinatorUnavailable]:
        """Waits until each coordinator has applied what was pending now; returns the ones that could not.

        `leader_only`: a follower answers NOT_COORDINATOR (ListOffsets goes to the leader, DESIGN §6a).
        """
        failures: dict[int, CoordinatorUnavailable] = {}
        waits: dict[int, asyncio.Task[None]] = {}
        for coordinator_id in coordinator_ids:
            shard = self.shard(coordinator_id)
            try:
                shard.require_leader() if leader_only else shard.require_active()
            except CoordinatorUnavailable as error:
                failures[coordinator_id] = error
                continue
            waits[coordinator_id] = asyncio.ensure_future(shard.wait_applied(shard.speculative_end_offset))
        if waits:
            await asyncio.wait(waits.values(), timeout=self.timeout_s(timeout_ms))
        for coordinator_id, task in waits.items():
            if not task.done():
                task.cancel()
            outcome = _outcome(task)
            if isinstance(outcome, CoordinatorUnavailable):
                failures[coordinator_id] = outcome
                continue
            try:
                self.shard(coordinator_id).require_active()
            except CoordinatorUnavailable as unavailable:
                failures[coordinator_id] = unavailable
        return failures


def _outcome(future: asyncio.Future[T]) -> T | CoordinatorUnavailable:
    """A part's response, or its error: timed out (it may still complete), unavailable, or failed."""
    if future.cancelled() or not future.done():
        future.add_done_callback(_consume)
        return CoordinatorUnavailable(ErrorCode.REQUEST_TIMED_OUT, REQUEST_TIMED_OUT_MESSAGE)
    error = future.exception()
    if error is None:
        return future.result()
    if isinstance(error, CoordinatorUnavailable):
        return error
    return CoordinatorUnavailable(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(error).__name__}: {error}")


def _consume(future: asyncio.Future[T]) -> None:
    """Retrieves a late future's outcome so a timed-out caller leaves no unobserved exception."""
    if not future.cancelled():
        future.exception()
