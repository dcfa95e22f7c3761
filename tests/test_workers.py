"""The worker supervisor (coordinator/base/workers.py) on a clock the test moves: a worker that raises is logged
once with its traceback, counted, shown and started anew after a bounded backoff; repeated failures within the
window make it failing (health's cue) until the window has passed; stop, close and wake reach the workers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from coordinator.base.clock import ManualClock
from coordinator.base.workers import (
    NODE_WIDE,
    Scope,
    SupervisionBounds,
    Worker,
    WorkerSpec,
    WorkerState,
    WorkerSupervisor,
)

SPEC = WorkerSpec("test-worker", Scope.LEADER_ONLY, "fails on purpose", "tests.test_workers:Failing.run")
BOUNDS = SupervisionBounds(restart_backoff_ms=100, restart_backoff_max_ms=400, failures_window_ms=10_000,
                           failures_max=3)  # fmt: skip


class Failing:
    """Raises at once, each instance; `made` counts the instances (one per start)."""

    made = 0

    def __init__(self) -> None:
        Failing.made += 1

    async def run(self) -> None:
        raise RuntimeError(f"broken rule #{Failing.made}")


class Idle:
    """Runs until cancelled; tells whether it was, and whether it was woken."""

    def __init__(self) -> None:
        self.cancelled = False
        self.woken = False

    async def run(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    def wake(self) -> None:
        self.woken = True


class Harness:
    def __init__(self) -> None:
        self.clock = ManualClock(start_ms=0)
        self.counted: list[tuple[str, int]] = []
        self.health_changes = 0
        self.supervisor = WorkerSupervisor(self.clock, BOUNDS, self._count, self._health_changed)

    def _count(self, name: str, coordinator_id: int) -> None:
        self.counted.append((name, coordinator_id))

    def _health_changed(self) -> None:
        self.health_changes += 1

    def wait_ms(self) -> int:
        """The time to the earliest wake-up on the clock (the worker's backoff once it failed)."""
        wake_up = self.clock.next_wake_up_ms()
        assert wake_up is not None, "nothing waits on the clock"
        return wake_up - self.clock.now_ms()

    async def advance(self, duration_ms: int) -> None:
        self.clock.advance(duration_ms)
        await settle()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def run(test: Callable[[Harness], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        harness = Harness()
        await harness.supervisor.open()
        try:
            await test(harness)
        finally:
            await harness.supervisor.close()

    asyncio.run(main())


def test_a_worker_that_raises_is_logged_once_counted_shown_and_started_anew_after_a_bounded_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Failing.made = 0

    async def test(h: Harness) -> None:
        with caplog.at_level(logging.ERROR, logger="coordinator.base.workers"):
            h.supervisor.start(SPEC, Failing, 2)
            await settle()
        failures = [r for r in caplog.records if "test-worker" in r.getMessage() and "failed" in r.getMessage()]
        assert len(failures) == 1 and failures[0].exc_info is not None  # once, with the traceback
        assert h.counted == [("test-worker", 2)]
        (status,) = h.supervisor.statuses()
        assert (status.coordinator_id, status.state, status.failures) == (2, WorkerState.BACKING_OFF, 1)
        assert status.last_failure == "RuntimeError: broken rule #1"
        # Waits double per recent failure and stop at the bound: 100, 200, 400, 400.
        waits = [h.wait_ms()]
        for _ in range(3):
            await h.advance(waits[-1])
            waits.append(h.wait_ms())
        assert waits == [100, 200, 400, 400]
        assert Failing.made == 4  # a new worker each start
        assert len(h.counted) == 4

    run(test)


def test_repeated_failures_within_the_window_make_a_worker_failing_until_the_window_has_passed() -> None:
    made: list[Worker] = []

    def three_failures_then_idle() -> Worker:
        worker: Worker = Failing() if len(made) < 3 else Idle()
        made.append(worker)
        return worker

    async def test(h: Harness) -> None:
        h.supervisor.start(SPEC, three_failures_then_idle)
        await settle()
        assert not h.supervisor.failing() and h.health_changes == 0
        await h.advance(100)
        assert not h.supervisor.failing()  # two failures: under the bound of three
        await h.advance(200)
        (failing,) = h.supervisor.failing()
        assert (failing.name, failing.coordinator_id, failing.recent_failures) == ("test-worker", NODE_WIDE, 3)
        assert h.health_changes == 1
        await h.advance(400)  # started again: it runs now, and fails no more
        assert isinstance(made[-1], Idle)
        assert h.supervisor.failing(), "still three failures within the window"
        await h.advance(BOUNDS.failures_window_ms)  # the first failure leaves the window
        assert not h.supervisor.failing()
        assert h.health_changes == 2
        (status,) = h.supervisor.statuses()
        assert (status.state, status.failures, status.recent_failures) == (WorkerState.RUNNING, 3, 0)

    run(test)


def test_stop_cancels_a_worker_wake_reaches_it_and_close_ends_every_worker() -> None:
    async def test(h: Harness) -> None:
        first, second = Idle(), Idle()
        h.supervisor.start(SPEC, lambda: first, 0)
        h.supervisor.start(SPEC, lambda: second, 1)
        h.supervisor.start(SPEC, Idle, 1)  # already running: not started twice
        await settle()
        assert sorted(h.supervisor.workers(SPEC.name)) == [0, 1]
        h.supervisor.wake(SPEC.name, 1)
        assert second.woken and not first.woken
        h.supervisor.stop(SPEC.name, 0)
        await settle()
        assert first.cancelled and not h.supervisor.runs(SPEC.name, 0)
        await h.supervisor.close()
        assert second.cancelled
        assert h.supervisor.statuses() == []
        h.supervisor.start(SPEC, Idle, 3)  # after close: nothing starts
        assert not h.supervisor.runs(SPEC.name, 3)

    run(test)


def test_a_worker_whose_work_is_over_is_not_started_again() -> None:
    runs: list[int] = []

    class Once:
        async def run(self) -> None:
            runs.append(1)

    async def test(h: Harness) -> None:
        h.supervisor.start(SPEC, Once)
        await settle()
        await h.advance(BOUNDS.restart_backoff_max_ms)
        assert runs == [1] and h.counted == []
        assert not h.supervisor.runs(SPEC.name) and h.supervisor.statuses() == []

    run(test)
