"""Preferred leaders (DESIGN §6a; Kafka's auto.leader.rebalance.enable and kafka-leader-election --election-type
PREFERRED): the pure rule against its definition, the simulated cluster giving leadership back to each coordinator's
first replica once it returned and caught up, with commits going on and nothing acknowledged lost, and ElectLeaders
asked of a node."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.cluster.assignment import NO_LEADER, CoordinatorAssignment, preferred_leader_election
from coordinator.cluster.preferred_leaders import CAS_ATTEMPTS, ElectionOutcome, elect_preferred_leaders
from coordinator.cluster.store import VersionedAssignment
from coordinator.config.settings import Settings
from coordinator.node.leader_elections import elect_leaders
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from tests.harness import find_batches_request
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_incarnations import INCARNATIONS, assignments
from tests.test_simulation import _assignment, _commit, _partition_of, _topic, _until, simulate

CHECK_INTERVAL_MS = 2000
COMMIT_PAUSE_S = 0.05  # between a broker's commits: 20 a second of simulated time


@given(assignments(), st.dictionaries(st.integers(0, 5), INCARNATIONS))
def test_leadership_moves_to_the_preferred_replica_only_when_it_is_live_in_sync_and_the_same_replica(
    before: CoordinatorAssignment, live: dict[int, str]
) -> None:
    preferred = before.replicas[0]
    after = preferred_leader_election(before, live)
    possible = (
        before.leader != preferred
        and preferred in before.isr
        and preferred in live
        and before.incarnation_of(preferred) in ("", live[preferred])
    )
    if not possible:
        assert after is None
        return
    assert after is not None
    assert after.leader == preferred
    assert after.leader_epoch == before.leader_epoch + 1 and after.partition_epoch == before.partition_epoch + 1
    # Nothing else changes: the ISR (the old leader stays in it, to follow), the replicas, the incarnations.
    assert (after.replicas, after.isr, after.incarnations) == (before.replicas, before.isr, before.incarnations)
    assert preferred_leader_election(after, live) is None, "a second election changes nothing"
    assert CoordinatorAssignment.from_json(after.to_json()) == after


def test_a_coordinator_without_a_leader_gets_its_preferred_replica_and_a_stale_one_does_not() -> None:
    leaderless = CoordinatorAssignment((1, 2, 3), NO_LEADER, 4, 9, (1, 2), ((1, "a.2"), (2, "b.1")))
    elected = preferred_leader_election(leaderless, {1: "a.2", 2: "b.1"})
    assert elected is not None and (elected.leader, elected.leader_epoch) == (1, 5)
    assert preferred_leader_election(leaderless, {1: "a.3", 2: "b.1"}) is None  # restarted, not yet recorded
    out_of_sync = CoordinatorAssignment((1, 2, 3), 2, 4, 9, (2, 3))
    assert preferred_leader_election(out_of_sync, {1: "", 2: "", 3: ""}) is None


class _Contended:
    """A store whose every compare-and-set loses: another node changes the key each time."""

    def __init__(self, assignment: CoordinatorAssignment) -> None:
        self.assignment_now = assignment
        self.attempts = 0

    async def assignment(self, coordinator_id: int) -> VersionedAssignment:
        return VersionedAssignment(self.assignment_now, 10 + self.attempts)

    async def compare_and_set(self, coordinator_id: int, revision: int, assignment: CoordinatorAssignment) -> bool:
        self.attempts += 1
        return False


def test_an_election_that_keeps_losing_its_compare_and_set_gives_up_and_says_so() -> None:
    store = _Contended(CoordinatorAssignment((1, 2, 3), 2, 4, 9, (1, 2, 3)))
    (result,) = asyncio.run(elect_preferred_leaders(store, [0], {1: "", 2: "", 3: ""}))  # type: ignore[arg-type]
    assert store.attempts == CAS_ATTEMPTS
    assert (result.outcome, result.preferred, result.leader, result.leader_epoch) == (
        ElectionOutcome.NOT_POSSIBLE, 1, 2, 4
    )  # fmt: skip
    assert "try again" in result.reason


# ---------------------------------------------------------------------------- the simulated cluster


@dataclass
class Committer:
    """A broker committing to one partition, one commit at a time, at whichever node leads its coordinator now."""

    sim: SimCluster
    coordinator_id: int
    partition: int
    acknowledged: dict[int, str] = field(default_factory=dict)  # offset -> object key
    refused: int = 0
    stopped: bool = False

    async def run(self) -> None:
        sent = 0
        while not self.stopped:
            leaders = [n for n in self.sim.leaders(self.coordinator_id) if not n.paused]
            if not leaders:
                await asyncio.sleep(0.05)
                continue
            sent += 1
            key = f"wal/preferred/{sent}"
            try:
                offset = await _commit(leaders[0], self.partition, key, timeout_ms=2000)
            except Exception:  # the node closed under the call (a crash): the broker was told nothing
                offset = -1
            if offset >= 0:
                earlier = self.acknowledged.setdefault(offset, key)
                assert earlier == key, f"offset {offset} acknowledged for {earlier} and {key}"
            else:
                self.refused += 1
            await asyncio.sleep(COMMIT_PAUSE_S)

    def check_found(self, leader: SimNode) -> None:
        """Every acknowledged batch is where it was acknowledged; the partition's offsets are contiguous."""
        assert leader.node is not None
        answer = leader.node.router.find_batches(find_batches_request(TOPIC_ID, self.partition, 0))
        found = pb.FindBatchesResponse.FromString(answer).topics[0].partitions[0]
        assert found.error_code == pb.NONE, found
        at = {b.base_offset: b.object_key for b in found.batches}
        assert [b.base_offset for b in found.batches] == list(range(len(found.batches)))
        lost = {o: k for o, k in self.acknowledged.items() if at.get(o) != k}
        assert not lost, f"acknowledged but not found where acknowledged: {lost}"


