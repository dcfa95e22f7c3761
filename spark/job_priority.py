"""The consolidation job's processes at a low CPU priority, so that a node beside them keeps its CPU.

On a machine that also runs a coordinator node (two cores, local Spark), the job's JVM and its Python
workers took the CPU the node needed to answer commits: the commit p99 of a steady load went 15.7x up
while the job ran (docs/benchmarks.md). A batch job that may take longer is what an operator expects;
commits that wait are not. The job's own processes therefore start at the niceness
`diskless.consolidation.job.nice` (19, the lowest priority, by default).

On Linux a niceness belongs to a thread, and a process inherits the one of the thread that forks it. The
Spark JVM is started (by pyspark's gateway launcher) from a thread of its own whose niceness is raised
first: the JVM, every thread it makes and every Python worker it forks inherit it, while the calling
process (the driver's Python, or a benchmark's load generator) keeps its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

NICE_MAX = 19  # the lowest priority on Linux
T = TypeVar("T")


def raise_thread_niceness(nice: int) -> int:
    """Raises the calling thread's niceness to `nice` (never lowers it); returns the niceness it has."""
    thread = threading.get_native_id()
    current = os.getpriority(os.PRIO_PROCESS, thread)
    if nice > current:
        os.setpriority(os.PRIO_PROCESS, thread, min(nice, NICE_MAX))
    return os.getpriority(os.PRIO_PROCESS, thread)


def started_at_niceness(nice: int, start: Callable[[], T]) -> T:
    """`start()` called in a thread of its own at niceness `nice`: what it forks inherits the niceness,
    this thread and process keep theirs. Exceptions of `start` are raised here."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def starter() -> None:
        try:
            raise_thread_niceness(nice)
            outcome.append(start())
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    thread = threading.Thread(target=starter, name="low-priority-start", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
