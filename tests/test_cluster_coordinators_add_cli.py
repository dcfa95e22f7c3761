"""`diskless coordinators add` on a real cluster: 3 nodes and etcd, each node its own process.

The CLI adds one through one node; every node serves it (DescribeCoordinators, one leader, full ISR); a new topic
spreads over all three coordinators and the added one takes commits; a node killed -9 and started again with its
old `--coordinators` takes etcd's count; `diskless rebalance --dry-run` still plans. A node spread over commit
processes refuses with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from protos import coordinator_pb2 as pb
from tests.cluster_harness import Cluster, wait_for
from tests.harness import REPO, ServerProcess, batch

pytestmark = pytest.mark.slow


def _diskless(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *arguments], cwd=REPO, capture_output=True, text=True, timeout=180
    )


def _commit(cluster: Cluster, topic_id: bytes, partition: int, coordinator_id: int) -> int:
    leader = wait_for(f"a leader of coordinator {coordinator_id}", lambda: cluster.leader_of(coordinator_id))
    answer = leader.stub.CommitFile(
        pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100, uploader_broker_id=1,
            owner_ids=[coordinator_id], batches=[batch(topic_id, partition)],
        ),
        timeout=10,
    )  # fmt: skip
    assert answer.batches[0].error_code == pb.NONE, answer
    return answer.batches[0].assigned_base_offset


def test_the_cli_adds_a_coordinator_that_every_node_serves_and_a_restarted_node_keeps(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, coordinators=2)
    cluster.start()
    try:
        cluster.wait_fully_in_sync()
        old_topic = cluster.create_topic("before", 4)
        old_places = {p: Cluster.coordinator_of(cluster.nodes[0], old_topic, p) for p in range(4)}

        added = _diskless("coordinators", "add", "--bootstrap", cluster.nodes[1].address, "--count", "1", "--json")
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["coordinators"] == [{"previous_count": 2, "count": 3}]
        again = _diskless("coordinators", "add", "--bootstrap", cluster.nodes[2].address, "--total", "3")
        assert again.returncode == 0, again.stderr  # the same total again: no change
        cluster.coordinators = 3
        cluster.wait_fully_in_sync()  # every node: 3 coordinators, each led, every replica in its ISR

        assert {p: Cluster.coordinator_of(cluster.nodes[2], old_topic, p) for p in range(4)} == old_places
        new_topic = cluster.create_topic("after", 6)
        new_places = {p: Cluster.coordinator_of(cluster.nodes[0], new_topic, p) for p in range(6)}
        assert sorted(set(new_places.values())) == [0, 1, 2]
        on_added = next(p for p, c in new_places.items() if c == 2)
        assert _commit(cluster, new_topic, on_added, 2) == 0
        for node in cluster.nodes:
            assert Cluster.coordinator_of(node, new_topic, on_added) == 2

        restarted = cluster.nodes[0]
        restarted.restart(kill=True)  # still started with --coordinators 2: etcd's count wins
        wait_for("the restarted node serves 3", lambda: sorted(cluster.descriptions(restarted)) == [0, 1, 2])
        cluster.wait_fully_in_sync()
        assert _commit(cluster, new_topic, on_added, 2) == 1

        planned = _diskless("rebalance", "--bootstrap", cluster.nodes[2].address, "--dry-run", "--json")
        assert planned.returncode == 0, planned
        assert json.loads(planned.stdout)["after"]["replicas"] == {"0": 3, "1": 3, "2": 3}
    except BaseException:
        cluster.print_state()
        raise
    finally:
        cluster.stop()


def test_a_node_spread_over_commit_processes_refuses_an_add_with_the_reason(tmp_path: Path) -> None:
    node = ServerProcess(tmp_path / "data", coordinators=4, settings={"diskless.node.processes": "2"}).start()
    try:
        refused = _diskless("coordinators", "add", "--bootstrap", node.address, "--count", "1")
        assert refused.returncode != 0
        assert "INVALID_REQUEST" in refused.stderr and "commit processes" in refused.stderr, refused.stderr
        assert len(node.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=10).coordinators) == 4
    finally:
        node.kill()