def _leads_preferred(sim: SimCluster, coordinator_id: int) -> bool:
    leaders = [n for n in sim.leaders(coordinator_id) if not n.paused]
    if len(leaders) != 1:
        return False
    role = leaders[0].shard(coordinator_id).role
    return role is not None and role.replicas[0] == leaders[0].node_id


async def kill_and_return(sim: SimCluster, victim: SimNode) -> tuple[int, float, float]:
    """Kills the node, brings it back once its coordinators failed over, and waits for the periodic check to give
    them back to it: (node, failover seconds, seconds from its return to the ISRs to leading them again)."""
    loop = asyncio.get_running_loop()
    led = [c for c in range(sim.coordinators) if (await _assignment(sim, c)).replicas[0] == victim.node_id]
    await asyncio.sleep(1)
    killed_at = loop.time()
    await sim.crash(victim.node_id)
    await _until("its coordinators are led elsewhere", lambda: all(
        len(sim.leaders(c)) == 1 and sim.leaders(c)[0] is not victim for c in led
    ))  # fmt: skip
    failover_s = loop.time() - killed_at
    await asyncio.sleep(2)
    await sim.start(victim.node_id)

    async def back_in_sync() -> bool:
        return all([victim.node_id in (await _assignment(sim, c)).isr for c in led])

    await _until("the returned node is back in its coordinators' ISRs", back_in_sync)
    in_sync_at = loop.time()
    await _until(
        "leadership back to the preferred replicas",
        lambda: all(_leads_preferred(sim, c) for c in range(sim.coordinators)),
        within_s=CHECK_INTERVAL_MS / 1000 + 2,
    )
    return victim.node_id, failover_s, loop.time() - in_sync_at


