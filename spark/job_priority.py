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

Niceness alone still lets a niced thread keep a core for a few milliseconds after the node's thread wakes (the
scheduler shares by weight, it does not preempt at once), which is what a commit waiting for its turn sees. With
`diskless.consolidation.job.cpu.idle` the same thread also takes Linux's SCHED_IDLE policy, inherited the same
way: the job then runs only on a core nothing else wants (as `chrt --idle 0`). A job on a machine that is busy
for good makes no progress then; the moving's watchdog (`diskless.consolidation.stall.timeout.ms`) ends it.
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


def take_idle_policy() -> bool:
    """The calling thread under SCHED_IDLE (what it forks inherits it); False where the system has no such policy."""
    policy: int | None = getattr(os, "SCHED_IDLE", None)
    if policy is None:
        return False
    try:
        os.sched_setscheduler(threading.get_native_id(), policy, os.sched_param(0))
    except OSError:
        return False
    taken: int = os.sched_getscheduler(threading.get_native_id())
    return taken == policy


def started_at_niceness(nice: int, start: Callable[[], T], *, idle: bool = False) -> T:
    """`start()` called in a thread of its own at niceness `nice` (and under SCHED_IDLE when `idle`): what it
    forks inherits both, this thread and process keep theirs. Exceptions of `start` are raised here."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def starter() -> None:
        try:
            raise_thread_niceness(nice)
            if idle:
                take_idle_policy()
            outcome.append(start())
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    thread = threading.Thread(target=starter, name="low-priority-start", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
