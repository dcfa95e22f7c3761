"""The consolidation job's watchdog: a Spark action that cannot finish ends with an error, not a wait.

At 100,000 files the driver's JVM died of OutOfMemoryError in its scheduler's endpoint while a task was
being serialized; the SparkContext was not stopped, the last task was never launched, and `collect()` waited
for 45 minutes. The action now runs in a thread of its own (an InheritableThread: it keeps the job group the
progress reports read) while the driver's main thread polls Spark's status tracker every `poll_s`:

- the SparkContext is stopped: the job ends at once;
- no task of the action finished for `timeout_s` (diskless.consolidation.stall.timeout.ms): the job ends.
  Tasks are bounded (diskless.consolidation.task.runs), so a healthy action finishes one well within it.

Ending means: the action's jobs are cancelled (best effort; a dead scheduler may not hear it) and
`JobStalled` is raised, which the job reports as aborted (exit 1). What the finished tasks committed stays
committed; a rerun plans what is left.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
POLL_S = 2.0


class JobStalled(Exception):
    """The Spark action made no progress within the bound, or its SparkContext stopped."""


@dataclass(frozen=True, slots=True)
class Progress:
    stopped: bool  # the SparkContext is stopped
    completed: int  # tasks of the action's jobs finished so far
    total: int


class StallClock:
    """Pure: fed samples and times, says when the action is to be given up, and why."""

    def __init__(self, timeout_s: float, now: float) -> None:
        self._timeout_s = timeout_s
        self._last_change = now
        self._completed = -1

    def verdict(self, progress: Progress, now: float) -> str | None:
        if progress.stopped:
            return f"Spark's context stopped ({progress.completed} of {progress.total} tasks done)"
        if progress.completed != self._completed:
            self._completed, self._last_change = progress.completed, now
            return None
        if now - self._last_change >= self._timeout_s:
            return (
                f"no task finished for {now - self._last_change:.0f} s ({progress.completed} of {progress.total} "
                "tasks done): Spark's scheduler is stuck or dead"
            )
        return None


def spark_progress(context: Any, group: str | None) -> Progress:
    """The SparkContext's state and the task counts of the jobs of `group` (every active stage if None)."""
    if context._jsc is None:  # PySpark drops its gateway handle when the context stops
        return Progress(True, 0, 0)
    stopped = bool(context._jsc.sc().isStopped())
    tracker = context.statusTracker()
    stages: list[int] = []
    if group is None:
        stages = list(tracker.getActiveStageIds())
    else:
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            stages.extend(job.stageIds if job else ())
    completed = total = 0
    for stage_id in stages:
        stage = tracker.getStageInfo(stage_id)
        if stage:
            completed, total = completed + stage.numCompletedTasks, total + stage.numTasks
    return Progress(stopped, completed, total)


class _Outcome(Generic[T]):
    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None
        self.done = False


def run_watched(
    action: Callable[[], T],
    sample: Callable[[], Progress],
    timeout_s: float,
    *,
    cancel: Callable[[], None] = lambda: None,
    start_thread: Callable[[Callable[[], None]], Any] | None = None,
    poll_s: float = POLL_S,
    monotonic: Callable[[], float] = time.monotonic,
) -> T:
    """`action()`'s value, or its error, or JobStalled once the watchdog gives up on it."""
    outcome: _Outcome[T] = _Outcome()

    def body() -> None:
        try:
            outcome.value = action()
        except BaseException as error:  # handed to the waiting thread, raised there
            outcome.error = error
        finally:
            outcome.done = True

    thread = (start_thread or _plain_thread)(body)
    clock = StallClock(timeout_s, monotonic())
    progress = Progress(False, -1, 0)
    while True:
        thread.join(poll_s)
        if outcome.done:
            break
        # A failed poll (the gateway busy, or gone) counts as no progress: polls failing for the whole
        # timeout end the action like a stalled scheduler.
        with contextlib.suppress(Exception):
            progress = sample()
        reason = clock.verdict(progress, monotonic())
        if reason is not None:
            with contextlib.suppress(Exception):  # the scheduler that died may not take the cancel either
                cancel()
            raise JobStalled(reason)
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]  # set when the action returned


def _plain_thread(body: Callable[[], None]) -> Any:
    thread = threading.Thread(target=body, name="consolidation-action", daemon=True)
    thread.start()
    return thread


def spark_thread(body: Callable[[], None]) -> Any:
    """A daemon InheritableThread (the job group and other local properties of the caller)."""
    from pyspark import InheritableThread

    thread = InheritableThread(target=body, name="consolidation-action")
    thread.daemon = True
    thread.start()
    return thread
