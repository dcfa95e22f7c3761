"""Progress of the orphan scan while it runs: a line per phase start and end, and task counts in between.

Spark's own console progress bar is turned off (it redraws stderr and mixes
with these lines); instead, every `PROGRESS_TICK_S` a phase that runs Spark
jobs prints how many of its tasks are done, read from Spark's status tracker
by the phase's job group.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PROGRESS_TICK_S = 5.0

Say = Callable[[str], None]


def say_on_stderr(line: str) -> None:
    print(f"orphan-scan: {line}", file=sys.stderr, flush=True)


class PhaseClock:
    """Times the phases into `durations_s` and reports them through `say`."""

    def __init__(
        self, durations_s: dict[str, float], say: Say, spark_context: Any = None, tick_s: float = PROGRESS_TICK_S
    ) -> None:
        self._durations_s = durations_s
        self._say = say
        self._spark_context = spark_context
        self._tick_s = tick_s
        self._scan = uuid.uuid4().hex[:8]

    def attach(self, spark_context: Any) -> None:
        """Report task progress of the phases from now on."""
        self._spark_context = spark_context

    def note(self, line: str) -> None:
        """A line of progress of its own (what a phase found, how its time split)."""
        self._say(line)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._say(f"{name} ...")
        stop = threading.Event()
        ticker = None
        if self._spark_context is not None:
            group = f"diskless-orphan-scan-{self._scan}-{name}"
            self._spark_context.setJobGroup(group, f"orphan scan: {name}")
            ticker = threading.Thread(target=self._tick, args=(name, group, stop), daemon=True)
            ticker.start()
        start = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            self._durations_s[name] = round(seconds, 3)
            stop.set()
            if ticker is not None:
                ticker.join()
            self._say(f"{name} done in {seconds:.1f} s")

    def _tick(self, name: str, group: str, stop: threading.Event) -> None:
        tracker = self._spark_context.statusTracker()
        while not stop.wait(self._tick_s):
            done = total = 0
            try:
                for job_id in tracker.getJobIdsForGroup(group):
                    job = tracker.getJobInfo(job_id)
                    for stage_id in job.stageIds if job else ():
                        stage = tracker.getStageInfo(stage_id)
                        if stage:
                            done, total = done + stage.numCompletedTasks, total + stage.numTasks
            except Exception:  # progress is best effort: a failed poll must not end the scan
                continue
            if total:
                self._say(f"{name}: {done}/{total} tasks done")
