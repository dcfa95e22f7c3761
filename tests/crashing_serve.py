"""The `diskless` command with a fault hook that ends the process at one step, for crash tests.

    python -m tests.crashing_serve STEP serve --data-dir ...

runs `diskless serve ...` as usual except that when the code reaches the fault point STEP
(coordinator/fault_points.py) the process exits at once with CRASH_EXIT_CODE, without cleanup or
flush, as a SIGKILL would leave it. `crashing_at(node, step)` makes a tests.harness.ServerProcess start
this launcher instead of `python -m coordinator`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from snapshot import fault_points

if TYPE_CHECKING:
    from tests.harness import ServerProcess

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
    from coordinator.cli.main import main as diskless

    return diskless(arguments)


def launcher(step: str) -> tuple[str, ...]:
    """What follows the interpreter in a command that starts a node crashing at `step` (for ServerProcess)."""
    assert step in fault_points.STEPS, step
    return ("-m", "tests.crashing_serve", step)


@contextlib.contextmanager
def crashing_at(node: ServerProcess, step: str) -> Iterator[ServerProcess]:
    """`node.start()` within runs the node through this launcher, set to crash at `step`."""
    node.launcher = launcher(step)
    try:
        yield node
    finally:
        node.launcher = ("-m", "coordinator")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
