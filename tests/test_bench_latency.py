"""The benchmark's open-loop latency is measured from the intended send time (wrk2's correction): a server that
stalls shows the stall in the latency of every commit scheduled behind it, not only in the one it stalled.

The driver's broker loop runs on a clock that moves only when the fake server or the pacing wait moves it, so
every figure here is exact and the test takes no real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bench.driver import Event, LoadPlan, _Load, intended_send_at, percentile_ms, timed
from bench.systems import Counters, FindOutcome, FindPosition
from bench.workload import SHAPES, CommitSpec

INTERVAL_S = 0.1  # each commit due 100 ms after the one before
SERVICE_S = 0.01  # the fake server answers a commit in 10 ms
STALL_S = 0.55  # but one commit takes 550 ms: five more fall due while it is under way
STALLED_COMMIT = 3
COMMITS = 20


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float, stop: asyncio.Event) -> None:
        self.t += seconds
        await asyncio.sleep(0)


class StallingSystem:
    """Answers every commit in SERVICE_S of the fake clock, the STALLED_COMMIT-th in STALL_S; stops after COMMITS."""

    name = "stalling"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.commits = 0
        self.stop: asyncio.Event | None = None

    async def open(self) -> None:
        pass

    async def create_topic(self, name: str, partitions: int) -> int:
        return 0

    async def commit(self, topic: int, spec: CommitSpec) -> int:
        self.clock.t += STALL_S if self.commits == STALLED_COMMIT else SERVICE_S
        self.commits += 1
        if self.commits == COMMITS and self.stop is not None:
            self.stop.set()
        await asyncio.sleep(0)
        return len(spec.batches)

    async def find(self, topic: int, positions: Sequence[FindPosition], fetch_max_bytes: int) -> list[FindOutcome]:
        return []

    async def counters(self) -> Counters:
        return Counters(0.0, 0, 0)

    async def close(self) -> None:
        pass


def _run_one_broker(interval_s: float) -> tuple[list[Event], _Load]:
    clock = FakeClock()
    system = StallingSystem(clock)
    plan = LoadPlan(SHAPES["small"], 1, interval_s, 0.0, 0.0, 0, 0.0)

    async def run() -> _Load:
        load = _Load(system, 0, plan, seed=0, key_prefix="wal/test", clock=clock)
        system.stop = load.stop
        await load.broker(0)
        return load

    load = asyncio.run(run())
    assert len(load.commits) == COMMITS
    return load.commits, load


def test_a_stall_counts_in_the_latency_of_every_commit_scheduled_behind_it() -> None:
    commits, _ = _run_one_broker(INTERVAL_S)
    first_at = commits[0].finished_at - SERVICE_S  # the first commit went out on time
    stall_ends = commits[STALLED_COMMIT].finished_at
    assert stall_ends == pytest.approx(first_at + STALLED_COMMIT * INTERVAL_S + STALL_S)
    behind = [
        (index, event)
        for index, event in enumerate(commits)
        if index > STALLED_COMMIT and first_at + index * INTERVAL_S < stall_ends
    ]
    assert len(behind) == 5  # due at +0.4 .. +0.8 s, while the stalled commit was under way until +0.85 s
    for index, event in behind:
        intended = first_at + index * INTERVAL_S
        # Its latency runs from when it was due: the wait behind the stall is in it...
        assert event.latency_s >= stall_ends - intended
        assert event.latency_s == pytest.approx(event.finished_at - intended)
        assert event.send_lag_s == pytest.approx(event.latency_s - SERVICE_S)
        # ...while timed from its send it looks as fast as any other (what coordinated omission reports).
        assert event.from_send_s == pytest.approx(SERVICE_S)
    # Five of twenty commits waited 100 ms or more: the p99 (and the p50 of those behind) shows the stall.
    assert percentile_ms([e.latency_s for e in commits], 0.99) == pytest.approx(STALL_S * 1000)
    assert percentile_ms([e.latency_s for _, e in behind], 0.5) >= 250
    assert percentile_ms([e.from_send_s for _, e in behind], 1.0) == pytest.approx(SERVICE_S * 1000)
    # The schedule did not slip: once caught up, commits go out on time again, every INTERVAL_S from the first.
    on_time = [e for i, e in enumerate(commits) if i <= STALLED_COMMIT or i > STALLED_COMMIT + len(behind) + 1]
    assert all(e.send_lag_s == pytest.approx(0.0, abs=1e-9) for e in on_time)
    assert commits[-1].finished_at == pytest.approx(first_at + (COMMITS - 1) * INTERVAL_S + SERVICE_S)


def test_the_window_figures_report_both_latencies_and_the_send_lag() -> None:
    commits, load = _run_one_broker(INTERVAL_S)
    begin, end = commits[0].finished_at - 1, commits[-1].finished_at + 1
    figures = load.figures(begin, end, Counters(0.0, 0, 0), Counters(1.0, 0, 0), 0.0)
    assert figures.p99_ms == pytest.approx(STALL_S * 1000)
    assert figures.p99_from_send_ms == pytest.approx(STALL_S * 1000)  # the stalled commit itself
    assert figures.p50_from_send_ms == pytest.approx(SERVICE_S * 1000)
    first_behind_lag = STALL_S - INTERVAL_S  # due 100 ms after the stalled commit, sent when it ended
    assert figures.send_lag_max_ms == pytest.approx(first_behind_lag * 1000)
    assert figures.send_lag_p99_ms == pytest.approx(first_behind_lag * 1000)


def test_in_the_closed_loop_latency_is_from_the_send_and_nothing_lags() -> None:
    commits, _ = _run_one_broker(0.0)
    assert [round(e.latency_s, 9) for e in commits] == [
        STALL_S if i == STALLED_COMMIT else SERVICE_S for i in range(COMMITS)
    ]
    assert all(e.send_lag_s == 0.0 and e.from_send_s == e.latency_s for e in commits)


def test_the_schedule_is_a_product_and_an_early_timer_is_timed_from_its_send() -> None:
    assert intended_send_at(10.0, 0.1, 1_000_000, now=99.0) == pytest.approx(100_010.0)
    assert intended_send_at(10.0, 0.0, 7, now=99.0) == 99.0
    early = timed(intended_at=5.0, sent_at=4.999, finished_at=5.01, batches=1)
    assert early.latency_s == pytest.approx(0.011) and early.send_lag_s == 0.0
    late = timed(intended_at=5.0, sent_at=5.3, finished_at=5.31, batches=1)
    assert late.latency_s == pytest.approx(0.31) and late.send_lag_s == pytest.approx(0.3)
    assert late.from_send_s == pytest.approx(0.01)
