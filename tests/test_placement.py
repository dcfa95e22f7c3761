"""The placement at formation and the rebalance plan: even replicas and preferred leaders, fewest moves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.cluster.placement import (
    even_preferred_leaders,
    initial_placement,
    leader_counts,
    plan_rebalance,
    replica_counts,
)
from tests.lanes import sized


def spread(counts: dict[int, int], nodes: list[int]) -> int:
    values = [counts.get(n, 0) for n in nodes]
    return max(values) - min(values)


def fewest_moves(current: dict[int, tuple[int, ...]], nodes: list[int], factor: int) -> int:
    """The lower bound for an even placement without exclusions: the replicas above each node's even share, the
    larger shares (one more) given to the nodes that hold most already."""
    counts = replica_counts(current)
    total = len(current) * factor
    floor, extra = divmod(total, len(nodes))
    ranked = sorted(nodes, key=lambda n: -counts.get(n, 0))
    share = {n: floor + (1 if i < extra else 0) for i, n in enumerate(ranked)}
    return sum(max(0, counts.get(n, 0) - share[n]) for n in nodes)


def moves(current: dict[int, tuple[int, ...]], plan: dict[int, tuple[int, ...]]) -> int:
    return sum(len(set(plan[c]) - set(current[c])) for c in plan)


@given(coordinators=st.integers(0, 60), node_count=st.integers(1, 9), factor=st.integers(1, 5))
@settings(max_examples=sized(300, 75), deadline=None)
def test_initial_placement_is_even(coordinators: int, node_count: int, factor: int) -> None:
    nodes = [n * 3 + 1 for n in range(node_count)]  # ids need not be dense
    if node_count < factor:
        with pytest.raises(ValueError, match="at least the replication factor"):
            initial_placement(coordinators, nodes, factor)
        return
    placement = initial_placement(coordinators, nodes, factor)
    assert sorted(placement) == list(range(coordinators))
    for replicas in placement.values():
        assert len(replicas) == factor and len(set(replicas)) == factor and set(replicas) <= set(nodes)
    if coordinators:
        assert spread(replica_counts(placement), nodes) <= 1
        assert spread(leader_counts(placement), nodes) <= 1


def test_three_nodes_replication_three_lead_one_third_each() -> None:
    placement = initial_placement(12, [1, 2, 3], 3)
    assert leader_counts(placement) == {1: 4, 2: 4, 3: 4}
    assert replica_counts(placement) == {1: 12, 2: 12, 3: 12}


placements = st.integers(2, 7).flatmap(
    lambda node_count: st.tuples(
        st.just(node_count),
        st.integers(1, min(3, node_count)).flatmap(
            lambda factor: st.tuples(
                st.just(factor),
                st.lists(st.permutations(list(range(node_count))).map(lambda p: tuple(p[:factor])), max_size=30),
            )
        ),
    )
)


@given(placements, st.integers(0, 3))
@settings(max_examples=sized(300, 75), deadline=None)
def test_rebalance_reaches_even_counts_with_fewest_moves(
    drawn: tuple[int, tuple[int, list[tuple[int, ...]]]], added: int
) -> None:
    node_count, (factor, replica_lists) = drawn
    current = dict(enumerate(replica_lists))
    nodes = list(range(node_count + added))  # nodes added after formation hold nothing yet
    plan = plan_rebalance(current, nodes, factor)
    after = {**current, **plan}
    for c, replicas in plan.items():
        assert len(replicas) == factor and len(set(replicas)) == factor and set(replicas) <= set(nodes)
        assert replicas != current[c]
    if current:
        assert spread(replica_counts(after), nodes) <= 1
        assert spread(leader_counts(after), nodes) <= 1
    assert moves(current, plan) == fewest_moves(current, nodes, factor)
    assert plan_rebalance(after, nodes, factor) == {}  # a balanced placement plans nothing


@given(placements)
@settings(max_examples=sized(200, 50), deadline=None)
def test_rebalance_empties_an_excluded_node(drawn: tuple[int, tuple[int, list[tuple[int, ...]]]]) -> None:
    node_count, (factor, replica_lists) = drawn
    if node_count - 1 < factor:
        return
    current = dict(enumerate(replica_lists))
    excluded = 0
    nodes = list(range(1, node_count))
    plan = plan_rebalance(current, nodes, factor)
    after = {**current, **plan}
    assert all(excluded not in replicas for replicas in after.values())
    forced = sum(1 for replicas in current.values() if excluded in replicas)
    assert moves(current, plan) >= forced
    if current:
        assert spread(replica_counts(after), nodes) <= 1


def test_a_fourth_node_takes_its_share_and_the_rest_stays() -> None:
    current = initial_placement(12, [0, 1, 2], 3)
    plan = plan_rebalance(current, [0, 1, 2, 3], 3)
    after = {**current, **plan}
    assert replica_counts(after) == {0: 9, 1: 9, 2: 9, 3: 9}
    assert leader_counts(after) == {0: 3, 1: 3, 2: 3, 3: 3}
    assert moves(current, plan) == 9  # exactly the new node's share: nothing moves between the old nodes


def test_preferred_leaders_even_by_reordering_only() -> None:
    placement = {c: (0, 1, 2) for c in range(6)}
    evened = even_preferred_leaders(placement, [0, 1, 2])
    assert leader_counts(evened) == {0: 2, 1: 2, 2: 2}
    assert all(set(r) == {0, 1, 2} for r in evened.values())


def test_too_few_nodes_is_refused() -> None:
    with pytest.raises(ValueError, match="2 nodes cannot hold 3 replicas"):
        plan_rebalance({0: (0, 1, 2)}, [0, 1], 3)
