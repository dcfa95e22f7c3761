"""The append ticks of a node's process: every coordinator's lingering group is written at the same tick.

A commit whose batches reach several coordinators is answered when its slowest part is applied. With
a linger per group, each coordinator's group began waiting at its own moment, so the parts of one
commit were written up to a whole linger apart and the commit waited for the last of them. Here a
group that may linger waits for the next tick instead, one timer for every coordinator of the process:
the parts of a commit, checked in the same pass of the event loop, are written at the same tick.

The timer runs only while a group waits: the first group to wait starts it, one linger from then.
"""

from __future__ import annotations

import asyncio
from typing import final


@final
class AppendTicks:
    """One timer for every coordinator's lingering group (`diskless.coordinator.append.linger.ms`)."""

    def __init__(self, linger_ms: int) -> None:
        self._linger_s = linger_ms / 1000
        self._fired = 0  # ticks so far
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[asyncio.Event] = []  # one per group waiting: bounded by the coordinators

    def next_tick(self, wakeup: asyncio.Event) -> int:
        """The tick a group that begins waiting now is written at; `wakeup` is set when it comes."""
        loop = asyncio.get_running_loop()
        if self._timer is not None and self._timer_loop is not loop:
            # A node's tests may run it on a new loop: what waited on the old one is gone with it.
            self._timer.cancel()
            self._timer, self._waiting = None, []
        if self._timer is None:
            self._timer = loop.call_later(self._linger_s, self._tick)
            self._timer_loop = loop
        self._waiting.append(wakeup)
        return self._fired + 1

    def passed(self, tick: int) -> bool:
        return self._fired >= tick

    def _tick(self) -> None:
        self._timer = self._timer_loop = None
        self._fired += 1
        waiting, self._waiting = self._waiting, []
        for wakeup in waiting:
            wakeup.set()
