"""Waiting for a call on a node's clock, its outcome always retrieved."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from coordinator.base.clock import Clock


async def run_within(clock: Clock, call: Coroutine[Any, Any, None], timeout_ms: int) -> None:
    """Runs `call` for at most `timeout_ms` of the clock's time; TimeoutError (and the call cancelled) past it.

    The call's outcome is always retrieved: a call that failed just as the timer fired (or as this wait was
    cancelled) would otherwise leave its exception unseen ("Task exception was never retrieved"). A call that ended
    counts, even past the timer: its answer came.
    """
    running = asyncio.ensure_future(call)
    finished = asyncio.Event()
    running.add_done_callback(lambda _: finished.set())
    try:
        await clock.wait_event(finished, timeout_ms)
    finally:
        cut_short = not running.done()
        if cut_short:
            running.cancel()
            await asyncio.wait([running])
        if not running.cancelled():
            running.exception()  # seen here: raised below, or given up for this wait's own exception
    if cut_short:
        raise TimeoutError(f"no answer within {timeout_ms} ms")
    running.result()
