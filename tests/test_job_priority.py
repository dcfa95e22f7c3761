"""The consolidation job's processes start at a low CPU priority; the process starting them keeps its own."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from spark.job_priority import raise_thread_niceness, started_at_niceness

# A child shell that starts a grandchild printing its own niceness (field 19 of /proc/self/stat), as the
# Spark JVM starts its Python workers.
GRANDCHILD_NICENESS = ["sh", "-c", "sh -c 'cut -d\" \" -f19 /proc/self/stat'"]
GRANDCHILD_POLICY = ["sh", "-c", "sh -c 'cut -d\" \" -f41 /proc/self/stat'"]  # field 41: the scheduling policy


def _this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_process_started_at_niceness_and_its_children_have_it_and_the_caller_keeps_its_own() -> None:
    mine = _this_thread()
    wanted = min(mine + 5, 19)
    finished = started_at_niceness(
        wanted, lambda: subprocess.run(GRANDCHILD_NICENESS, capture_output=True, text=True, check=True)
    )
    assert int(finished.stdout) == wanted
    assert _this_thread() == mine
    assert int(subprocess.run(GRANDCHILD_NICENESS, capture_output=True, text=True, check=True).stdout) == mine


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE on this system")
def test_with_idle_the_children_run_under_sched_idle_and_the_caller_keeps_its_policy() -> None:
    mine = os.sched_getscheduler(0)
    finished = started_at_niceness(
        19, lambda: subprocess.run(GRANDCHILD_POLICY, capture_output=True, text=True, check=True), idle=True
    )
    assert int(finished.stdout) == os.SCHED_IDLE
    assert os.sched_getscheduler(threading.get_native_id()) == mine != os.SCHED_IDLE
    assert int(subprocess.run(GRANDCHILD_POLICY, capture_output=True, text=True, check=True).stdout) == mine
    without = started_at_niceness(
        19, lambda: subprocess.run(GRANDCHILD_POLICY, capture_output=True, text=True, check=True)
    )
    assert int(without.stdout) == mine


def test_niceness_is_never_lowered() -> None:
    seen: list[int] = []

    def in_thread() -> None:
        raise_thread_niceness(10)
        seen.append(raise_thread_niceness(3))

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    assert seen == [max(10, _this_thread())]


def test_a_failure_of_the_start_is_raised_in_the_caller() -> None:
    def failing() -> None:
        raise RuntimeError("no JVM")

    with pytest.raises(RuntimeError, match="no JVM"):
        started_at_niceness(19, failing)
