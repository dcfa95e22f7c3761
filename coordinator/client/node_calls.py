"""Calls to the nodes, under the routing client (`routing_client.py`): the channels, one call to one address,
a call to whichever node answers, and the routing questions (FindCoordinator, DescribeCoordinators) that fill the
routing table. The routing client builds on it the split, routed operations.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Self

import grpc

from coordinator.base.backoff import Backoff
from coordinator.client.channels import ChannelPool, decode_answer
from coordinator.client.request_parts import PartitionKey
from coordinator.client.routes import CoordinatorRoute, RoutingTable, parse_bootstrap
from coordinator.edge.access_control import FORWARDED_FOR
from coordinator.edge.rpcs import BY_METHOD, ServedBy, Service
from protos import admin_pb2_grpc as admin_grpc
from protos import coordinator_pb2 as pb

DEADLINE_MS_DEFAULT = 30_000
RPC_TIMEOUT_MS_DEFAULT = 10_000
BACKOFF_INITIAL_MS_DEFAULT = 20
# 250 ms, not Kafka's 1 s `retry.backoff.max.ms`: a failover ends within one refresh of a death seen by a peer
# (`cluster/peer_death.py`), and a 1 s cap left commits waiting up to a second past the new leader. The cost is
# bounded: at most 4 tries a second per waiting call while no node serves its coordinator.
BACKOFF_MAX_MS_DEFAULT = 250
# Each wait is drawn in [1 - this, 1] of the backoff's, so that the brokers a failover refused together do not all
# come back in the same millisecond (Kafka's client backoff jitters 20% either way; here only down: the cap stays one).
BACKOFF_JITTER = 0.2
CHANNELS_MAX_DEFAULT = 64
MESSAGE_MAX_BYTES_DEFAULT = 64 * 1024 * 1024
CHANNEL_CLOSE_GRACE_MS_DEFAULT = 1_000
# Statuses meaning the call never ran (the contract: UNAVAILABLE while a node shuts down; also a refused connection).
RETRIED_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE})
READER_METHOD = "FindBatches"  # the one method a replica's reader processes serve


class RoutingError(Exception):
    """No node could be reached for part of a call before its deadline; the message names the addresses and why."""


class DeadlinePassed(str):
    """Why a try reached no node: the call's own deadline passed (before it was sent, or gRPC's DEADLINE_EXCEEDED at
    it). An item a node had already answered keeps that answer: the call ends with its last error, as a broker's
    bounded retries do, rather than with a RoutingError."""


class NodeCalls:
    """The routing client's connection layer: channels, calls to one node, and the routing questions."""

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        credentials: grpc.ChannelCredentials | None = None,
        read_node_id: int | None = None,
        deadline_ms: int = DEADLINE_MS_DEFAULT,
        rpc_timeout_ms: int = RPC_TIMEOUT_MS_DEFAULT,
        backoff_initial_ms: int = BACKOFF_INITIAL_MS_DEFAULT,
        backoff_max_ms: int = BACKOFF_MAX_MS_DEFAULT,
        channels_max: int = CHANNELS_MAX_DEFAULT,
        message_max_bytes: int = MESSAGE_MAX_BYTES_DEFAULT,
        channel_close_grace_ms: int = CHANNEL_CLOSE_GRACE_MS_DEFAULT,
        retry: bool = True,
        metadata: Sequence[tuple[str, str]] = (),
        caller: Callable[[], str | None] | None = None,
        jitter: random.Random | None = None,
    ) -> None:
        """`retry=False`: one try per item, retriable answers kept; `metadata` goes with every call; `caller`: the
        principal each call is passed on for, as `diskless-forwarded-for` (all three for a node's first process
        passing calls on to its commit processes); `jitter`: the random source of the backoff's jitter (seeded in
        tests)."""
        self.bootstrap = parse_bootstrap(bootstrap)
        if deadline_ms <= 0 or rpc_timeout_ms <= 0 or channels_max < 1 or message_max_bytes <= 0:
            raise ValueError(
                f"deadline_ms, rpc_timeout_ms and message_max_bytes must be > 0 and channels_max >= 1, got "
                f"{deadline_ms}, {rpc_timeout_ms}, {message_max_bytes}, {channels_max}"
            )
        Backoff(backoff_initial_ms, backoff_max_ms)  # validates the pair now, not at the first failure
        self.deadline_ms = deadline_ms
        self.rpc_timeout_ms = rpc_timeout_ms
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self._channels = ChannelPool(credentials, message_max_bytes, channels_max, channel_close_grace_ms)
        self._table = RoutingTable(read_node_id)
        self._answered_by: str | None = None  # the last node that answered a routing question
        self._next_bootstrap = 0
        self._refreshing = asyncio.Lock()
        self._retry = retry
        self._fixed_metadata = tuple(metadata)
        self._caller = caller
        self._jitter = jitter if jitter is not None else random.Random()
        # Calls sent, by method (every try, routing questions included): what a broker's metrics would count, and
        # how the produce-gateway benchmark measures commit calls per WAL file.
        self.calls_sent: Counter[str] = Counter()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every channel (in-flight calls get the grace period)."""
        await self._channels.close()

    # ------------------------------------------------------------------ what is cached

    def routes(self) -> dict[int, CoordinatorRoute]:
        """The cached route of each coordinator (a copy)."""
        return dict(self._table.routes)

    @property
    def single_address(self) -> str | None:
        """The one address serving every known route, when the fast path is on."""
        return self._table.single_address

    # ------------------------------------------------------------------ calls

    async def _fast_path(self, method: str, request: Any, deadline: float) -> tuple[Any, bool] | None:
        """(answer, whether an item may be retriable) from the one address; None if there is none or it failed."""
        address = self._table.single_address
        if address is None:
            return None
        reader = self._table.readers.pick(address, time.monotonic()) if method == READER_METHOD else None
        if reader is not None:
            answered = await self._send_raw(reader, method, request, deadline)
            if answered is not None:
                return answered
            self._table.readers.unreachable(reader, time.monotonic())  # the node itself answers meanwhile
        answered = await self._send_raw(address, method, request, deadline)
        if answered is None:
            self._table.forget_address(address)
        return answered

    def _call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        caller = self._caller() if self._caller is not None else None
        metadata = self._fixed_metadata + (((FORWARDED_FOR, caller),) if caller is not None else ())
        return metadata or None

    async def _send_raw(self, address: str, method: str, request: Any, deadline: float) -> tuple[Any, bool] | None:
        """The answer decoded on the fast path's terms; None when the address did not answer (UNAVAILABLE)."""
        timeout_s = min(self.rpc_timeout_ms / 1000, deadline - time.monotonic())
        self.calls_sent[method] += 1
        try:
            raw: bytes = await (await self._channels.get(address)).raw(method)(
                request, timeout=timeout_s, metadata=self._call_metadata()
            )
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRIED_STATUS:
                raise
            return None
        return decode_answer(method, raw)

    def next_wait_ms(self, backoff: Backoff) -> float:
        """Counts a failure; the wait before the next try: the backoff's, jittered down by up to BACKOFF_JITTER."""
        return backoff.failed() * self._jitter.uniform(1 - BACKOFF_JITTER, 1)

    async def _wait_to_retry(self, backoff: Backoff, deadline: float) -> bool:
        """Sleeps the next backoff wait; False when it would end past the deadline, or retries are off."""
        if not self._retry:
            return False
        wait_s = self.next_wait_ms(backoff) / 1000
        if time.monotonic() + wait_s >= deadline:
            return False
        await asyncio.sleep(wait_s)
        return True

    # ------------------------------------------------------------------ routes

    async def _refresh(self, keys: Sequence[PartitionKey], deadline: float, everything: bool) -> str | None:
        """Asks FindCoordinator about `keys` (and DescribeCoordinators when `everything`); why no node answered."""
        async with self._refreshing:  # concurrent callers wait for one refresh rather than repeat it
            keys = [k for k in keys if self._table.address_of(k, ServedBy.LEADER) is None]  # no route known
            if not keys and not (everything and not self._table.coordinators_known):
                return None
            problems = []
            for address in self._routing_candidates():
                answer = await self._ask_routes(address, keys, everything, deadline)
                if isinstance(answer, str):
                    problems.append(answer)
                    self._next_bootstrap += 1  # the next refresh starts from another bootstrap node
                    continue
                self._answered_by = address
                return None
            return "no node answered FindCoordinator: " + "; ".join(problems)

    async def _ask_routes(
        self, address: str, keys: Sequence[PartitionKey], everything: bool, deadline: float
    ) -> str | None:
        calls = []
        if keys:
            topics: dict[bytes, list[int]] = {}
            for topic_id, partition in dict.fromkeys(keys):
                topics.setdefault(topic_id, []).append(partition)
            request = pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=t, partitions=p) for t, p in topics.items()]
            )
            calls.append(self._send(address, "FindCoordinator", request, deadline))
        if everything:
            calls.append(self._send(address, "DescribeCoordinators", pb.DescribeCoordinatorsRequest(), deadline))
        answers = await asyncio.gather(*calls)
        failed = [a for a in answers if isinstance(a, str)]
        if failed:
            self._table.forget_address(address)
            return failed[0]
        if keys:
            self._table.learn_found(answers[0], address)
        if everything:
            self._table.learn_described(answers[-1], address)
        return None

    def _routing_candidates(self) -> list[str]:
        """Bootstrap nodes (starting after the last that failed), then every node a route names."""
        start = self._next_bootstrap % len(self.bootstrap)
        ordered = [*self.bootstrap[start:], *self.bootstrap[:start]]
        return list(dict.fromkeys([*ordered, *self._table.addresses()]))

    # ------------------------------------------------------------------ calls and channels

    def _deadline(self) -> float:
        return time.monotonic() + self.deadline_ms / 1000

    async def _any_node(self, method: str, request: object) -> Any:
        """The call to the first node that answers (the last that answered first), retried until the deadline."""
        deadline = self._deadline()
        backoff = Backoff(self.backoff_initial_ms, self.backoff_max_ms)
        while True:
            candidates = self._routing_candidates()
            if self._answered_by is not None:
                candidates = list(dict.fromkeys([self._answered_by, *candidates]))
            problems = []
            for address in candidates:
                answer = await self._send(address, method, request, deadline)
                if not isinstance(answer, str):
                    self._answered_by = address
                    return answer
                problems.append(answer)
            if not await self._wait_to_retry(backoff, deadline):
                raise RoutingError(f"{method}: no node answered within {self.deadline_ms} ms: " + "; ".join(problems))

    async def _send_read(self, address: str, method: str, request: object, deadline: float) -> Any:
        """As `_send`; FindBatches goes to one of the replica's readers first, if it has any reachable."""
        reader = self._table.readers.pick(address, time.monotonic()) if method == READER_METHOD else None
        if reader is not None:
            answer = await self._send(reader, method, request, deadline)
            if not isinstance(answer, str):
                return answer
            self._table.readers.unreachable(reader, time.monotonic())
        return await self._send(address, method, request, deadline)

    async def _send(self, address: str, method: str, request: object, deadline: float) -> Any:
        """The answer, or why the node could not be reached (a string); other failures raise."""
        timeout_s = min(self.rpc_timeout_ms / 1000, deadline - time.monotonic())
        if timeout_s <= 0:
            return DeadlinePassed(f"{address}: the call's deadline passed")
        channel = await self._channels.get(address)
        admin = BY_METHOD[method].service is Service.ADMIN
        stub = admin_grpc.CoordinatorAdminStub(channel.channel) if admin else channel.stub
        self.calls_sent[method] += 1
        try:
            return await getattr(stub, method)(request, timeout=timeout_s, metadata=self._call_metadata())
        except grpc.aio.AioRpcError as error:
            if error.code() in RETRIED_STATUS:
                return f"{address}: {error.code().name} {error.details()}"
            if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() >= deadline:
                return DeadlinePassed(f"{address}: the call's deadline passed ({error.details()})")
            raise
