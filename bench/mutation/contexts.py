"""A pytest plugin for the mutation run's coverage pass: each test's lines under its own coverage context.

Loaded with `-p bench.mutation.contexts` under `coverage run` (bench/mutation/run.py starts it). coverage's own
`dynamic_context = test_function` names a function, not a test: parametrized cases and classes would collapse, and
the mutation run needs node ids it can hand back to pytest. Beside the contexts it writes each test's duration and
outcome (`MUTATION_TESTS_JSON`), so that a mutant runs its covering tests fastest first and skips the ones that
already failed without any mutant.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator

import coverage
import pytest

TESTS_JSON_VARIABLE = "MUTATION_TESTS_JSON"

_durations: dict[str, float] = {}
_failed: set[str] = set()


def _switch(context: str) -> None:
    current = coverage.Coverage.current()
    if current is not None:
        current.switch_context(context)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    # Setup, call and teardown all count: a fixture's code runs for the test that needed it.
    _switch(item.nodeid)
    yield
    _switch("")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration
    if report.failed:
        _failed.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(TESTS_JSON_VARIABLE)
    if path:
        with open(path, "w") as out:
            json.dump({"durations": _durations, "failed": sorted(_failed)}, out, indent=0)