@pytest.mark.parametrize("kills", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_leadership_returns_to_the_preferred_replicas_after_kills_and_nothing_acknowledged_is_lost(
    tmp_path: Path, kills: int
) -> None:
    """Nodes killed in turn and brought back while a broker commits: each one's coordinators fail over, and once it
    is back in their ISRs the periodic check gives them back to it within the check interval; the old leaders step
    down to follow. Every acknowledged batch is found at its offset afterwards, on every replica."""
    settings = {"diskless.cluster.leader.imbalance.check.interval.ms": str(CHECK_INTERVAL_MS)}
    times: list[tuple[int, float, float]] = []

    async def work(sim: SimCluster) -> None:
        await sim.start_all()

        async def formed() -> bool:
            return all([len((await _assignment(sim, c)).isr) == 3 for c in range(sim.coordinators)])

        await _until("every coordinator has its three replicas in sync", formed)
        await _topic(sim)
        assert all(_leads_preferred(sim, c) for c in range(sim.coordinators))
        committer = Committer(sim, 0, _partition_of(sim, 0))
        committing = asyncio.ensure_future(committer.run())
        for victim in sim.nodes[:kills]:
            times.append(await kill_and_return(sim, victim))
        committer.stopped = True
        await committing
        assert len(committer.acknowledged) > 20, "the broker had few commits acknowledged: the test checked little"
        for coordinator_id in range(sim.coordinators):
            assert sum(n.shard(coordinator_id).leads for n in sim.running()) == 1
        (leader,) = sim.leaders(0)
        committer.check_found(leader)
        await _until("every replica ends where the leader does", lambda: len({
            (n.shard(0).statistics().log_end_offset, n.shard(0).statistics().applied_offset) for n in sim.running()
        }) == 1)  # fmt: skip
        for node in sim.running():
            committer.check_found(node)  # every replica serves them, up to its high watermark

    simulate(tmp_path, 41, work, settings=settings)
    for node_id, failover_s, return_s in times:
        print(f"node {node_id}: failover {failover_s:.2f} s, leadership back {return_s:.2f} s after rejoining the ISR")


def test_elect_leaders_elects_now_and_says_what_it_did_for_each_coordinator(tmp_path: Path) -> None:
    """With the periodic check off: after a failover nothing moves back by itself; ElectLeaders asked of any node
    elects the preferred replicas that can lead, answers "already preferred" for the others, "not possible" (why)
    for a coordinator whose preferred replica is down, and an error for a coordinator the cluster does not have."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        victim = sim.nodes[1]
        led = [c for c in range(sim.coordinators) if (await _assignment(sim, c)).replicas[0] == victim.node_id]
        assert led
        await sim.crash(victim.node_id)
        await _until("its coordinators are led elsewhere", lambda: all(
            len(sim.leaders(c)) == 1 and sim.leaders(c)[0] is not victim for c in led
        ))  # fmt: skip
        asked = sim.nodes[2]
        assert asked.node is not None
        down = await asked.node.router.elect_leaders(admin.ElectLeadersRequest(coordinator_ids=[led[0], 99]))
        assert down.error_code == pb.NONE, down
        by_id = {r.coordinator_id: r for r in down.results}
        assert by_id[led[0]].outcome == admin.LEADER_ELECTION_NOT_POSSIBLE
        assert f"node {victim.node_id}, is not live" in by_id[led[0]].reason
        assert (by_id[99].error_code, by_id[99].outcome) == (pb.INVALID_REQUEST, admin.LEADER_ELECTION_NOT_POSSIBLE)

        await sim.start(victim.node_id)

        async def back_in_sync() -> bool:
            return all([victim.node_id in (await _assignment(sim, c)).isr for c in led])

        await _until("the returned node is back in its coordinators' ISRs", back_in_sync)
        await asyncio.sleep(5)
        assert not any(_leads_preferred(sim, c) for c in led), "moved back with the periodic check off"
        before = {c: (await _assignment(sim, c)).leader_epoch for c in range(sim.coordinators)}
        answer = await asked.node.router.elect_leaders(admin.ElectLeadersRequest())
        assert answer.error_code == pb.NONE, answer
        outcomes = {r.coordinator_id: r.outcome for r in answer.results}
        assert outcomes == {
            c: admin.LEADER_ELECTED if c in led else admin.LEADER_ALREADY_PREFERRED for c in range(sim.coordinators)
        }
        for result in answer.results:
            assert result.leader == result.preferred_leader == (await _assignment(sim, result.coordinator_id)).leader
            assert result.leader_epoch == before[result.coordinator_id] + (result.coordinator_id in led)
        await _until("the preferred replicas lead", lambda: all(_leads_preferred(sim, c) for c in led))
        again = await sim.nodes[0].node.router.elect_leaders(admin.ElectLeadersRequest())  # type: ignore[union-attr]
        assert {r.outcome for r in again.results} == {admin.LEADER_ALREADY_PREFERRED}

    simulate(tmp_path, 42, work, settings={"diskless.cluster.auto.leader.rebalance.enable": "false"})


def test_a_node_without_a_cluster_says_it_has_no_preferred_replica_to_elect() -> None:
    answer = asyncio.run(elect_leaders(None, Settings(), admin.ElectLeadersRequest()))
    assert answer.error_code == pb.INVALID_REQUEST and "not part of a cluster" in answer.error_message
    assert not answer.results
