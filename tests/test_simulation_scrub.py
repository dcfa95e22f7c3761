"""The scrub in a cluster (issue #40 item 2): damage in a leader's sealed log segment that no read meets (every
follower is caught up, so none fetches it) is found by one scrub pass and repaired from a healthy replica, exactly
as when a follower's fetch meets it: the leader steps down, sets its files aside and catches up from the new leader.
Nothing acknowledged is lost. Seeded (the bit flipped): `DISKLESS_SIM_SEEDS=N` replays one.
"""

from __future__ import annotations

import random
from pathlib import Path

from coordinator.node.node import coordinator_directory
from coordinator.runtime.log.segment_files import SEGMENT_SUFFIX
from coordinator.runtime.shard.scrub_reads import LOG
from tests.simulation.cluster import SimCluster
from tests.test_simulation import _commit, _leader, _partition_of, _seeds, _topic, _until, simulate
from tests.test_simulation_repair import acknowledge, flip_bit, formed, in_sync_with, keys_found


def test_a_leaders_damaged_sealed_segment_found_by_the_scrub_is_repaired_from_a_follower(tmp_path: Path) -> None:
    seed = _seeds((3,))[0]
    print(f"seed {seed}")
    rng = random.Random(seed)
    settings = {"diskless.coordinator.log.segment.bytes": "2048", "diskless.coordinator.snapshot.interval.bytes": "0"}

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await formed(sim)
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        keys = await acknowledge(leader, partition, "scrubbed", 40)
        await _until("every replica applied them", lambda: all(
            n.shard(0).statistics().applied_offset == leader.shard(0).statistics().applied_offset for n in sim.nodes
        ))  # fmt: skip
        log_dir = coordinator_directory(leader.data_dir, 0) / "log"
        segments = sorted(log_dir.glob(f"*{SEGMENT_SUFFIX}"))
        assert len(segments) >= 2, segments
        sealed = rng.choice(segments[:-1])
        print(f"flipped a bit at byte {flip_bit(sealed, rng)} of {sealed}")
        report = await leader.shard(0).scrub()
        assert [finding.kind for finding in report.findings] == [LOG], report
        healthy = next(n for n in sim.nodes if n is not leader)
        await _until("another replica leads", lambda: not leader.shard(0).leads and any(
            n.shard(0).leads for n in sim.nodes if n is not leader
        ))  # fmt: skip
        new_leader = next(n for n in sim.nodes if n.shard(0).leads)
        await in_sync_with(sim, leader, new_leader, partition, keys)
        assert keys_found(healthy, partition) == keys
        assert await _commit(new_leader, partition, "wal/after") == len(keys)

    simulate(tmp_path, seed, work, settings=settings)
