"""`diskless bench gateways`: who takes which producer in each mode, and a seconds-long run on a real cluster in
which brokers following the gateways at saturation commit each WAL file in one call, against several when they take
any partition."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bench.gateways import PARTITIONS, RACKS, assign_any, assign_gateways, rack_of
from coordinator.reads.produce_gateways import Broker, produce_gateways
from protos import coordinator_pb2 as pb

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 300
COORDINATORS = 12


def _response(brokers: int, leaders: dict[int, int]) -> pb.DescribeProduceGatewaysResponse:
    gateways = produce_gateways([Broker(b, rack_of(b)) for b in range(brokers)], leaders)
    return pb.DescribeProduceGatewaysResponse(
        gateways=[pb.DescribeProduceGatewaysResponse.Gateway(coordinator_id=g.coordinator_id, rack=g.rack,
                                                             broker_ids=g.broker_ids) for g in gateways]
    )  # fmt: skip


def _every_producer_once_in_its_own_rack(taken: dict[int, list[tuple[int, int]]]) -> None:
    counted = Counter(producer for producers in taken.values() for producer in producers)
    assert set(counted) == {(p, r) for p in range(PARTITIONS) for r in range(RACKS)}
    assert set(counted.values()) == {1}
    for broker, producers in taken.items():
        assert {r for _, r in producers} <= {broker % RACKS}


@pytest.mark.parametrize("brokers", [3, 6, 36, 108])
def test_each_mode_gives_every_producer_to_one_broker_of_its_rack(brokers: int) -> None:
    coordinator_of = [p * 7 % COORDINATORS for p in range(PARTITIONS)]
    leaders = {c: c % 3 for c in range(COORDINATORS)}
    _every_producer_once_in_its_own_rack(assign_any(brokers))
    following = assign_gateways(brokers, coordinator_of, _response(brokers, leaders))
    _every_producer_once_in_its_own_rack(following)
    gateway_of = {
        (g.coordinator_id, g.rack): set(g.broker_ids) for g in _response(brokers, leaders).gateways
    }  # fmt: skip
    for broker, producers in following.items():
        for partition, _ in producers:
            assert broker in gateway_of[(coordinator_of[partition], rack_of(broker))]


def test_at_saturation_a_following_broker_holds_one_coordinator_and_one_taking_any_holds_several() -> None:
    # Round-robin from some first coordinator, as the node places a topic's partitions: brokers taking any partition
    # still span every node, brokers following the gateways one coordinator each.
    coordinator_of = [(p + 5) % COORDINATORS for p in range(PARTITIONS)]
    leaders = {c: c // 4 for c in range(COORDINATORS)}
    following = assign_gateways(36, coordinator_of, _response(36, leaders))
    anyone = assign_any(36)
    assert {len({coordinator_of[p] for p, _ in producers}) for producers in following.values()} == {1}
    assert min(len({leaders[coordinator_of[p]] for p, _ in producers}) for producers in anyone.values()) == 3


@pytest.mark.slow
def test_a_short_run_on_a_real_cluster_commits_in_one_call_per_file_when_following_at_saturation(
    tmp_path: Path,
) -> None:
    out = tmp_path / "gateways"
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "bench", "gateways", "--brokers", "36", "--cadence", "max", "--runs",
         "1", "--warmup-s", "1", "--window-s", "2", "--no-install", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["mode"]: row for row in json.loads((out / "results.json").read_text())["rows"]}
    assert rows["gateways"]["calls_per_file_max"] == 1 and rows["gateways"]["nodes_per_file"] == 1, rows
    assert rows["any"]["calls_per_file"] > 2, rows
    for row in rows.values():
        assert row["batches_per_s"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0, row
    assert "| 36 | max | gateways | 1.00 |" in (out / "results.md").read_text()
