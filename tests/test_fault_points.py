"""snapshot.fault_points: inert unless a test installs a hook; the launcher crashes at the step it is given."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshot import fault_points
from tests.crashing_serve import launcher

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def reached() -> Iterator[list[str]]:
    seen: list[str] = []
    fault_points.install(seen.append)
    try:
        yield seen
    finally:
        fault_points.install(None)


def test_without_a_hook_a_fault_point_does_nothing() -> None:
    seen: list[str] = []
    fault_points.install(seen.append)
    fault_points.install(None)  # as the fixture leaves it, and as production always is
    fault_points.reach("snapshot.copy")
    fault_points.reach("not a step")  # unchecked: production never pays for a hook it has not got
    assert seen == []  # the hook removed is not called, for a known step or an unknown one


def test_the_hook_sees_each_step_and_unknown_steps_are_refused(reached: list[str]) -> None:
    fault_points.reach("snapshot.copy")
    fault_points.reach("prune.midway")
    assert reached == ["snapshot.copy", "prune.midway"]
    with pytest.raises(AssertionError, match="not a step"):
        fault_points.reach("not a step")


def test_the_launcher_refuses_an_unknown_step() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.crashing_serve", "no.such.step", "settings"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "snapshot.copy" in done.stdout
    assert launcher("prune.midway") == ("-m", "tests.crashing_serve", "prune.midway")
