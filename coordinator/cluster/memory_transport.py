"""Calls between nodes in this process (`transport.Transport`), for a simulated cluster, with a network's faults.

`MemoryNetwork` holds each running node's router by its address. A stub's call copies the request through its
bytes (no object is shared between nodes, as over a socket), runs the target router's handler for the method, and
copies the answer back: the handler is the one the RPC's row names (coordinator/edge/rpcs.py). What a network does
wrong is decided by the network's seeded random source, so a run replays from its seed: a call may be dropped
before it arrives or after it ran (its answer lost), delayed (on the clock), or delivered twice; two nodes may be
partitioned; a node that is down answers nothing. Every failure is the `grpc.aio.AioRpcError` a real channel
raises (UNAVAILABLE, DEADLINE_EXCEEDED), so callers take the paths they take over gRPC.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast, final

import grpc

from coordinator.base.clock import Clock
from coordinator.edge.rpcs import BY_METHOD, Stream
from protos import coordinator_pb2_grpc as pb_grpc
from protos import internal_pb2_grpc as internal_grpc


@dataclass(slots=True)
class NetworkFaults:
    """The share of calls each fault hits (0 to 1), and how long a delayed call waits, at most."""

    drop_request: float = 0.0
    drop_answer: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    delay_max_ms: int = 0


def _unavailable(details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def _copied(message: Any) -> Any:
    return type(message).FromString(message.SerializeToString())


@final
class MemoryNetwork:
    def __init__(self, clock: Clock, seed: int) -> None:
        self._clock = clock
        self.random = random.Random(seed)
        self._routers: dict[str, object] = {}
        self._bound: set[str] = set()  # addresses whose port is bound: a connect there is not refused
        self._partitioned: set[frozenset[str]] = set()
        self.faults = NetworkFaults()

    def bind(self, address: str) -> None:
        """The node at `address` holds its port from now on, before it joins (as `diskless serve` binds before it
        registers in etcd); calls are answered once it is attached."""
        self._bound.add(address)

    def attach(self, address: str, router: object) -> None:
        """The node at `address` answers from now on (it started)."""
        self._bound.add(address)
        self._routers[address] = router

    def detach(self, address: str) -> None:
        """The node at `address` answers nothing from now on, and its port is closed (it stopped or was killed)."""
        self._bound.discard(address)
        self._routers.pop(address, None)

    def partition(self, first: str, second: str) -> None:
        self._partitioned.add(frozenset((first, second)))

    def heal(self) -> None:
        self._partitioned.clear()

    def transport(self, address: str) -> MemoryTransport:
        """The transport of the node at `address`: its calls come from there."""
        return MemoryTransport(self, address)

    async def call(self, source: str, target: str, method: str, request: Any, timeout_s: float | None) -> Any:
        await self._maybe_delay()
        router = self._reachable(source, target, method)
        if self.random.random() < self.faults.drop_request:
            raise _unavailable(f"{method} to {target}: request lost")
        answer = await self._run(router, method, request, timeout_s)
        if self.random.random() < self.faults.duplicate:
            answer = await self._run(router, method, request, timeout_s)
        await self._maybe_delay()
        self._reachable(source, target, method)  # a partition or a crash meanwhile loses the answer
        if self.random.random() < self.faults.drop_answer:
            raise _unavailable(f"{method} to {target}: answer lost")
        return _copied(answer)

    def stream(self, source: str, target: str, method: str, request: Any) -> AsyncIterator[Any]:
        router = self._reachable(source, target, method)
        handler = cast(Callable[[Any], AsyncIterator[Any]], getattr(router, BY_METHOD[method].handler))
        return self._streamed(source, target, method, handler(_copied(request)))

    async def _streamed(self, source: str, target: str, method: str, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for item in items:
            self._reachable(source, target, method)
            yield _copied(item)

    async def _run(self, router: object, method: str, request: Any, timeout_s: float | None) -> Any:
        handler = cast(Callable[[Any], Any], getattr(router, BY_METHOD[method].handler))
        answer = handler(_copied(request))
        if isinstance(answer, Awaitable):
            try:
                return await asyncio.wait_for(answer, timeout_s)
            except TimeoutError:
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(), "deadline exceeded"
                ) from None
        return answer

    def _reachable(self, source: str, target: str, method: str) -> object:
        if frozenset((source, target)) in self._partitioned or source not in self._routers:
            raise _unavailable(f"{method} to {target}: no route from {source}")
        router = self._routers.get(target)
        if router is None:
            raise _unavailable(f"{method} to {target}: connection refused")
        return router

    def refuses(self, source: str, target: str) -> bool:
        """A connect from `source` to `target` is refused: nothing runs there (a partition times out instead)."""
        return frozenset((source, target)) not in self._partitioned and target not in self._bound

    async def _maybe_delay(self) -> None:
        if self.faults.delay_max_ms > 0 and self.random.random() < self.faults.delay:
            await self._clock.sleep_ms(self.random.randint(1, self.faults.delay_max_ms))


@final
class _Stream:
    """What a server-streaming call returns over gRPC, as the caller uses it: iterated, then cancelled."""

    def __init__(self, items: AsyncIterator[Any]) -> None:
        self._items = items

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._items

    def cancel(self) -> bool:
        return True


@final
class _RequestStream:
    """A stream of requests as the caller uses it over gRPC (write, read, cancel): each request is one call in memory,
    with the network's faults; a lost one ends the stream (the caller opens another)."""

    def __init__(self, network: MemoryNetwork, source: str, target: str, method: str) -> None:
        self._network, self._source, self._target, self._method = network, source, target, method
        self._written: list[Any] = []
        self._ended: grpc.aio.AioRpcError | None = None

    async def write(self, request: Any) -> None:
        self._written.append(request)

    async def read(self) -> Any:
        if self._ended is not None:
            raise self._ended
        try:
            return await self._network.call(self._source, self._target, self._method, self._written.pop(0), None)
        except grpc.aio.AioRpcError as error:
            self._ended = error
            raise

    def cancel(self) -> bool:
        self._ended = _unavailable(f"{self._method} to {self._target}: cancelled")
        return True


@final
class _Stub:
    """Any method of a service: a unary call returns an awaitable answer, a stream an iterable call."""

    def __init__(self, network: MemoryNetwork, source: str, target: str) -> None:
        self._network, self._source, self._target = network, source, target

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if BY_METHOD[method].stream is Stream.EACH_REQUEST:
            return lambda timeout=None: _RequestStream(self._network, self._source, self._target, method)
        if BY_METHOD[method].streams:
            return lambda request, timeout=None: _Stream(
                self._network.stream(self._source, self._target, method, request)
            )
        # Metadata (a forwarded caller's principal) means nothing here: no ACL in memory.
        return lambda request, timeout=None, metadata=None: self._network.call(
            self._source, self._target, method, request, timeout
        )


@final
class MemoryTransport:
    def __init__(self, network: MemoryNetwork, address: str) -> None:
        self._network = network
        self._address = address

    def internal_stub(self, target: str) -> internal_grpc.CoordinatorInternalAsyncStub:
        # The same calls as gRPC's stub, made in memory: typed as the stub its callers expect.
        return cast("internal_grpc.CoordinatorInternalAsyncStub", _Stub(self._network, self._address, target))

    def coordinator_stub(self, target: str) -> pb_grpc.DisklessCoordinatorAsyncStub:
        return cast("pb_grpc.DisklessCoordinatorAsyncStub", _Stub(self._network, self._address, target))

    async def refuses_connections(self, target: str, timeout_ms: int) -> bool:
        return self._network.refuses(self._address, target)

    async def close(self) -> None:
        return None
