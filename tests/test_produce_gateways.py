"""Produce gateways (KIP-1164 "Reducing multi-DC commit operations", DESIGN §2): the pure rule, the RPC through a
node's Router and its gRPC edge, the routing client, and `diskless describe --gateways`.

The rule's properties are checked under hypothesis over random clusters; how many leader nodes a broker's
coordinators span is checked against bounds: at least ⌈its coordinators / the largest leader group⌉ (a lower bound
for any assignment), at most ⌈(its coordinators - 1) / the smallest group⌉ + 1 (what contiguous runs guarantee).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.cli.main import main
from coordinator.client.routing_client import RoutingClient
from coordinator.reads.produce_gateways import Broker, Gateway, produce_gateways, run_sizes
from protos import coordinator_pb2 as pb
from tests.harness import REPO
from tests.in_process import InProcessNode
from tests.lanes import sized

RACKS = ("r0", "r1", "r2")
KIP_COORDINATORS = 12
# The KIP's scenarios: brokers spread evenly over 3 racks -> (gateways per coordinator per rack, the most
# coordinators one broker is a gateway for).
KIP_SCENARIOS = {3: (1, 12), 6: (1, 6), 12: (1, 3), 24: (1, 2), 36: (1, 1), 108: (3, 1)}


def spread(count: int, racks: Sequence[str] = RACKS) -> list[Broker]:
    return [Broker(broker_id, racks[broker_id % len(racks)]) for broker_id in range(count)]


def served(gateways: Sequence[Gateway]) -> dict[tuple[str, int], list[int]]:
    """(rack, broker) -> the coordinators it is a gateway for."""
    by_broker: dict[tuple[str, int], list[int]] = {}
    for gateway in gateways:
        for broker_id in gateway.broker_ids:
            by_broker.setdefault((gateway.rack, broker_id), []).append(gateway.coordinator_id)
    return by_broker


def leader_spans(gateways: Sequence[Gateway], leaders: Mapping[int, int]) -> dict[tuple[str, int], tuple[int, int]]:
    """(rack, broker) -> (coordinators it serves, distinct leader nodes among them)."""
    return {key: (len(cs), len({leaders[c] for c in cs})) for key, cs in served(gateways).items()}


# ---------------------------------------------------------------- the KIP's scenarios


@pytest.mark.parametrize("brokers", sorted(KIP_SCENARIOS))
def test_the_kips_scenarios(brokers: int) -> None:
    per_rack, most = KIP_SCENARIOS[brokers]
    leaders = {c: c % 3 for c in range(KIP_COORDINATORS)}  # 3 nodes leading 4 coordinators each
    gateways = produce_gateways(spread(brokers), leaders)
    assert [(g.coordinator_id, g.rack) for g in gateways] == [(c, r) for c in range(KIP_COORDINATORS) for r in RACKS]
    assert {len(g.broker_ids) for g in gateways} == {per_rack}
    loads = Counter(len(cs) for cs in served(gateways).values())
    assert max(loads) == most
    assert sum(count for count in loads.elements()) == KIP_COORDINATORS * per_rack * len(RACKS)


def test_coordinators_of_one_leader_share_gateways_when_the_balance_allows() -> None:
    leaders = {c: c // 4 for c in range(KIP_COORDINATORS)}  # nodes 0, 1, 2 lead 0-3, 4-7, 8-11
    for brokers in (9, 18):  # 3 or 6 per rack: a broker takes 4 or 2 coordinators, one leader's each
        spans = leader_spans(produce_gateways(spread(brokers), leaders), leaders)
        assert {span for _, span in spans.values()} == {1}, spans


def test_the_larger_runs_are_placed_where_the_leader_groups_end() -> None:
    groups = [0] * 2 + [1] * 3 + [2] * 2 + [3] * 3 + [4] * 2  # 12 coordinators, 5 brokers: runs of 2 or 3
    assert run_sizes(groups, 5) == [2, 3, 2, 3, 2]
    assert run_sizes([7] * 5, 2) == [3, 2]  # one group: the larger run first
    assert run_sizes([1, 2, 3], 5) == [1, 1, 1, 0, 0]


def test_a_brokers_run_follows_the_leader_groups_not_even_cuts() -> None:
    # The co-location step through produce_gateways itself: 12 coordinators led in groups of 2, 3, 2, 3, 2 and 5
    # brokers in one rack. Runs cut evenly (3, 3, 2, 2, 2) would give brokers coordinators of two leaders; the
    # leader-aware runs (2, 3, 2, 3, 2) give each broker one leader's coordinators.
    groups = [0] * 2 + [1] * 3 + [2] * 2 + [3] * 3 + [4] * 2
    leaders = dict(enumerate(groups))
    gateways = produce_gateways([Broker(b, "a") for b in range(5)], leaders)
    assert sorted(served(gateways).values()) == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9], [10, 11]]
    assert {span for _, span in leader_spans(gateways, leaders).values()} == {1}


@settings(max_examples=sized(200, 50), deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=14), st.integers(1, 9))
def test_the_runs_span_the_fewest_leaders_of_any_cut(leader_list: list[int], brokers: int) -> None:
    # Brute force over every choice of which runs take the extra coordinator: produce_gateways's brokers together
    # span as few leader nodes as the best of them (one rack, so one gateway each when brokers <= coordinators).
    leaders = dict(enumerate(sorted(leader_list)))  # coordinators numbered in their leader groups
    count = len(leaders)
    if brokers > count:
        return
    gateways = produce_gateways([Broker(b) for b in range(brokers)], leaders)
    total = sum(span for _, span in leader_spans(gateways, leaders).values())
    small, larger = divmod(count, brokers)
    best = count
    for extra in itertools.combinations(range(brokers), larger):
        start, spans = 0, 0
        for run in range(brokers):
            size = small + (run in extra)
            spans += len({leaders[c] for c in range(start, start + size)})
            start += size
        best = min(best, spans)
    assert total == best


def test_brokers_left_over_are_the_highest_ids() -> None:
    # Several gateways per coordinator (per > 1) and brokers left over: the slots go to the lowest broker ids, the
    # documented deterministic answer (runs of one slot first), so every node computes the same gateways.
    gateways = produce_gateways([Broker(b, "a") for b in range(5)], {0: 7, 1: 8})
    assert gateways == [Gateway(0, "a", (0, 1)), Gateway(1, "a", (2, 3))]


def test_brokers_without_a_rack_form_one_rack_and_no_brokers_no_gateways() -> None:
    leaders = {0: 5, 1: 5}
    assert produce_gateways([Broker(3), Broker(1, "a"), Broker(2)], leaders) == [
        Gateway(0, "", (2,)), Gateway(0, "a", (1,)), Gateway(1, "", (3,)), Gateway(1, "a", (1,)),
    ]  # fmt: skip
    assert produce_gateways([], leaders) == []
    assert produce_gateways([Broker(1)], {}) == []


def test_a_broker_id_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"given more than once: \[4\]"):
        produce_gateways([Broker(4, "a"), Broker(5, "a"), Broker(4, "b")], {0: 0})


# ---------------------------------------------------------------- random clusters

clusters = st.tuples(
    st.dictionaries(st.integers(0, 300), st.sampled_from(("", "a", "b", "c")), max_size=120),
    st.lists(st.integers(-1, 5), min_size=1, max_size=40),  # coordinator i's leader node
    st.randoms(use_true_random=False),
)


@settings(max_examples=sized(300, 75), deadline=None)
@given(clusters)
def test_the_rule_holds_on_random_clusters(cluster: tuple[dict[int, str], list[int], random.Random]) -> None:
    rack_of, leader_list, shuffler = cluster
    leaders = dict(enumerate(leader_list))
    brokers = [Broker(b, r) for b, r in rack_of.items()]
    gateways = produce_gateways(brokers, leaders)
    racks = sorted(set(rack_of.values()))
    count = len(leaders)
    assert [(g.coordinator_id, g.rack) for g in gateways] == [(c, r) for c in range(count) for r in racks]
    rack_sizes = Counter(rack_of.values())
    for gateway in gateways:
        assert len(gateway.broker_ids) == max(1, rack_sizes[gateway.rack] // count)
        assert list(gateway.broker_ids) == sorted(set(gateway.broker_ids)), "distinct, ascending"
        assert all(rack_of[b] == gateway.rack for b in gateway.broker_ids), "a rack's own brokers only"
    loads = served(gateways)
    for broker_id, rack in rack_of.items():
        per = max(1, rack_sizes[rack] // count)
        share = count * per / rack_sizes[rack]
        assert math.floor(share) <= len(loads.get((rack, broker_id), [])) <= math.ceil(share)
    # The same input in any order.
    shuffler.shuffle(brokers)
    shuffled = list(leaders.items())
    shuffler.shuffle(shuffled)
    assert produce_gateways(brokers, dict(shuffled)) == gateways
    # Leader nodes a broker's coordinators span: between the lower bound and what contiguous runs guarantee.
    sizes = Counter(leaders.values())
    largest, smallest = max(sizes.values()), min(sizes.values())
    for served_count, span in leader_spans(gateways, leaders).values():
        assert math.ceil(served_count / largest) <= span <= math.ceil((served_count - 1) / smallest) + 1


# ---------------------------------------------------------------- the RPC


def request(*brokers: tuple[int, str]) -> pb.DescribeProduceGatewaysRequest:
    return pb.DescribeProduceGatewaysRequest(
        brokers=[pb.DescribeProduceGatewaysRequest.Broker(broker_id=b, rack=r) for b, r in brokers]
    )


def table(response: pb.DescribeProduceGatewaysResponse) -> list[tuple[int, str, list[int]]]:
    return [(g.coordinator_id, g.rack, list(g.broker_ids)) for g in response.gateways]


# A node alone leads its 4 coordinators: rack "a" of 2 brokers splits them 2 and 2; rack "b" has one broker.
EXPECTED_ALONE = [
    (0, "a", [1]), (0, "b", [3]), (1, "a", [1]), (1, "b", [3]),
    (2, "a", [2]), (2, "b", [3]), (3, "a", [2]), (3, "b", [3]),
]  # fmt: skip


def test_the_rpc_through_the_router_and_the_edge(server: InProcessNode) -> None:
    router = server.node.router
    answered = router.describe_produce_gateways(request((3, "b"), (2, "a"), (1, "a")))
    assert answered.error_code == pb.NONE and table(answered) == EXPECTED_ALONE
    assert table(server.stub.DescribeProduceGateways(request((1, "a"), (3, "b"), (2, "a")))) == EXPECTED_ALONE
    twice = server.stub.DescribeProduceGateways(request((1, "a"), (2, "a"), (1, "b")))
    assert twice.error_code == pb.INVALID_REQUEST and "[1]" in twice.error_message and not twice.gateways
    empty = server.stub.DescribeProduceGateways(request())
    assert empty.error_code == pb.NONE and not empty.gateways


def test_the_routing_client_asks_any_node(server: InProcessNode) -> None:
    async def scenario() -> pb.DescribeProduceGatewaysResponse:
        async with RoutingClient(["127.0.0.1:1", server.address], backoff_initial_ms=5) as client:
            return await client.describe_produce_gateways(request((1, "a"), (2, "a"), (3, "b")).brokers)

    assert table(server.loop.run(scenario())) == EXPECTED_ALONE


# ---------------------------------------------------------------- diskless describe --gateways


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def diskless_in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """The command's main in this process, its output captured: as `diskless` answers, without a process start (a
    second or more each); each test below still runs the command once as the operator does."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exited:  # argparse's usage errors
            code = exited.code if isinstance(exited.code, int) else 2
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def test_describe_gateways_prints_the_table(server: InProcessNode, tmp_path: Path) -> None:
    brokers = tmp_path / "brokers.json"
    brokers.write_text(json.dumps([{"broker_id": 2, "rack": "a"}, {"broker_id": 1, "rack": "a"}, {"broker_id": 3}]))
    done = diskless("describe", "--bootstrap", server.address, "--gateways", str(brokers), "--json")
    assert done.returncode == 0, done.stderr
    expected = [(c, "" if r == "b" else r, b) for c, r, b in EXPECTED_ALONE]
    expected.sort(key=lambda row: (row[0], row[1]))
    assert [(g["coordinator_id"], g["rack"], g["brokers"]) for g in json.loads(done.stdout)["gateways"]] == [
        (c, r, ",".join(map(str, b))) for c, r, b in expected
    ]
    printed = diskless_in_process(
        "describe", "--bootstrap", server.address, "--gateways", str(brokers), "--coordinator", "3"
    )
    assert printed.returncode == 0, printed.stderr
    assert [line.split() for line in printed.stdout.splitlines()] == [
        ["coordinator_id", "rack", "brokers"], ["3", "-", "3"], ["3", "a", "2"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read"),
        ("{not json", "cannot read"),
        ('{"broker_id": 1}', "a JSON list"),
        ('[{"broker_id": "1", "rack": "a"}]', "entry 0"),
        ('[{"broker_id": 1, "rack": 7}]', "entry 0"),
        ('[{"broker_id": 1}, {"broker_id": 2, "zone": "a"}]', "entry 1"),
        ('[{"broker_id": 1}, {"broker_id": 1, "rack": "a"}]', "INVALID_REQUEST"),
    ],
)
def test_describe_gateways_with_a_bad_file_is_a_one_line_error(
    server: InProcessNode, tmp_path: Path, content: str | None, reason: str
) -> None:
    brokers = tmp_path / "brokers.json"
    if content is not None:
        brokers.write_text(content)
    run = diskless if reason == "cannot read" and content is None else diskless_in_process
    done = run("describe", "--bootstrap", server.address, "--gateways", str(brokers))
    assert done.returncode == 2 and reason in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_describe_gateways_needs_a_running_node(tmp_path: Path) -> None:
    done = diskless("describe", "--data-dir", str(tmp_path), "--gateways", str(tmp_path / "brokers.json"))
    assert done.returncode == 2 and "--bootstrap" in done.stderr, done.stderr
