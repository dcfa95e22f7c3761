"""Time as an input: the core takes `now_ms`; only the shell reads a clock, and waits on it.

Production runs on `SystemClock`. Tests run on `ManualClock`, which moves only when the test
advances it: a background loop that waits through `Clock.sleep_ms` then wakes exactly when the
test says its time has come, and never on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol, final


class Clock(Protocol):
    def now_ms(self) -> int: ...

    async def sleep_ms(self, duration_ms: int) -> None:
        """Returns once `duration_ms` of this clock's time has passed (at once for 0 or less)."""
        ...


@final
class SystemClock:
    """Wall-clock milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_ms(self, duration_ms: int) -> None:
        await asyncio.sleep(max(0, duration_ms) / 1000)


@dataclass(slots=True)
class _Sleeper:
    wake_at_ms: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    number: int = field(default=0)


@final
class ManualClock:
    """A clock that moves only by `advance(ms)`; sleepers wake when their time is reached.

    Thread-safe: the test's thread advances it while the nodes' event loop thread reads it and
    sleeps on it. `sleepers()` tells a test how many loops wait on the clock (idle), so that it
    can advance only once they all wait, and then wait for them all to be back.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        self._now_ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        self._lock = threading.Lock()
        self._sleepers: list[_Sleeper] = []
        self._numbers = itertools.count()

    def now_ms(self) -> int:
        return self._now_ms

    async def sleep_ms(self, duration_ms: int) -> None:
        if duration_ms <= 0:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            sleeper = _Sleeper(self._now_ms + duration_ms, loop, loop.create_future(), next(self._numbers))
            self._sleepers.append(sleeper)
        try:
            await sleeper.future
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._sleepers.remove(sleeper)  # cancelled before its time

    def advance(self, duration_ms: int) -> None:
        """Moves the clock forward and wakes every sleeper whose time has come (in wake-up order)."""
        if duration_ms < 0:
            raise ValueError(f"a clock never goes back (advance by {duration_ms} ms)")
        with self._lock:
            self._now_ms += duration_ms
            due = sorted(
                (s for s in self._sleepers if s.wake_at_ms <= self._now_ms), key=lambda s: (s.wake_at_ms, s.number)
            )
            for sleeper in due:
                self._sleepers.remove(sleeper)
        for sleeper in due:
            with contextlib.suppress(RuntimeError):  # the sleeper's loop is closed: nobody waits any more
                sleeper.loop.call_soon_threadsafe(_wake, sleeper.future)

    def sleepers(self) -> int:
        """How many waits on this clock are pending."""
        with self._lock:
            return len(self._sleepers)

    def next_wake_up_ms(self) -> int | None:
        """The clock time at which the earliest sleeper wakes, None when nobody sleeps."""
        with self._lock:
            return min((s.wake_at_ms for s in self._sleepers), default=None)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
