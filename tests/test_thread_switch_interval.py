"""`diskless.node.thread.switch.interval.us`: a node process's GIL switch interval (issue #38 item 5, commit p99 while
a consolidation job runs), bounded, and set by the process entry point only."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from coordinator.config.rules import validated
from coordinator.config.settings import Settings, SettingsError
from coordinator.node.assembly import set_thread_switch_interval


def test_the_default_is_cpythons_own() -> None:
    assert Settings().thread_switch_interval_us / 1_000_000 == pytest.approx(0.005)  # sys.getswitchinterval()


@pytest.mark.parametrize("interval_us", [99, 100_001, 0])
def test_an_interval_out_of_bounds_is_refused(interval_us: int) -> None:
    with pytest.raises(SettingsError, match=r"thread\.switch\.interval\.us"):
        validated(dataclasses.replace(Settings(), thread_switch_interval_us=interval_us))


def test_the_entry_point_sets_the_process_interval() -> None:
    before = sys.getswitchinterval()
    try:
        set_thread_switch_interval(validated(dataclasses.replace(Settings(), thread_switch_interval_us=1000)))
        assert sys.getswitchinterval() == pytest.approx(0.001)
    finally:
        sys.setswitchinterval(before)
