"""`diskless consolidate` that kills its own driver (kill -9) after the first upload, before its ReplaceBatches.

Usage: python -m tests.crashing_consolidate MARKER_FILE [diskless consolidate flags...]. The executor that
uploaded first writes the object's key to MARKER_FILE, then sends SIGKILL to the driver (this process)
and waits to be ended with it: no ReplaceBatches follows that upload.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time


def kill_driver(driver_pid: int, marker: str, object_key: str) -> None:
    try:
        with open(marker, "x") as file:  # the first upload only
            file.write(object_key)
    except FileExistsError:
        pass
    os.kill(driver_pid, signal.SIGKILL)
    time.sleep(60)  # the task never goes on to its ReplaceBatches: the test ends this worker with the group


if __name__ == "__main__":
    from spark.consolidation_command import main

    hook = functools.partial(kill_driver, os.getpid(), sys.argv[1])
    sys.exit(main(sys.argv[2:], after_upload=hook))
