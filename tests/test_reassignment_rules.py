"""The pure rules of online reassignment (KIP-455's way): validation, replace and cancel, leadership moved before the
leader leaves, the final replicas in the target's order; and a model run over random requests and ISR joins."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from coordinator.base.clock import ManualClock
from coordinator.cluster.assignment import CoordinatorAssignment, isr_changed
from coordinator.cluster.memory_store import MemoryClusterStore, MemoryEtcd
from coordinator.cluster.reassignment import reassign, reassignment_refusal, reassignment_step, start_reassignment

LIVE = dict.fromkeys(range(1, 7), "")


def test_bad_requests_are_refused_with_one_line_and_change_nothing() -> None:
    current = CoordinatorAssignment((1, 2, 3), 1, 1, 0, (1, 2, 3))
    known = {1, 2, 3, 4}
    assert reassignment_refusal(current, [], known, 2) == "the replica list is empty"
    assert "node 2 is named more than once" in reassignment_refusal(current, [1, 2, 2], known, 2)
    assert "node 9 is not registered in the cluster" in reassignment_refusal(current, [1, 9, 3], known, 2)
    assert "fewer than min.insync.replicas 2" in reassignment_refusal(current, [4], known, 2)
    assert reassignment_refusal(current, [4, 2, 1], known, 2) == ""
    assert all("\n" not in reassignment_refusal(current, t, known, 2) for t in ([], [1, 1], [9], [4]))


def test_a_reassignment_to_the_current_replicas_is_a_no_op() -> None:
    current = CoordinatorAssignment((1, 2, 3), 1, 1, 0, (1, 2, 3))
    assert start_reassignment(current, (1, 2, 3)) is None
    assert reassignment_step(current, LIVE) is None


def test_adding_then_catching_up_then_the_target_in_its_order() -> None:
    current = CoordinatorAssignment((1, 2, 3), 1, 1, 0, (1, 2, 3))
    started = start_reassignment(current, (4, 2, 1))
    assert started == CoordinatorAssignment((4, 2, 1, 3), 1, 1, 1, (2, 1, 3), adding=(4,), removing=(3,))
    assert CoordinatorAssignment.from_json(started.to_json()) == started
    assert reassignment_step(started, LIVE) is None  # node 4 is not in the ISR yet
    joined = isr_changed(started, 1, (4, 2, 1, 3), {4: ""})
    assert isinstance(joined, CoordinatorAssignment)
    done = reassignment_step(joined, LIVE)
    assert done == CoordinatorAssignment((4, 2, 1), 1, 1, 3, (4, 2, 1))
    assert not done.reassigning and done.to_json() == CoordinatorAssignment((4, 2, 1), 1, 1, 3, (4, 2, 1)).to_json()


def test_the_leader_leaving_hands_leadership_to_the_first_target_replica_in_the_isr_first() -> None:
    moving = CoordinatorAssignment((2, 3, 4, 1), 1, 5, 7, (2, 3, 4, 1), adding=(4,), removing=(1,))
    elected = reassignment_step(moving, {1: "", 2: "", 3: "", 4: ""})
    assert elected == CoordinatorAssignment((2, 3, 4, 1), 2, 6, 8, (2, 3, 4, 1), adding=(4,), removing=(1,))
    # node 2 down: the next target replica in the ISR takes over
    assert reassignment_step(moving, {1: "", 3: "", 4: ""}) is not None
    assert reassignment_step(moving, {1: "", 3: "", 4: ""}).leader == 3  # type: ignore[union-attr]
    done = reassignment_step(elected, LIVE)  # type: ignore[arg-type]
    assert done is not None and done.replicas == (2, 3, 4) and done.leader == 2 and done.leader_epoch == 6


def test_a_new_reassignment_replaces_the_running_one_and_one_back_cancels_it() -> None:
    current = CoordinatorAssignment((1, 2, 3), 1, 1, 0, (1, 2, 3))
    first = start_reassignment(current, (1, 2, 4))
    assert first is not None and first.adding == (4,) and first.removing == (3,)
    second = start_reassignment(first, (1, 2, 5))
    assert second == CoordinatorAssignment((1, 2, 5, 4, 3), 1, 1, 2, (1, 2, 3), adding=(5,), removing=(4, 3))
    cancelled = start_reassignment(first, (1, 2, 3))
    assert cancelled == CoordinatorAssignment((1, 2, 3, 4), 1, 1, 2, (1, 2, 3), adding=(), removing=(4,))
    assert reassignment_step(cancelled, LIVE) == CoordinatorAssignment((1, 2, 3), 1, 1, 3, (1, 2, 3))
    assert start_reassignment(first, (1, 2, 4)) is None  # the same again


def test_an_assignment_written_before_reassignments_reads_as_none_running() -> None:
    old = b'{"isr": [1, 2], "leader": 1, "leader_epoch": 3, "partition_epoch": 4, "replicas": [1, 2, 3]}'
    parsed = CoordinatorAssignment.from_json(old)
    assert not parsed.reassigning and parsed.target == (1, 2, 3)
    assert b"adding" not in parsed.to_json()


@given(st.lists(st.tuples(st.booleans(), st.permutations(range(1, 7)), st.integers(2, 4), st.integers(0, 6))))
def test_model_the_target_always_lands_and_the_leader_stays_in_the_isr(
    actions: list[tuple[bool, list[int], int, int]],
) -> None:
    current = CoordinatorAssignment((1, 2, 3), 1, 1, 0, (1, 2, 3))
    wanted = current.replicas
    for is_request, order, size, joining in actions:
        if is_request:
            started = start_reassignment(current, tuple(order[:size]))
            if started is not None:
                current, wanted = started, tuple(order[:size])
        elif joining in current.replicas and joining not in current.isr:
            changed = isr_changed(current, current.leader, (*current.isr, joining), {joining: ""})
            assert isinstance(changed, CoordinatorAssignment)
            current = changed
        step = reassignment_step(current, LIVE)
        while step is not None:
            assert step.leader in step.isr and step.partition_epoch > current.partition_epoch
            assert step.leader == current.leader or step.leader_epoch == current.leader_epoch + 1
            current, step = step, reassignment_step(step, LIVE)
        assert current.target == wanted and current.replicas[: len(wanted)] == wanted
        assert current.reassigning == (not set(wanted) <= set(current.isr))
    for node in wanted:  # every target replica catches up at last: the reassignment ends on the target
        if node not in current.isr:
            joined = isr_changed(current, current.leader, (*current.isr, node), {node: ""})
            assert isinstance(joined, CoordinatorAssignment)
            current = joined
    while (step := reassignment_step(current, LIVE)) is not None:
        current = step
    assert current.replicas == wanted and not current.reassigning and current.leader in wanted


def test_reassign_in_the_store_refuses_or_writes_by_compare_and_set() -> None:
    async def scenario() -> None:
        store = MemoryClusterStore(MemoryEtcd(ManualClock()))
        assert await store.compare_and_set(0, 0, CoordinatorAssignment((1, 2, 3), 1, 1, 0, (1, 2, 3)))
        refused = await reassign(store, 0, [1, 7], {1, 2, 3, 4}, 2)
        assert "node 7" in refused.refusal
        assert (await store.assignment(0)).assignment.replicas == (1, 2, 3)  # type: ignore[union-attr]
        assert (await reassign(store, 5, [1, 2], {1, 2}, 2)).refusal == "coordinator 5 does not exist"
        started = await reassign(store, 0, [1, 2, 4], {1, 2, 3, 4}, 2)
        assert started.refusal == "" and started.assignment is not None
        stored = await store.assignment(0)
        assert stored is not None and stored.assignment.adding == (4,) and stored.assignment.removing == (3,)

    asyncio.run(scenario())
