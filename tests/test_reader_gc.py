"""A reader process keeps its loaded state out of the collector's scans, as the node's processes do (issue #37).

Each FindBatches call leaves a few short-lived cycles; with CPython's defaults (a young collection every 700
allocations, the imported modules scanned by every full collection) a reader spent about four times the GC time
of a frozen one, one full collection a 16-22 ms pause (`python -m bench.profile_find_batches gc`).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Coroutine
from typing import Any

import pytest

from coordinator.base import logging_output
from coordinator.base.child_processes import GC_YOUNG_THRESHOLD
from coordinator.config.settings import Settings
from coordinator.reads.readers import worker
from coordinator.reads.readers.worker import ReaderPlan, run_reader


def test_freeze_loaded_state_freezes_and_makes_young_collections_rarer() -> None:
    # In a process of its own: a frozen test interpreter would keep everything it holds now for good.
    script = (
        "import gc\n"
        "from coordinator.base.child_processes import freeze_loaded_state\n"
        "before = gc.get_freeze_count()\n"
        "freeze_loaded_state()\n"
        "print(before, gc.get_freeze_count(), gc.get_threshold()[0])\n"
    )
    before, after, young = map(int, subprocess.check_output([sys.executable, "-c", script], text=True).split())
    assert before == 0
    assert after > 1000  # the imported modules' objects, at least
    assert young == GC_YOUNG_THRESHOLD


def test_reader_entry_point_freezes_before_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    async def serve(*_: object) -> None:
        events.append("served")

    def run(coroutine: Coroutine[Any, Any, None]) -> None:
        events.append("run")
        coroutine.close()

    class Runner:
        def __init__(self, **_: object) -> None:
            pass

        def __enter__(self) -> Runner:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def run(self, coroutine: Coroutine[Any, Any, None]) -> None:
            run(coroutine)

    monkeypatch.setattr(worker, "freeze_loaded_state", lambda: events.append("frozen"))
    monkeypatch.setattr(worker, "serve_reads", serve)
    monkeypatch.setattr(worker, "StatusBoard", lambda words: words)
    monkeypatch.setattr(worker, "CallCounts", lambda words: words)
    monkeypatch.setattr(asyncio, "Runner", Runner)
    monkeypatch.setattr(logging_output, "configure_logging", lambda _format: None)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # the test runner's own SIGINT handler stays
    run_reader(ReaderPlan(0, Settings(), "127.0.0.1", 0, ()), None, None, None)  # type: ignore[arg-type]
    assert events == ["frozen", "run"]
