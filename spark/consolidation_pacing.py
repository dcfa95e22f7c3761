"""The planning pages' pacing: one GetFileMergeWorkItem page in flight at a time over all planning threads.

A page is read on the coordinator's loop (up to 10,000 batches; 44 ms on average on the loaded 2-core machine),
and commits there wait behind it. Each planning thread used to pause after its own page for
t x (100 / (d / threads) - 1), t the page's wall time: with 8 threads asking the coordinators of one node, a
page's t also counted the wait behind the other threads' pages (and the driver's GIL, taken by the others'
conversion of their pages into batches), and that inflated time was paid back 39 times (d = 20: each thread
2.5%). At 100,000 files planning took 406 s for some 30 s of the node's time.

Now the threads share one pacer: a page is asked only after the previous one's pause, one at a time, so its
wall time is the node's time for it (plus the steady load's), paid back once: after a page that took t the
next one starts t x (100 / d - 1) later, which keeps the planning calls to at most d% of the time of any
node's loop, all threads together, as before. The threads still turn the answered pages into batches in
parallel with the next call. d = 100: no pause and no lock (the one-process run, `--replace-duty-percent 100`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def pause_s(call_ms: float, duty_percent: int) -> float:
    """The pause after a call of `call_ms` that keeps such calls to `duty_percent` of the time."""
    return call_ms / 1000 * (100 / duty_percent - 1)


class PlanningPacer:
    def __init__(
        self,
        duty_percent: int,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._duty_percent = duty_percent
        self._sleep = sleep
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._next_start = float("-inf")

    def call(self, page: Callable[[], T]) -> T:
        """`page()`, started once the previous page's pause is over, none other in flight meanwhile."""
        if self._duty_percent >= 100:
            return page()
        with self._lock:
            wait = self._next_start - self._monotonic()
            if wait > 0:
                self._sleep(wait)
            started = self._monotonic()
            try:
                return page()
            finally:
                ended = self._monotonic()
                self._next_start = ended + pause_s((ended - started) * 1000, self._duty_percent)
