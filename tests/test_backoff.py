"""coordinator.base.backoff: the one capped exponential backoff of every retry loop."""

from __future__ import annotations

import pytest

from coordinator.base.backoff import Backoff


def test_waits_grow_by_the_multiplier_up_to_the_cap_and_restart_after_a_success() -> None:
    backoff = Backoff(100, 1000)
    assert [backoff.failed() for _ in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert backoff.failures == 6
    backoff.succeeded()
    assert backoff.failed() == 100
    assert [Backoff(10, 10_000, multiplier=3).wait_ms(n) for n in range(5)] == [0, 10, 30, 90, 270]


def test_ready_once_the_wait_has_passed() -> None:
    backoff = Backoff(50, 500)
    assert backoff.ready(0)
    assert backoff.failed(now_ms=1000) == 50
    assert not backoff.ready(1049) and backoff.ready(1050)
    backoff.succeeded()
    assert backoff.ready(0)


def test_many_failures_stay_at_the_cap() -> None:
    backoff = Backoff(1, 60_000)
    for _ in range(10_000):
        backoff.failed()
    assert backoff.failed() == 60_000


@pytest.mark.parametrize(("initial_ms", "max_ms", "multiplier"), [(-1, 10, 2), (20, 10, 2), (1, 10, 0)])
def test_nonsense_bounds_are_refused(initial_ms: int, max_ms: int, multiplier: int) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(initial_ms, max_ms, multiplier)
