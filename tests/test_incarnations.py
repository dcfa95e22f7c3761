"""A replica that lost its disk is new (DESIGN §6a; Kafka's KIP-903/KIP-966): the ISR records the incarnation each
member was in sync as; a node restarted on an emptied data directory leaves every ISR before it could be elected,
is never elected while it has not caught up, and with every other in-sync replica down its coordinators stay
unavailable and lose nothing. The pure rules against their definitions, the incarnation file, and the scenario of
issue #30 in the simulated cluster."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from coordinator.cluster.assignment import (
    NO_LEADER,
    CoordinatorAssignment,
    after_nodes_lost,
    after_restart,
    isr_changed,
)
from coordinator.cluster.incarnation import FILE_NAME, next_incarnation, next_mark
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from tests.harness import find_batches_request
from tests.simulation.cluster import SimCluster
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _assignment, _commit, _leader, _partition_of, _topic, _until, simulate

INCARNATIONS = st.sampled_from(["", "a.1", "a.2", "b.1"])


@st.composite
def assignments(draw: st.DrawFn) -> CoordinatorAssignment:
    replicas = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True)))
    isr = tuple(n for n in replicas if draw(st.booleans())) or replicas[:1]
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    known = tuple(sorted((n, i) for n in isr if (i := draw(INCARNATIONS))))
    return CoordinatorAssignment(replicas, leader, 3, 7, isr, known)


@given(assignments(), st.dictionaries(st.integers(0, 5), INCARNATIONS))
def test_only_a_live_member_running_the_incarnation_the_isr_knew_is_elected(
    before: CoordinatorAssignment, live: dict[int, str]
) -> None:
    after = after_nodes_lost(before, live) or before
    if after.leader != NO_LEADER:
        recorded = before.incarnation_of(after.leader)
        assert after.leader in live and recorded in ("", live[after.leader])
    assert set(after.isr) <= set(before.isr) and after.isr
    assert dict(after.incarnations) == {n: i for n, i in before.incarnations if n in after.isr}
    # A live member of another incarnation is not removed by another node: it may be restarting as itself.
    assert {n for n in before.isr if n in live} <= set(after.isr)


@given(assignments(), st.integers(0, 5), INCARNATIONS, st.booleans())
def test_a_restarted_node_keeps_its_place_only_as_the_replica_the_isr_knew(
    before: CoordinatorAssignment, node: int, previous: str, on_disk: bool
) -> None:
    current = "c.9"
    after = after_restart(before, node, previous, current, on_disk) or before
    if node not in before.isr:
        assert after == before
        return
    recorded = before.incarnation_of(node)
    if on_disk and recorded in ("", previous):
        assert node in after.isr and after.incarnation_of(node) == current
        assert after.leader == before.leader and after.isr == before.isr
    elif before.isr == (node,):
        assert after == before, "the last member stays, never electable: the coordinator waits for it"
        assert not after.same_replica(node, {node: current}) or recorded == ""
    else:
        assert node not in after.isr and after.leader != node
        assert after.leader_epoch == before.leader_epoch + (before.leader == node)


def test_a_member_joins_as_the_incarnation_it_fetched_as_and_a_stale_one_is_refused() -> None:
    current = CoordinatorAssignment((1, 2, 3), 1, 2, 5, (1, 2), ((1, "x.1"), (2, "y.4")))
    joined = isr_changed(current, 1, (1, 2, 3), {3: "z.2"}, {1: "x.1", 2: "y.4", 3: "z.2"})
    assert isinstance(joined, CoordinatorAssignment)
    assert joined.isr == (1, 2, 3) and joined.incarnations == ((1, "x.1"), (2, "y.4"), (3, "z.2"))
    stale = isr_changed(current, 1, (1, 2, 3), {3: "z.1"}, {1: "x.1", 2: "y.4", 3: "z.2"})
    assert isinstance(stale, str) and "no longer run" in stale
    left = isr_changed(joined, 1, (1, 3))
    assert isinstance(left, CoordinatorAssignment) and left.incarnations == ((1, "x.1"), (3, "z.2"))
    assert CoordinatorAssignment.from_json(left.to_json()) == left
    legacy = json.loads(left.to_json())
    del legacy["incarnations"]  # an assignment written before incarnations: every member unknown, matching any
    assert CoordinatorAssignment.from_json(json.dumps(legacy).encode()).incarnation_of(3) == ""


def test_the_incarnation_counts_starts_and_an_emptied_or_damaged_directory_is_new(tmp_path: Path) -> None:
    first = next_incarnation(tmp_path)
    second = next_incarnation(tmp_path)
    assert first.previous == "" and second.previous == first.current != second.current
    assert second.current.split(".")[0] == first.current.split(".")[0]  # one directory, counted starts
    (tmp_path / FILE_NAME).write_bytes((tmp_path / FILE_NAME).read_bytes().replace(b'"starts": 2', b'"starts": 7'))
    damaged = next_incarnation(tmp_path)
    assert damaged.previous == "" and damaged.current.split(".")[0] != first.current.split(".")[0]
    (tmp_path / FILE_NAME).unlink()
    assert next_incarnation(tmp_path).previous == ""


def test_a_node_back_on_an_empty_disk_is_never_elected_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    """Issue #30's scenario: a follower in the ISR restarted at once on an emptied data directory, then every other
    in-sync replica killed. Before incarnations the empty replica was elected and every batch of the coordinator
    was gone; now the coordinator waits, and once the others are back everything acknowledged is there."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()

        async def formed() -> bool:
            return all([len((await _assignment(sim, c)).isr) == 3 for c in range(sim.coordinators)])

        await _until("every coordinator has its three replicas in sync", formed)
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        for i in range(5):
            assert await _commit(leader, partition, f"wal/disk/{i}") == i
        wiped = next(n for n in sim.nodes if n is not leader)
        assert wiped.node_id in (await _assignment(sim, 0)).isr
        await sim.crash(wiped.node_id)
        sim.wipe(wiped.node_id)
        for other in sim.nodes:  # it cannot fetch: it must not catch up before the others are gone
            if other is not wiped:
                sim.network.partition(wiped.address, other.address)
        await sim.start(wiped.node_id)
        assert wiped.node_id not in (await _assignment(sim, 0)).isr, "it left the ISR when it registered"
        for other in sim.nodes:
            if other is not wiped:
                await sim.crash(other.node_id)
        for _ in range(30):  # 15 s of simulated time, five session timeouts: never elected
            await asyncio.sleep(0.5)
            assert not wiped.shard(0).leads, "the replica that lost its disk leads"
            assert (await _assignment(sim, 0)).leader != wiped.node_id, "the replica that lost its disk was elected"
        assert (await _assignment(sim, 0)).leader == NO_LEADER, "the dead leader's session lapsed: no leader"
        refused = await _commit(wiped, partition, "wal/disk/while-alone", timeout_ms=1000)
        assert refused < 0, "a write was acknowledged by the empty replica alone"
        sim.network.heal()
        for other in sim.nodes:
            if other is not wiped:
                await sim.start(other.node_id)
        await _until("a leader serves again", lambda: len(sim.leaders(0)) == 1)
        back = _leader(sim, 0)
        assert back is not wiped

        async def caught_up() -> bool:
            return wiped.node_id in (await _assignment(sim, 0)).isr

        await _until("the wiped node caught up and rejoined the ISR", caught_up)
        assert await _commit(back, partition, "wal/disk/after") == 5
        await _until("the wiped node holds the last commit", lambda: (
            wiped.shard(0).statistics().applied_offset == back.shard(0).statistics().applied_offset
        ))  # fmt: skip
        for node in (back, wiped):
            assert node.node is not None
            answer = node.node.router.find_batches(find_batches_request(TOPIC_ID, partition, 0))
            found = pb.FindBatchesResponse.FromString(answer).topics[0].partitions[0]
            keys = [b.object_key for b in found.batches]
            assert keys == [*(f"wal/disk/{i}" for i in range(5)), "wal/disk/after"], (node.node_id, keys)

    # Other nodes look at etcd every 10 s: the restarted node registers before any of them saw it gone, so its
    # dead self is still in the ISR when it starts, as in the real run of the issue.
    simulate(tmp_path, 27, work, settings={"diskless.cluster.refresh.interval.ms": "10000"})


