"""A cluster with replication factor 1: each coordinator's leader is its only in-sync replica, so no follower's
fetch ever advances its high watermark; its own log end must (a topic creation once timed out for ever)."""

from __future__ import annotations

from pathlib import Path

from tests.simulation.cluster import SimCluster
from tests.test_simulation import _commit, _leader, _partition_of, _topic, simulate

SINGLE_REPLICA = {"diskless.coordinator.replication.factor": "1", "diskless.coordinator.min.insync.replicas": "1"}


def test_a_cluster_of_single_replicas_creates_topics_and_acknowledges_commits(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)  # asserts NONE: it answered REQUEST_TIMED_OUT before the fix
        for coordinator_id in range(sim.coordinators):
            leader = _leader(sim, coordinator_id)
            first = await _commit(leader, _partition_of(sim, coordinator_id), f"wal/{coordinator_id}-a")
            second = await _commit(leader, _partition_of(sim, coordinator_id), f"wal/{coordinator_id}-b")
            assert (first, second) == (0, 1), (coordinator_id, first, second)

    simulate(tmp_path, 7, work, nodes=2, settings=SINGLE_REPLICA)
