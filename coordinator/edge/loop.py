"""The gRPC server's own event loop, in a thread of its own, beside the node's loop.

grpc.aio hands a call to the program only as its event loop takes it up, a few loop
iterations per call. On the node's loop, where checks and applies run in stretches of
10-15 ms under large commits, that is a few dozen calls a second: under overload the
excess waited inside gRPC until gRPC cancelled it (CANCELLED, never seen by the node).
On a loop that only takes calls up, admits or refuses them and parses them, the excess
gets RESOURCE_EXHAUSTED within milliseconds, and the node's loop runs only admitted work.

One process still holds one interpreter lock: this buys promptness, not parallelism.
Everything the node owns (router, coordinators, clocks) stays on the node's loop; what
crosses is an admitted call's work (`NodeHop`) and the server's own chores (`EdgeLoop.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar, final

import uvloop

from coordinator.base.invariants import check_invariant

T = TypeVar("T")
START_TIMEOUT_S = 10.0
JOIN_TIMEOUT_S = 10.0


@final
class EdgeLoop:
    """An event loop in a daemon thread for the gRPC server (see the module's docstring)."""

    def __init__(self, name: str = "grpc-edge") -> None:
        self.loop = uvloop.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        check_invariant(self._started.wait(START_TIMEOUT_S), "the edge loop did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs `work` on the edge loop and waits for it on the calling (node's) loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    def close(self) -> None:
        """Stops the loop (once the server on it has stopped) and waits for its thread, within a bound."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(JOIN_TIMEOUT_S)


@final
class NodeHop:
    """Runs an admitted call's work on the node's loop and waits for it on the edge loop.

    A caller gone cancels the edge's wait, which cancels the work on the node's loop, as when both ran on one.
    """

    def __init__(self, node_loop: asyncio.AbstractEventLoop) -> None:
        self.node_loop = node_loop

    async def call(self, handler: Callable[[], Awaitable[T] | T]) -> T:
        return await self._there(outcome_of(handler))

    async def _there(self, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.node_loop))

    async def items(self, make: Callable[[], AsyncIterator[T]]) -> AsyncGenerator[T, None]:
        """A stream made and advanced on the node's loop, its items yielded here; closed there, whatever ends it."""
        items = await self._there(_made(make))
        try:
            while True:
                step = await self._there(_next(items))
                if step is _END:
                    return
                yield step  # type: ignore[misc]
        finally:
            with contextlib.suppress(Exception):
                await self._there(_close(items))


_END = object()  # the end of a stream, as a value: a future cannot carry StopAsyncIteration across loops


async def outcome_of(handler: Callable[[], Awaitable[T] | T]) -> T:
    """What `handler` answers, awaited when it answers an awaitable."""
    outcome = handler()
    if asyncio.iscoroutine(outcome) or isinstance(outcome, asyncio.Future):
        return await outcome  # type: ignore[no-any-return]
    return outcome  # type: ignore[return-value]


async def _made(make: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
    return make()


async def _next(items: AsyncIterator[T]) -> T | object:
    try:
        return await items.__anext__()
    except StopAsyncIteration:
        return _END


async def _close(items: AsyncIterator[T]) -> None:
    if isinstance(items, AsyncGenerator):
        await items.aclose()
