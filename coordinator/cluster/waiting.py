"""Waiting for a call on a node's clock, its outcome always retrieved."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from coordinator.base.clock import Clock

RENEWAL_WAIT_MIN_MS = 50  # a renewal is given at least this long, even when the session is about to lapse


def renewal_wait_ms(interval_ms: int, valid_for_ms: int) -> int:
    """How long one renewal may wait for its answer: a heartbeat at most, and while the session holds no longer than
    what is left of it (at least RENEWAL_WAIT_MIN_MS), so that the node steps down on time. Once it lapsed there is
    nothing left to protect: a whole heartbeat, or over a link slower than the floor (a 100 ms round trip) no renewal
    would ever be answered, and the node would stay stepped down until etcd let its lease expire
    (tests/test_session_renewal.py)."""
    if valid_for_ms <= 0:
        return interval_ms
    return max(RENEWAL_WAIT_MIN_MS, min(interval_ms, valid_for_ms))


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
