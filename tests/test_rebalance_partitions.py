"""`DescribePartitionLoads` and `diskless rebalance-partitions` against a node (docs/design.md §5a)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli.main import main
from coordinator.topics.partition_balance import PartitionLoad, plan_partition_moves
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from tests.harness import Broker, batch, coordinator_of, laid_out, topic_name
from tests.in_process import InProcessNode, clock_running

REPO = Path(__file__).resolve().parent.parent


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def _loaded_node(fresh_node: InProcessNode) -> tuple[InProcessNode, bytes, dict[int, int], dict[int, int]]:
    """A node whose topic's coordinator holds 8 batches, the others 2: (node, topic id, placement, batches)."""
    node = fresh_node.start()
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("loads"), 8)
    # Partitions p and p + 4 share a coordinator (placement is (crc32(topic id) + p) mod 4): one holds 8.
    batches = {0: 4, 4: 4, 1: 1, 5: 1, 2: 1, 6: 1, 3: 1, 7: 1}
    for partition, count in batches.items():
        answer = broker.commit(laid_out([batch(topic_id, partition) for _ in range(count)]))
        assert all(b.error_code == pb.NONE for b in answer.batches), answer
    placement = {p: coordinator_of(node.stub, topic_id, p) for p in batches}
    return node, topic_id, placement, batches


def test_each_partition_of_a_led_coordinator_is_described_with_its_live_batches(fresh_node: InProcessNode) -> None:
    node, topic_id, placement, batches = _loaded_node(fresh_node)
    answer = admin_pb2_grpc.CoordinatorAdminStub(node.channel()).DescribePartitionLoads(
        admin.DescribePartitionLoadsRequest(), timeout=10
    )
    assert sorted(c.coordinator_id for c in answer.coordinators) == list(range(node.coordinators))
    found = {
        p.partition: (c.coordinator_id, p.live_batches)
        for c in answer.coordinators
        for p in c.partitions
        if p.topic_id == topic_id
    }
    assert found == {p: (placement[p], batches[p]) for p in batches}
    unknown = admin_pb2_grpc.CoordinatorAdminStub(node.channel()).DescribePartitionLoads(
        admin.DescribePartitionLoadsRequest(coordinator_ids=[99]), timeout=10
    )
    assert [(c.coordinator_id, c.error_code) for c in unknown.coordinators] == [(99, pb.NOT_COORDINATOR)]


def test_the_dry_run_prints_a_plan_that_evens_the_loads_and_without_it_the_moves_run(
    fresh_node: InProcessNode, capsys: pytest.CaptureFixture[str]
) -> None:
    node, topic_id, placement, batches = _loaded_node(fresh_node)
    done = diskless("rebalance-partitions", "--bootstrap", node.address, "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    before = dict.fromkeys(range(node.coordinators), 0)
    for partition, count in batches.items():
        before[placement[partition]] += count
    assert plan["before"] == {str(c): n for c, n in before.items()}
    loads = [PartitionLoad(placement[p], topic_id, p, n) for p, n in batches.items()]
    expected = plan_partition_moves(loads, range(node.coordinators))
    assert expected, "the loads are uneven: a plan moves something"
    assert [(m["topic_id"], m["partition"], m["from"], m["to"]) for m in plan["moves"]] == [
        (m.topic_id.hex(), m.partition, m.from_coordinator, m.to_coordinator) for m in expected
    ]
    spread_before = max(before.values()) - min(before.values())
    assert max(plan["after"].values()) - min(plan["after"].values()) < spread_before

    # Without --dry-run the plan's moves run one after another; the node's clock moves on meanwhile (its move
    # workers pass only as the test's clock says).
    with clock_running(node):
        assert main(["rebalance-partitions", "--bootstrap", node.address, "--timeout-s", "60"]) == 0
    assert "moved out" in capsys.readouterr().err
    moved = {m["partition"]: m["to"] for m in plan["moves"]}
    assert {p: coordinator_of(node.stub, topic_id, p) for p in batches} == {**placement, **moved}
    loads = admin_pb2_grpc.CoordinatorAdminStub(node.channel()).DescribePartitionLoads(
        admin.DescribePartitionLoadsRequest(), timeout=10
    )
    after = {
        str(c.coordinator_id): sum(p.live_batches for p in c.partitions if p.topic_id == topic_id)
        for c in loads.coordinators
    }
    assert after == plan["after"]
