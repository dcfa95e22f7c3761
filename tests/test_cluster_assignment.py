"""The pure rules of a coordinator's leadership and ISR, against their definitions (KRaft's, unclean election off)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.cluster.assignment import (
    NO_LEADER,
    CoordinatorAssignment,
    after_nodes_lost,
    assign_replicas,
    isr_changed,
)

NODES = st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True)


@st.composite
def assignments(draw: st.DrawFn) -> CoordinatorAssignment:
    replicas = tuple(draw(NODES))
    isr = tuple(n for n in replicas if draw(st.booleans())) or replicas[:1]
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    return CoordinatorAssignment(replicas, leader, draw(st.integers(0, 5)), draw(st.integers(0, 5)), isr)


@given(assignments(), st.sets(st.integers(0, 9)))
def test_losing_nodes_never_elects_outside_the_isr_and_bumps_epochs_only_on_change(
    before: CoordinatorAssignment, live: set[int]
) -> None:
    after = after_nodes_lost(before, dict.fromkeys(live, ""))
    if after is None:
        assert before.leader == NO_LEADER or before.leader in live
        assert all(n in live for n in before.isr) or len([n for n in before.isr if n in live]) == 0
        return
    assert after.replicas == before.replicas
    assert after.isr and set(after.isr) <= set(before.isr)  # never grows, never empties
    live_isr = [n for n in before.replicas if n in before.isr and n in live]
    if live_isr:
        assert after.isr == tuple(live_isr)
        assert after.leader in live_isr
        if before.leader in live:
            assert after.leader == before.leader  # a live leader is not replaced
    else:
        assert after.leader == NO_LEADER and after.isr == before.isr  # no unclean election
    assert after.partition_epoch == before.partition_epoch + 1
    assert after.leader_epoch == before.leader_epoch + (after.leader != before.leader)


def test_the_last_isr_member_leads_again_when_it_returns() -> None:
    alone = CoordinatorAssignment((1, 2, 3), 1, 4, 9, (1,))
    leaderless = after_nodes_lost(alone, {2: "", 3: ""})
    assert leaderless == CoordinatorAssignment((1, 2, 3), NO_LEADER, 5, 10, (1,))
    back = after_nodes_lost(leaderless, {1: "", 2: "", 3: ""})
    assert back == CoordinatorAssignment((1, 2, 3), 1, 6, 11, (1,))


@given(st.integers(1, 16), st.lists(st.integers(0, 50), min_size=1, max_size=7, unique=True), st.data())
def test_first_assignment_spreads_replicas_and_leaders(
    coordinators: int, nodes: list[int], data: st.DataObject
) -> None:
    factor = data.draw(st.integers(1, len(nodes)))
    assigned = assign_replicas(coordinators, nodes, factor)
    assert sorted(assigned) == list(range(coordinators))
    ordered = sorted(nodes)
    leaders = {node: 0 for node in ordered}
    replicas = {node: 0 for node in ordered}
    for assignment in assigned.values():
        assert len(set(assignment.replicas)) == factor and set(assignment.replicas) <= set(nodes)
        assert assignment.isr == assignment.replicas and assignment.leader == assignment.replicas[0]
        leaders[assignment.leader] += 1
        for node in assignment.replicas:
            replicas[node] += 1
    assert max(leaders.values()) - min(leaders.values()) <= 1  # leadership spread evenly
    assert max(replicas.values()) - min(replicas.values()) <= 1  # and replicas


def test_only_the_leader_changes_the_isr_within_the_replicas() -> None:
    current = CoordinatorAssignment((1, 2, 3), 1, 2, 5, (1, 2, 3))
    assert isinstance(isr_changed(current, 2, (1, 2)), str)  # not the leader
    assert isinstance(isr_changed(current, 1, (2, 3)), str)  # the leader leaves
    assert isinstance(isr_changed(current, 1, (1, 4)), str)  # a stranger joins
    assert isr_changed(current, 1, (3, 1)) == CoordinatorAssignment((1, 2, 3), 1, 2, 6, (1, 3))
    assert isr_changed(current, 1, (1, 2, 3)) is current
