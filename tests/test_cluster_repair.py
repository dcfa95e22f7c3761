"""Repair from replicas with real `diskless serve` nodes on a real etcd (issue #29 item 2): a follower stopped, one
bit flipped inside its log segment, started again: it leaves the ISR, sets its files aside, fetches the leader's
log, rejoins the ISR and serves every acknowledged batch, by itself."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.runtime.log.segment_files import SEGMENT_SUFFIX
from protos import coordinator_pb2 as pb
from tests.cluster_harness import Cluster, wait_for
from tests.harness import fetch_all_batches
from tests.test_cluster import _commit

pytestmark = pytest.mark.slow
SEED = 29


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path).start()
    try:
        yield running
    finally:
        running.print_state()  # shown when the test fails
        running.stop()


def test_a_follower_whose_log_segment_has_a_flipped_bit_repairs_and_rejoins_the_isr_with_every_batch(
    cluster: Cluster,
) -> None:
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    cluster.wait_fully_in_sync()
    topic_id = cluster.create_topic("repair", 2)
    coordinator_id = cluster.coordinator_of(cluster.nodes[0], topic_id, 0)
    leader = cluster.leader_of(coordinator_id)
    assert leader is not None
    acknowledged = 30
    for _ in range(acknowledged):
        assert _commit(leader.stub, topic_id, 0, coordinator_id) == pb.NONE
    follower = next(n for n in cluster.nodes if n is not leader)
    follower_id = cluster.nodes.index(follower)
    wait_for("the follower holds every batch",
             lambda: len(fetch_all_batches(follower.stub, topic_id, 0)[0]) == acknowledged)  # fmt: skip
    assert follower.stop() == 0
    segment = sorted((follower.data_dir / f"coordinator-{coordinator_id}" / "log").glob(f"*{SEGMENT_SUFFIX}"))[0]
    data = bytearray(segment.read_bytes())
    position = rng.randrange(len(data) // 2)  # inside the log: frames after it still verify
    data[position] ^= 1 << rng.randrange(8)
    segment.write_bytes(bytes(data))
    print(f"flipped a bit at byte {position} of {segment}")
    follower.start(wait_serving=False)

    def rejoined() -> bool:
        return follower_id in cluster.describe(leader, coordinator_id).isr and bool(
            cluster.log_lines(f"coordinator {coordinator_id}: damaged (")
        )

    wait_for("the damaged follower repaired and back in the ISR", rejoined, timeout_s=60)
    batches = wait_for(
        "the repaired follower serves every acknowledged batch",
        lambda: (found := fetch_all_batches(follower.stub, topic_id, 0)[0]) and len(found) == acknowledged and found,
    )
    assert [b.object_key for b in batches] == [b.object_key for b in fetch_all_batches(leader.stub, topic_id, 0)[0]]
    folders = list((follower.data_dir / f"coordinator-{coordinator_id}").glob("damaged-*"))
    assert len(folders) == 1 and list((folders[0] / "log").glob(f"*{SEGMENT_SUFFIX}")), "the damaged log is kept"
    # SERVING again: the health service follows the coordinators' states through the node's edge loop, a moment
    # after the repaired coordinator serves.
    wait_for("the repaired node SERVING again", lambda: follower.health() == 1, timeout_s=30)
