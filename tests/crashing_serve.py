"""The `diskless` command with a fault hook that ends the process at one step, for crash tests.

    python -m tests.crashing_serve STEP serve --data-dir ...

runs `diskless serve ...` as usual except that when the code reaches the fault point STEP
(coordinator/fault_points.py) the process exits at once with CRASH_EXIT_CODE, without cleanup or
flush, as a SIGKILL would leave it. `crashing_at(step)` makes tests.harness.ServerProcess start this
launcher instead of `python -m coordinator`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from coordinator import fault_points

CRASH_EXIT_CODE = 137  # what a SIGKILL looks like to a parent


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in fault_points.STEPS:
        print(f"usage: python -m tests.crashing_serve STEP ARGS...; STEP one of {sorted(fault_points.STEPS)}")
        return 2
    step, *arguments = argv

    def crash(reached: str) -> None:
        if reached == step:
            os._exit(CRASH_EXIT_CODE)

    fault_points.install(crash)
    from coordinator.cli import main as diskless

    return diskless(arguments)


def launcher(step: str) -> tuple[str, ...]:
    """What follows the interpreter in a command that starts a node crashing at `step` (for ServerProcess)."""
    assert step in fault_points.STEPS, step
    return ("-m", "tests.crashing_serve", step)


class _Launching:
    """The subprocess module as tests.harness sees it: `python -m coordinator` becomes this launcher at `step`."""

    def __init__(self, step: str) -> None:
        self._step = step

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def Popen(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        command = list(args)
        module = command.index("-m") + 1
        assert command[module] == "coordinator", command
        command[module : module + 1] = ["tests.crashing_serve", self._step]
        return subprocess.Popen(command, **kwargs)


@contextlib.contextmanager
def crashing_at(step: str) -> Iterator[None]:
    """ServerProcess.start() within runs the node through this launcher, set to crash at `step`.

    It swaps the harness's `subprocess` for as long as it lasts; once ServerProcess takes the command
    it launches as an argument, tests pass it `launcher(step)` instead.
    """
    from tests import harness

    assert step in fault_points.STEPS, step
    original = harness.subprocess
    harness.subprocess = _Launching(step)  # type: ignore[assignment]
    try:
        yield
    finally:
        harness.subprocess = original


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
