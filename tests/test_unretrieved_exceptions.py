"""No exception goes unseen (issue #30, item 8): asyncio's "Future exception was never retrieved" and "Task exception
was never retrieved" are failures nobody looked at. The simulated loop records them and fails the run that left any
(tests/simulation/loop.py: every simulated test checks it); a seeded run must leave none, and the race that left
them (an etcd renewal failing just as its node crashed, or as its timer fired) is replayed on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.base.clock import LoopClock
from coordinator.cluster.controller import run_within
from coordinator.cluster.memory_store import EtcdUnavailable
from tests.simulation.cluster import SimCluster
from tests.simulation.loop import ExceptionsNeverRetrieved, SimulatedLoop
from tests.simulation.workload import Workload


def _on_simulated_loop(work: object, fail_on_unretrieved: bool = False) -> SimulatedLoop:
    loop = SimulatedLoop(fail_on_unretrieved)
    try:
        loop.run_until_complete(work(loop))  # type: ignore[operator]
    finally:
        loop.close()  # collects garbage first: a dropped future reports to this loop
    return loop


def test_the_loop_records_an_exception_nobody_retrieved() -> None:
    async def work(loop: SimulatedLoop) -> None:
        dropped = loop.create_future()
        dropped.set_exception(RuntimeError("nobody looks"))
        del dropped

    loop = _on_simulated_loop(work)
    assert len(loop.never_retrieved) == 1 and "nobody looks" in loop.never_retrieved[0]
    with pytest.raises(ExceptionsNeverRetrieved, match=r"1 exceptions never retrieved.*nobody looks"):
        _on_simulated_loop(work, fail_on_unretrieved=True)


@pytest.mark.parametrize("fails_after_ms", [999, 1000, 1001])
def test_a_call_failing_as_its_timer_fires_is_seen(fails_after_ms: int) -> None:
    """The renewal's answer (a failure) and its timer at one instant: the failure is retrieved, whichever comes
    first, and the caller is told one of them."""

    async def work(loop: SimulatedLoop) -> None:
        clock = LoopClock(loop, 0)
        answer: asyncio.Future[None] = loop.create_future()
        # Scheduled before the timer of `run_within`: at one instant, the call fails first, then the timer fires.
        loop.call_later(fails_after_ms / 1000, answer.set_exception, EtcdUnavailable("etcd is unreachable"))

        async def renew() -> None:
            await answer

        with pytest.raises((TimeoutError, EtcdUnavailable)):
            await run_within(clock, renew(), 1000)
        await asyncio.sleep(1)

    assert _on_simulated_loop(work).never_retrieved == []


@pytest.mark.parametrize("fails_first", [True, False])
def test_a_call_failing_as_its_wait_is_cancelled_is_seen(fails_first: bool) -> None:
    """What seed 108 met: a node crashed (its controller closed, cancelling the session's task) at the instant its
    renewal failed, etcd being unreachable from it. The renewal's failure is retrieved; the task is cancelled."""

    async def work(loop: SimulatedLoop) -> None:
        answer: asyncio.Future[None] = loop.create_future()

        async def renew() -> None:
            await answer

        session = asyncio.ensure_future(run_within(LoopClock(loop, 0), renew(), 1000))

        def crash() -> None:
            steps = [lambda: answer.set_exception(EtcdUnavailable("etcd is unreachable")), session.cancel]
            for step in steps if fails_first else reversed(steps):
                step()

        loop.call_later(0.5, crash)
        with pytest.raises(asyncio.CancelledError):
            await session

    assert _on_simulated_loop(work).never_retrieved == []


def test_a_call_cut_short_by_its_timer_is_a_timeout() -> None:
    async def work(loop: SimulatedLoop) -> None:
        with pytest.raises(TimeoutError, match="no answer within 500 ms"):
            await run_within(LoopClock(loop, 0), asyncio.sleep(10), 500)

    assert _on_simulated_loop(work).never_retrieved == []


def _seeded_run(root: Path, seed: int, steps: int) -> list[str]:
    async def work(loop: SimulatedLoop) -> None:
        sim = SimCluster(root, loop, seed)
        try:
            report = await Workload(sim, seed, steps).run()
            assert report.acknowledged > 0
        finally:
            await sim.close()

    return _on_simulated_loop(work).never_retrieved


@pytest.mark.slow
def test_the_seeded_run_that_met_the_renewal_race_leaves_no_exception_unretrieved(tmp_path: Path) -> None:
    """Seed 108 of 600 steps met it: an etcd renewal failed as its timer fired ("Task exception was never retrieved"
    for NodeSession.renew, EtcdUnavailable)."""
    assert _seeded_run(tmp_path, 108, 600) == []
