"""`diskless consolidate` stopped by a kill -9 after the first upload, before its ReplaceBatches.

Usage: python -m tests.crashing_consolidate [--executor] MARKER_FILE [diskless consolidate flags...].

- Without --executor, the executor that uploaded first writes the object's key to MARKER_FILE, then sends
  SIGKILL to the driver (this process) and waits to be ended with it: no ReplaceBatches follows that upload.
- With --executor, the Python worker that uploaded first writes "PID KEY" to MARKER_FILE and waits; the
  test finds that worker in this process's tree (driver -> JVM -> pyspark daemon -> worker) and kills it
  (kill -9). The driver goes on: its task is lost, and it reports the run aborted.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time

WORKER_WAIT_S = 120  # the worker waits this long to be killed; a test that does not kill it fails on time


def _first(marker: str, line: str) -> bool:
    try:
        with open(marker, "x") as file:  # the first upload only
            file.write(line)
    except FileExistsError:
        return False
    return True


def kill_driver(driver_pid: int, marker: str, object_key: str) -> None:
    _first(marker, object_key)
    os.kill(driver_pid, signal.SIGKILL)
    time.sleep(60)  # the task never goes on to its ReplaceBatches: the test ends this worker with the group


def wait_to_be_killed(marker: str, object_key: str) -> None:
    if _first(marker, f"{os.getpid()} {object_key}"):
        time.sleep(WORKER_WAIT_S)


if __name__ == "__main__":
    from spark.consolidation_command import main

    if sys.argv[1] == "--executor":
        hook = functools.partial(wait_to_be_killed, sys.argv[2])
        sys.exit(main(sys.argv[3:], after_upload=hook))
    hook = functools.partial(kill_driver, os.getpid(), sys.argv[1])
    sys.exit(main(sys.argv[2:], after_upload=hook))
