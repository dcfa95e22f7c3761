"""Time as an input: the core takes `now_ms`; only the shell reads a clock, and waits on it.

Production runs on `SystemClock`. Tests run on `ManualClock`, which moves only when the test
advances it: a background loop that waits through `Clock.sleep_ms` or `Clock.wait_event` then
wakes exactly when the test says its time has come, and never on its own. Every background loop
of a node (file workers, snapshot scheduler, the leader's ISR ticker, the follower's backoff, the
cluster controller's heartbeat and refresh, reloads) waits through its node's clock, so one clock
drives a whole cluster in one process.

`ManualClock` also knows which sleepers it woke and which of them are still running (not asleep
again, not ended): `wait_idle` returns once every one is, so a test advances time only when every
loop, whatever their number, has finished what the last advance started.
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

    def monotonic_ms(self) -> int:
        """Milliseconds that never go back (leases and deadlines count on it, not on `now_ms`)."""
        ...

    async def sleep_ms(self, duration_ms: int) -> None:
        """Returns once `duration_ms` of this clock's time has passed (at once for 0 or less)."""
        ...

    async def wait_event(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        """Returns once `event` is set or `timeout_ms` of this clock's time passed (None: no timeout); whether set."""
        ...


@final
class SystemClock:
    """Wall-clock milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    async def sleep_ms(self, duration_ms: int) -> None:
        await asyncio.sleep(max(0, duration_ms) / 1000)

    async def wait_event(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        return await _wait_event_on_loop(event, timeout_ms)


@final
class LoopClock:
    """An event loop's own time as the clock, from `epoch_ms`: on a simulated loop whose time jumps to its next
    timer once every task waits (tests/simulation/), every wait of every node follows that one clock."""

    def __init__(self, loop: asyncio.AbstractEventLoop, epoch_ms: int) -> None:
        self._loop = loop
        self._epoch_ms = epoch_ms

    def now_ms(self) -> int:
        return self._epoch_ms + self.monotonic_ms()

    def monotonic_ms(self) -> int:
        return int(self._loop.time() * 1000)

    async def sleep_ms(self, duration_ms: int) -> None:
        await asyncio.sleep(max(0, duration_ms) / 1000)

    async def wait_event(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        return await _wait_event_on_loop(event, timeout_ms)


async def _wait_event_on_loop(event: asyncio.Event, timeout_ms: int | None) -> bool:
    """`Clock.wait_event` on the running loop's own time (the system clock's, or a simulated loop's).

    Not `asyncio.wait_for`: on Python 3.11 it swallows a cancellation that comes as the event is set, and a loop
    waiting so (a cluster session's renewal) then never ends when its owner stops it.
    """
    if event.is_set():
        return True
    setting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((setting,), timeout=None if timeout_ms is None else max(0, timeout_ms) / 1000)
    finally:
        if not setting.done():
            setting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await setting
    return event.is_set()


@dataclass(slots=True)
class _Sleeper:
    wake_at_ms: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    number: int = field(default=0)
    task: asyncio.Task[object] | None = None


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
        # Tasks woken by an advance that are neither asleep on the clock again nor ended: still running.
        self._woken: set[asyncio.Task[object] | None] = set()

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    async def sleep_ms(self, duration_ms: int) -> None:
        if duration_ms <= 0:
            await asyncio.sleep(0)
            return
        sleeper = self._sleeper(duration_ms)
        try:
            await sleeper.future
        finally:
            self._forget(sleeper)

    async def wait_event(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        if event.is_set():
            return True
        if timeout_ms is None:
            # Waiting for the event alone, the task is as idle as one asleep on the clock: its cycle has ended.
            with self._lock:
                self._woken.discard(asyncio.current_task())
            await event.wait()
            return True
        if timeout_ms <= 0:
            await asyncio.sleep(0)
            return event.is_set()
        # The waiting task itself is the sleeper (not a helper task), so that `wait_idle` follows its cycle.
        sleeper = self._sleeper(timeout_ms)
        setting = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait((sleeper.future, setting), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._forget(sleeper)
            if not setting.done():
                setting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await setting
        return event.is_set()

    def _sleeper(self, duration_ms: int) -> _Sleeper:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        with self._lock:
            sleeper = _Sleeper(self._now_ms + duration_ms, loop, loop.create_future(), next(self._numbers), task)
            self._sleepers.append(sleeper)
            self._woken.discard(task)  # asleep again: its cycle has ended
        return sleeper

    def _forget(self, sleeper: _Sleeper) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._sleepers.remove(sleeper)  # cancelled, or its event came, before its time

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
                if sleeper.task is not None and not sleeper.task.done():
                    self._woken.add(sleeper.task)
                    sleeper.task.add_done_callback(self._ended)
        for sleeper in due:
            with contextlib.suppress(RuntimeError):  # the sleeper's loop is closed: nobody waits any more
                sleeper.loop.call_soon_threadsafe(_wake, sleeper.future)

    def _ended(self, task: asyncio.Task[object]) -> None:
        with self._lock:
            self._woken.discard(task)

    def running(self) -> int:
        """How many tasks the last advances woke are still running (neither asleep on the clock nor ended)."""
        with self._lock:
            return sum(1 for task in self._woken if task is not None and not task.done())

    def wait_idle(self, timeout_s: float = 30.0, poll_s: float = 0.002) -> None:
        """From another thread than the loops': returns once every task an advance woke is asleep again or ended.

        A bound, not a proof: a woken loop that never sleeps on the clock again fails the wait after `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        while self.running():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.running()} woken loops did not go back to sleep within {timeout_s} s")
            time.sleep(poll_s)

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