MARK_INTERVAL_MS = 1000


def test_a_directory_restored_from_a_copy_taken_while_it_ran_is_a_new_replica(tmp_path: Path) -> None:
    """KIP-966: a log that may have lost acknowledged records is a new replica. A copy of a follower's data directory
    taken while it ran holds the incarnation its ISR recorded; restored after more commits were acknowledged with that
    follower in sync, it must not come back as the replica in sync (elected, it would lose them)."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()

        async def formed() -> bool:
            return all([len((await _assignment(sim, c)).isr) == 3 for c in range(sim.coordinators)])

        await _until("every coordinator has its three replicas in sync", formed)
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        for i in range(3):
            assert await _commit(leader, partition, f"wal/copy/{i}") == i
        follower = next(n for n in sim.nodes if n is not leader)
        member_of = [c for c in range(sim.coordinators) if follower.node_id in (await _assignment(sim, c)).isr]
        assert 0 in member_of
        copy = tmp_path / "copy"
        shutil.copytree(follower.data_dir, copy)  # a backup taken while it runs
        for i in range(3, 6):  # acknowledged with the follower in sync
            assert await _commit(leader, partition, f"wal/copy/{i}") == i
        assert follower.node_id in (await _assignment(sim, 0)).isr
        await asyncio.sleep(2 * MARK_INTERVAL_MS / 1000)  # its directory's mark moves on meanwhile

        await sim.crash(follower.node_id)
        shutil.rmtree(follower.data_dir)
        shutil.copytree(copy, follower.data_dir)  # restored: its log went back in time
        for other in sim.nodes:  # it cannot fetch: nothing may make it whole again before the check
            if other is not follower:
                sim.network.partition(follower.address, other.address)
        await sim.start(follower.node_id)
        for coordinator_id in member_of:  # not the replica in sync: out of every ISR, never electable
            assert follower.node_id not in (await _assignment(sim, coordinator_id)).isr, coordinator_id
        assert follower.controller is not None
        assert (
            follower.controller.incarnation.split(".")[0] != json.loads((copy / FILE_NAME).read_text())["directory_id"]
        ), "the restored directory kept its identity"
        sim.network.heal()

        async def caught_up() -> bool:
            return follower.node_id in (await _assignment(sim, 0)).isr

        await _until("the restored node caught up and rejoined the ISR as a new replica", caught_up)

    simulate(
        tmp_path / "cluster", 27, work,
        settings={"diskless.cluster.refresh.interval.ms": "10000",
                  "diskless.node.incarnation.mark.interval.ms": str(MARK_INTERVAL_MS)},
    )  # fmt: skip


def test_the_directory_mark_moves_on_and_one_behind_etcds_is_a_new_directory(tmp_path: Path) -> None:
    first = next_incarnation(tmp_path, "")
    copy = (tmp_path / FILE_NAME).read_bytes()
    moved = next_mark(tmp_path, first)
    assert (
        moved.split(".")[0] == first.mark.split(".")[0]
        and int(moved.split(".")[1]) == int(first.mark.split(".")[1]) + 1
    )
    again = next_incarnation(tmp_path, moved)  # the file may equal etcd's mark (or be one ahead): the same directory
    assert again.previous == first.current
    (tmp_path / FILE_NAME).write_bytes(copy)  # restored from a copy taken before the mark moved on
    restored = next_incarnation(tmp_path, again.mark)
    assert restored.previous == "" and restored.current.split(".")[0] != first.current.split(".")[0]


def test_the_leader_takes_a_member_fetching_as_another_incarnation_out_of_the_isr(tmp_path: Path) -> None:
    """KIP-903's fence on the leader: whatever the node itself managed to tell etcd, a follower whose fetch names
    another incarnation than the ISR recorded leaves the ISR at once, and joins again as the new one once caught
    up (its rejoining recorded as that incarnation)."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        assert await _commit(leader, partition, "wal/fence/0") == 0
        follower = next(n for n in sim.nodes if n is not leader)
        before = await _assignment(sim, 0)
        assert follower.node_id in before.isr and before.incarnation_of(follower.node_id)
        assert leader.node is not None
        fetch = internal.FetchLogRequest(
            coordinator_id=0, replica_node_id=follower.node_id, leader_epoch=before.leader_epoch, fetch_offset=0,
            last_fetched_epoch=-1, max_bytes=1024, max_wait_ms=0, replica_incarnation="elsewhere.1",
        )  # fmt: skip
        await leader.node.router.fetch_log(fetch)

        async def out() -> bool:
            return follower.node_id not in (await _assignment(sim, 0)).isr

        await _until("the member of another incarnation left the ISR", out)

        assert follower.controller is not None
        own = follower.controller.incarnation

        async def back() -> bool:
            again = await _assignment(sim, 0)
            return follower.node_id in again.isr and again.incarnation_of(follower.node_id) == own

        await _until("the follower's own fetches brought it back", back)

    simulate(tmp_path, 28, work)
