"""Capped exponential backoff, without jitter: the waits between the tries of one failing step.

Every retry loop uses it (STYLE: retries without backoff are unbounded work): the reload of a
failed coordinator, snapshot retries, the WAL-file workers' hand-overs, probes and deletions, the
orphan scan's DescribeFiles. Waits are deterministic, so tests and logs can name them exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

# The exponent stops growing here: the cap is reached long before, and the integers stay small.
_GROWTH_STEPS_MAX = 62


@final
@dataclass(slots=True)
class Backoff:
    """Waits `initial_ms`, then `multiplier` times the last, up to `max_ms`; a success starts over.

    `failed(now_ms)` counts a failure and returns the wait before the next try, which `ready(now_ms)`
    then tells has passed (for a step polled by a loop rather than slept on).
    """

    initial_ms: int
    max_ms: int
    multiplier: int = 2
    failures: int = 0
    retry_at_ms: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.initial_ms <= self.max_ms or self.multiplier < 1:
            raise ValueError(
                f"backoff needs 0 <= initial_ms <= max_ms and multiplier >= 1, got {self.initial_ms}, "
                f"{self.max_ms}, {self.multiplier}"
            )

    def wait_ms(self, failures: int) -> int:
        """The wait after `failures` failures in a row (0 before the first)."""
        if failures <= 0:
            return 0
        growth: int = self.multiplier ** min(failures - 1, _GROWTH_STEPS_MAX)  # int ** int is typed Any
        return min(self.max_ms, self.initial_ms * growth)

    def ready(self, now_ms: int) -> bool:
        return now_ms >= self.retry_at_ms

    def failed(self, now_ms: int = 0) -> int:
        """Counts a failure at `now_ms`; returns the wait in milliseconds before the next try."""
        self.failures += 1
        wait = self.wait_ms(self.failures)
        self.retry_at_ms = now_ms + wait
        return wait

    def succeeded(self) -> None:
        self.failures = 0
        self.retry_at_ms = 0
