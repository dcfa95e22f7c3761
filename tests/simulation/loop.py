"""An event loop on simulated time: when no callback is ready and no I/O is pending, time jumps to the next timer.

The loop's `time()` is a number it keeps; `select` never blocks: it polls the real selector (the loop's own
wake-up pipe, the only descriptor a simulated cluster has) and, with nothing there, moves the time by the
timeout the loop asked to wait, which is exactly the distance to its earliest timer. So `asyncio.sleep`,
`wait_for` and every `LoopClock` wait take no wall time, in the order their deadlines say. With nothing ready,
no timer and no I/O, every task waits on something that cannot happen; a million turns without time passing is a
task that never waits (a livelock): both are `SimulationStalled`.

Blocking calls go to the loop's default executor, an inline one (the nodes' own executors are inline too): with
no other thread, a run is a function of its seed.

An exception no one retrieved (asyncio's "Future exception was never retrieved", "Task exception was never
retrieved": a failure nobody saw) is recorded in `never_retrieved` besides being logged; `close` collects garbage
first, so that a future dropped during the run is reported to this loop while it still records, then fails the run
(`ExceptionsNeverRetrieved`) if it recorded any.
"""

from __future__ import annotations

import asyncio
import gc
import selectors
from typing import Any, final

from coordinator.base.executors import InlineExecutor

START_S = 1_000.0  # the loop's time at start; a clock's epoch is added on top
# A run's busiest instant (every node loading, catching up) takes some thousands of turns; a million is a task
# that goes round without ever waiting for time.
TURNS_WITHOUT_TIME_MAX = 1_000_000


class ExceptionsNeverRetrieved(AssertionError):
    """The run left exceptions nobody retrieved: failures no code looked at."""


class SimulationStalled(RuntimeError):
    """Nothing is ready and nothing is scheduled: every task waits for something that will never come."""


@final
class _JumpingSelector(selectors.BaseSelector):
    def __init__(self, loop: SimulatedLoop, real: selectors.BaseSelector) -> None:
        self._loop = loop
        self._real = real

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(0)
        if events or timeout == 0:
            self._loop.turn_without_time()
            return events
        if timeout is None:
            raise SimulationStalled("no task can go on: nothing is ready, no timer is set")
        self._loop.jump(timeout)
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


@final
class SimulatedLoop(asyncio.SelectorEventLoop):
    def __init__(self, fail_on_unretrieved: bool = True) -> None:
        self._simulated_s = START_S
        self._fail_on_unretrieved = fail_on_unretrieved
        super().__init__(_JumpingSelector(self, selectors.DefaultSelector()))
        self._inline = InlineExecutor()
        self._turns_without_time = 0
        self.never_retrieved: list[str] = []
        self.set_exception_handler(self._record_exception)

    def _record_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if "never retrieved" in message:
            where = context.get("future") or context.get("task")
            self.never_retrieved.append(f"{message}: {where!r} {context.get('exception')!r}")
        self.default_exception_handler(context)

    def close(self) -> None:
        gc.collect()  # futures dropped during the run report an exception nobody retrieved now, to this loop
        super().close()
        if self._fail_on_unretrieved and self.never_retrieved:
            raise ExceptionsNeverRetrieved(
                f"{len(self.never_retrieved)} exceptions never retrieved: " + "; ".join(self.never_retrieved)
            )

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        """The default executor (`asyncio.to_thread`'s) is the inline one; asyncio allows only a thread pool there."""
        return super().run_in_executor(executor if executor is not None else self._inline, func, *args)

    def time(self) -> float:
        return self._simulated_s

    def jump(self, seconds: float) -> None:
        self._simulated_s += seconds
        self._turns_without_time = 0

    def turn_without_time(self) -> None:
        """One more turn of the loop with work ready and no time passing; too many in a row is a livelock."""
        self._turns_without_time += 1
        if self._turns_without_time > TURNS_WITHOUT_TIME_MAX:
            raise SimulationStalled(
                f"{TURNS_WITHOUT_TIME_MAX} turns of the loop without time passing: some task never waits (a livelock)"
            )
