"""A follower applies several fetched rounds in one SQLite transaction (`replica.apply.linger.ms`, issue #37), on
the simulated cluster: fewer transactions than rounds while commits keep coming, its state never above the high
watermark, and everything applied once the commits stop (an answer without frames applies at once)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from coordinator.machine.state.store import StateStore
from coordinator.runtime.ports import AppliedFrame
from tests.simulation.cluster import SimCluster, SimNode
from tests.test_replica_fetcher import COORDINATORS, _commit, _leader, _replicated, _topic
from tests.test_simulation import _until, simulate

COMMITS = 30
LINGER_MS = 300  # well above a commit's simulated round: several rounds per transaction
MAX_RECORDS = 8


def _applied_everywhere(sim: SimCluster, coordinator_id: int) -> bool:
    leader_watermark = _leader(sim, coordinator_id).shard(coordinator_id).statistics().high_watermark
    return all(n.shard(coordinator_id).statistics().applied_offset == leader_watermark for n in sim.running())


def _burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linger_ms: int, max_records: int = 10000
) -> tuple[int, int, list[int]]:
    """Commits COMMITS times in a row to coordinator 0; the follower nodes' SQLite transactions of coordinator 0,
    the commits, and each follower's records held below its high watermark, sampled after each commit."""
    transactions: Counter[Path] = Counter()
    apply = StateStore.apply

    def counted(store: StateStore, frames: Sequence[AppliedFrame]) -> None:
        if frames and store.coordinator_id == 0:
            transactions[store.path] += 1
        apply(store, frames)

    monkeypatch.setattr(StateStore, "apply", counted)

    async def work(sim: SimCluster) -> tuple[int, int, list[int]]:
        await sim.start_all()
        await _topic(sim)
        await _until("replicated", lambda: _replicated(sim))
        leader = _leader(sim, 0)
        followers: list[SimNode] = [n for n in sim.running() if n is not leader]
        transactions.clear()
        held = []
        for index in range(COMMITS):
            await _commit(sim, 0, f"wal/linger/{index}")
            for follower in followers:
                statistics = follower.shard(0).statistics()
                assert statistics.applied_offset <= statistics.high_watermark <= statistics.log_end_offset
                held.append(statistics.high_watermark - statistics.applied_offset)
        await _until("every replica applied everything", lambda: _applied_everywhere(sim, 0), within_s=2.0)
        on_followers = sum(n for path, n in transactions.items() if not path.is_relative_to(leader.data_dir))
        return on_followers, COMMITS * len(followers), held

    settings = {
        "diskless.coordinator.replica.apply.linger.ms": str(linger_ms),
        "diskless.coordinator.replica.apply.max.records": str(max_records),
    }
    return simulate(tmp_path, 41, work, coordinators=COORDINATORS, settings=settings)


def test_a_follower_applies_several_rounds_per_transaction_and_everything_once_commits_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every_round, commits, held_without = _burst(tmp_path / "without", monkeypatch, 0)
    lingering, _, held_with = _burst(tmp_path / "with", monkeypatch, LINGER_MS)
    bounded, _, held_bounded = _burst(tmp_path / "bounded", monkeypatch, LINGER_MS, max_records=MAX_RECORDS)
    # Without a linger each commit's records are a transaction of their own on each follower.
    assert every_round >= commits * 0.9, (every_round, commits)
    assert max(held_without) == 0
    # With one, records wait below the high watermark and several rounds share a transaction.
    assert lingering <= every_round / 3, (lingering, every_round)
    assert max(held_with) > 0
    # replica.apply.max.records bounds what waits, whatever the linger.
    assert max(held_bounded) < MAX_RECORDS <= max(held_with)
    assert lingering < bounded < every_round, (lingering, bounded, every_round)


def test_the_apply_linger_never_delays_an_answer_without_frames(tmp_path: Path) -> None:
    """One commit, then nothing: the follower learns the high watermark from the next (empty) long-poll answer and
    applies at once, however long the linger."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        loop = asyncio.get_running_loop()
        await _commit(sim, 0, "wal/alone")
        committed = loop.time()
        await _until("every replica applied the commit", lambda: _applied_everywhere(sim, 0))
        # Within a long poll (500 ms) and a little, far below the linger.
        assert loop.time() - committed < 0.7

    settings = {"diskless.coordinator.replica.apply.linger.ms": "5000"}
    simulate(tmp_path, 42, work, coordinators=COORDINATORS, settings=settings)
