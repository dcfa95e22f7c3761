"""The bounds of what a node works on at once (calls, request bytes, answer bytes), and their gauges.

The gate (`gate.py`) asks an Admission before it takes a call up; the excess is refused at once with
RESOURCE_EXHAUSTED rather than queued, so a node under overload keeps bounded memory and answers fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import final

from coordinator.base.invariants import check_invariant
from coordinator.config.settings import property_name


@dataclass(frozen=True, slots=True)
class AdmissionStatistics:
    calls: int
    request_bytes: int
    peak_calls: int
    peak_request_bytes: int
    max_calls: int
    max_request_bytes: int  # 0: no bound
    response_bytes: int = 0
    peak_response_bytes: int = 0
    max_response_bytes: int = 0  # 0: no bound


@final
class Admission:
    """The bounds of what the node works on at once: calls and their request bytes; the excess is refused, not queued.

    A call alone is always admitted whatever its size (the message-size limit bounds it), so that any request
    the node accepts at all can run. Every `take` is paired with a `release` in a `finally`.
    """

    def __init__(
        self, max_calls: int, max_request_bytes: int, min_remaining_deadline_ms: int, max_response_bytes: int = 0
    ) -> None:
        self._max_calls = max_calls
        self._max_request_bytes = max_request_bytes
        self._max_response_bytes = max_response_bytes
        self._min_remaining_s = min_remaining_deadline_ms / 1000
        self._calls = 0
        self._request_bytes = 0
        self._response_bytes = 0
        self._peak_calls = 0
        self._peak_request_bytes = 0
        self._peak_response_bytes = 0

    def refusal(self, size: int, time_remaining_s: float | None) -> tuple[str, str] | None:
        """Why a call of `size` request bytes cannot be taken up now, as (metric reason, message); None if it can."""
        if time_remaining_s is not None and time_remaining_s < self._min_remaining_s:
            return "deadline", (
                f"the call had {time_remaining_s * 1000:.0f} ms of its deadline left when the node took it up, less "
                f"than {property_name('min_remaining_deadline_ms')}={self._min_remaining_s * 1000:.0f}: the node is "
                "overloaded; retry with backoff"
            )
        if self._calls >= self._max_calls:
            return "calls", (
                f"the node is overloaded: {self._calls} calls in progress, its bound "
                f"({property_name('max_concurrent_rpcs')}={self._max_calls}); retry with backoff"
            )
        if self._max_request_bytes and self._calls and self._request_bytes + size > self._max_request_bytes:
            return "request_bytes", (
                f"the node is overloaded: {self._request_bytes} request bytes in progress, with this call's {size} "
                f"past its bound ({property_name('max_inflight_request_bytes')}={self._max_request_bytes}); "
                "retry with backoff"
            )
        return None

    def take(self, size: int) -> None:
        self._calls += 1
        self._request_bytes += size
        self._peak_calls = max(self._peak_calls, self._calls)
        self._peak_request_bytes = max(self._peak_request_bytes, self._request_bytes)

    def release(self, size: int) -> None:
        self._calls -= 1
        self._request_bytes -= size
        check_invariant(
            self._calls >= 0 and self._request_bytes >= 0,
            f"admission released more than it took: {self._calls} calls, {self._request_bytes} bytes",
        )

    def response_refusal(self, size: int) -> tuple[str, str] | None:
        """Why an answer of up to `size` bytes cannot be taken on now, as (metric reason, message); None if it can.

        As for requests, an answer alone is always taken (the message-size limit bounds it).
        """
        if self._max_response_bytes and self._response_bytes and self._response_bytes + size > self._max_response_bytes:
            return "response_bytes", (
                f"the node is overloaded: {self._response_bytes} answer bytes in progress, with this call's up to "
                f"{size} past its bound ({property_name('max_inflight_response_bytes')}={self._max_response_bytes}); "
                "retry with backoff"
            )
        return None

    def take_response(self, size: int) -> None:
        self._response_bytes += size
        self._peak_response_bytes = max(self._peak_response_bytes, self._response_bytes)

    def release_response(self, size: int) -> None:
        self._response_bytes -= size
        check_invariant(self._response_bytes >= 0, f"admission released more answer bytes than it took: {size}")

    def statistics(self) -> AdmissionStatistics:
        return AdmissionStatistics(
            self._calls, self._request_bytes, self._peak_calls, self._peak_request_bytes, self._max_calls,
            self._max_request_bytes, self._response_bytes, self._peak_response_bytes, self._max_response_bytes,
        )  # fmt: skip


@final
class AnswerHold:
    """The answer bytes one call holds in its admission: its potential size until built, then its actual size,
    until gRPC is done with the call (sent, failed or cancelled), whichever comes first of that and `release`."""

    def __init__(self, admission: Admission, size: int) -> None:
        self._admission = admission
        self.size = size
        self.released = False
        admission.take_response(size)

    def built(self, size: int) -> None:
        """The answer is built: it holds its own size from now on (at most what was taken: it shrinks)."""
        if not self.released and size < self.size:
            self._admission.release_response(self.size - size)
            self.size = size

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._admission.release_response(self.size)


def admission_gauges(admission: Admission) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
    statistics = admission.statistics()
    yield ("diskless_server_calls_in_progress", "Calls admitted and not yet answered.", "gauge", {},
           statistics.calls)  # fmt: skip
    yield ("diskless_server_request_bytes_in_progress", "Request bytes of the calls admitted and not yet answered.",
           "gauge", {}, statistics.request_bytes)  # fmt: skip
    yield ("diskless_server_calls_in_progress_peak", "Most calls in progress at once since the node started.",
           "gauge", {}, statistics.peak_calls)  # fmt: skip
    yield ("diskless_server_request_bytes_in_progress_peak",
           "Most request bytes in progress at once since the node started.", "gauge", {},
           statistics.peak_request_bytes)  # fmt: skip
    yield ("diskless_server_response_bytes_in_progress",
           "Answer bytes held by the calls admitted whose answers are bounded (FindBatches), not yet sent.", "gauge",
           {}, statistics.response_bytes)  # fmt: skip
    yield ("diskless_server_response_bytes_in_progress_peak",
           "Most answer bytes in progress at once since the node started.", "gauge", {},
           statistics.peak_response_bytes)  # fmt: skip
