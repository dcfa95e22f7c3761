"""One process at a time on a coordinator directory: an exclusive `flock` held while it works there."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DirectoryInUse(Exception):
    """Another process (a running node, an operator command) holds the coordinator directory."""


class DirectoryLock:
    """An exclusive `flock` on `<directory>/lock` for as long as a process works on the directory.

    A running coordinator holds it, so that an offline command (restore,
    create, describe from files) never changes state under a live node. The
    kernel drops it when the process dies, so a crash leaves nothing to clean.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "lock"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise DirectoryInUse(f"{directory} is in use by another process (a running node?)") from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = -1
