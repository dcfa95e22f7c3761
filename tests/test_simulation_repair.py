"""Repair from replicas in the simulated cluster (issue #29 item 2): a replica whose log, state or snapshots lie (one
bit flipped in its real files) leaves the ISR, sets its files aside, fetches the leader's snapshot and log and
rejoins the ISR; a damaged leader steps down first; with no healthy copy the coordinator stays unavailable, says so
and repairs once one is back. Nothing acknowledged is lost and no damaged replica answers with anything wrong.

Each test is seeded (the bit flipped and the cluster's network); the seed is printed, and `DISKLESS_SIM_SEEDS=7
pytest tests/test_simulation_repair.py` replays one.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from coordinator.machine.state.reads import StateDamaged
from coordinator.node.gauges import coordinator_gauges
from coordinator.node.node import coordinator_directory
from coordinator.runtime.log.segment_files import SEGMENT_SUFFIX
from coordinator.runtime.shard.damaged_files import damaged_folders
from protos import coordinator_pb2 as pb
from tests.harness import find_batches_request
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _assignment, _commit, _leader, _partition_of, _seeds, _topic, _until, simulate

FAST_SEEDS = (1,)
SLOW_SEEDS = tuple(range(2, 10))  # where the bit lands moves the damage from frame to frame


def flip_bit(path: Path, rng: random.Random, low: int = 0, high: int | None = None) -> int:
    """Flips one bit of `path` at a byte chosen in [low, high); returns the byte's position."""
    data = bytearray(path.read_bytes())
    position = rng.randrange(low, high if high is not None else len(data))
    data[position] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return position


def flip_in_log(sim_node: SimNode, coordinator_id: int, rng: random.Random) -> tuple[Path, int]:
    """One bit flipped in the first half of the replica's oldest log segment: damage inside the log, frames after it
    still verify (not a torn tail, which a load would cut)."""
    log_dir = coordinator_directory(sim_node.data_dir, coordinator_id) / "log"
    segment = sorted(log_dir.glob(f"*{SEGMENT_SUFFIX}"))[0]
    size = segment.stat().st_size
    assert size > 200, f"{segment}: {size} bytes, too few frames to damage inside"
    return segment, flip_bit(segment, rng, 0, size // 2)


def keys_found(sim_node: SimNode, partition: int) -> list[str] | int:
    """The object keys FindBatches answers on this node from offset 0, or the error code."""
    assert sim_node.node is not None
    answer = sim_node.node.router.find_batches(find_batches_request(TOPIC_ID, partition, 0))
    found = pb.FindBatchesResponse.FromString(answer).topics[0].partitions[0]
    return [b.object_key for b in found.batches] if found.error_code == pb.NONE else found.error_code


async def formed(sim: SimCluster) -> None:
    async def all_in_sync() -> bool:
        return all([len((await _assignment(sim, c)).isr) == 3 for c in range(sim.coordinators)])

    await _until("every coordinator has its three replicas in sync", all_in_sync)


async def acknowledge(leader: SimNode, partition: int, prefix: str, count: int, first_offset: int = 0) -> list[str]:
    """Commits `count` one-batch files; each must be acknowledged at the next offset."""
    keys = [f"wal/{prefix}/{i:03}" for i in range(count)]
    for i, key in enumerate(keys):
        assert await _commit(leader, partition, key) == first_offset + i
    return keys


async def in_sync_with(sim: SimCluster, repaired: SimNode, leader: SimNode, partition: int, keys: list[str]) -> None:
    """The repaired replica set its damaged files aside, is back in the ISR and serves every acknowledged batch, in
    order."""
    directory = coordinator_directory(repaired.data_dir, 0)
    await _until("the damaged files set aside", lambda: bool(damaged_folders(directory)))

    async def back() -> bool:
        return repaired.up and repaired.node_id in (await _assignment(sim, 0)).isr

    await _until(f"node {repaired.node_id} repaired and back in the ISR", back)
    await _until("the repaired replica applied what the leader did", lambda: (
        repaired.shard(0).statistics().applied_offset >= leader.shard(0).statistics().applied_offset
    ))  # fmt: skip
    assert keys_found(repaired, partition) == keys
    assert keys_found(leader, partition) == keys
    folders = damaged_folders(directory)
    assert len(folders) == 1 and (folders[0] / "log").is_dir(), "the damaged files are kept for the operator"
    # What the node did, as its metrics count it: one repair from a replica (not a log line's say-so).
    assert repaired.node is not None
    repairs = repaired.node.metrics.registry.get_sample_value(
        "diskless_coordinator_repairs_total", {"coordinator": "0", "repair": "from_replica"}
    )
    assert repairs == 1, repairs


@pytest.mark.parametrize("seed", [*_seeds(FAST_SEEDS), *(pytest.param(s, marks=pytest.mark.slow) for s in SLOW_SEEDS)])
def test_a_follower_whose_log_is_damaged_repairs_from_the_leader_and_rejoins_the_isr(tmp_path: Path, seed: int) -> None:
    print(f"seed {seed}")
    rng = random.Random(seed)

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await formed(sim)
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        keys = await acknowledge(leader, partition, "follower-log", 20)
        follower = next(n for n in sim.nodes if n is not leader)
        await _until("the follower applied them", lambda: (
            follower.shard(0).statistics().applied_offset == leader.shard(0).statistics().applied_offset
        ))  # fmt: skip
        await sim.crash(follower.node_id)
        segment, position = flip_in_log(follower, 0, rng)
        print(f"flipped a bit at byte {position} of {segment}")
        starting = asyncio.ensure_future(sim.start(follower.node_id))
        keys += await acknowledge(leader, partition, "while-repairing", 5, len(keys))  # two in sync: writes go on
        await starting
        await in_sync_with(sim, follower, leader, partition, keys)
        assert await _commit(leader, partition, "wal/after") == len(keys)

    simulate(tmp_path, seed, work)


# Small segments and a snapshot whenever asked: a replica's log is pruned below its snapshots within a test.
PRUNING = {
    "diskless.coordinator.log.segment.bytes": "4096",
    "diskless.coordinator.snapshot.interval.bytes": "0",
    "diskless.coordinator.snapshot.interval.ms": "0",
}


async def follower_with_a_pruned_log(sim: SimCluster, prefix: str) -> tuple[SimNode, SimNode, int, list[str]]:
    """120 acknowledged batches, then two snapshots on a follower that applied them all, so that its log no longer
    starts at 0 (a local rebuild needs a snapshot): (leader, follower, partition, acknowledged keys)."""
    await sim.start_all()
    await formed(sim)
    await _topic(sim)
    leader = _leader(sim, 0)
    partition = _partition_of(sim, 0)
    keys = await acknowledge(leader, partition, prefix, 120)
    follower = next(n for n in sim.nodes if n is not leader)
    await _until("the follower applied them", lambda: (
        follower.shard(0).statistics().applied_offset == leader.shard(0).statistics().applied_offset
    ))  # fmt: skip
    for _ in range(2):  # the snapshots kept: the follower's log below the oldest of them goes
        await follower.shard(0).create_snapshot()
    assert follower.shard(0).statistics().log_start_offset > 0, "the follower kept its whole log"
    return leader, follower, partition, keys


@pytest.mark.slow  # 120 commits and two snapshots first
def test_a_follower_whose_state_and_snapshots_are_damaged_with_its_log_pruned_repairs_from_the_leader(
    tmp_path: Path,
) -> None:
    """The local rebuild cannot work: every snapshot fails its checksum and the log no longer starts at 0."""
    seed = _seeds((3,))[0]
    print(f"seed {seed}")
    rng = random.Random(seed)

    async def work(sim: SimCluster) -> None:
        leader, follower, partition, keys = await follower_with_a_pruned_log(sim, "follower-state")
        await sim.crash(follower.node_id)
        directory = coordinator_directory(follower.data_dir, 0)
        for path in [directory / "state.sqlite", *sorted((directory / "snapshots").glob("*.sqlite"))]:
            position = flip_bit(path, rng, 0, path.stat().st_size)
            print(f"flipped a bit at byte {position} of {path}")
        await sim.start(follower.node_id)
        await in_sync_with(sim, follower, leader, partition, keys)

    simulate(tmp_path, seed, work, settings=PRUNING)


def test_a_damaged_leader_alone_stays_unavailable_says_so_and_repairs_once_a_healthy_replica_is_back(
    tmp_path: Path,
) -> None:
    """Every node stopped; one bit flipped in the leader's log. Started alone it has no healthy copy: DAMAGED (state,
    error naming the file and offset, the gauge, health), nothing served from the damaged files. Once another
    in-sync replica is back it hands leadership over, repairs from it and rejoins the ISR; nothing acknowledged is
    lost."""
    seed = _seeds((4,))[0]
    print(f"seed {seed}")
    rng = random.Random(seed)

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await formed(sim)
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        keys = await acknowledge(leader, partition, "leader-log", 20)
        await _until("every replica applied them", lambda: all(
            n.shard(0).statistics().applied_offset == leader.shard(0).statistics().applied_offset for n in sim.nodes
        ))  # fmt: skip
        for sim_node in sim.nodes:
            await sim.crash(sim_node.node_id)
        segment, position = flip_in_log(leader, 0, rng)
        print(f"flipped a bit at byte {position} of {segment}")
        await sim.start(leader.node_id)
        await asyncio.sleep(20)  # four session timeouts: the others' leases are gone, nothing changes
        assert leader.node is not None
        shard = leader.shard(0)
        assert shard.damaged and not leader.node.serving()
        assert sorted((await _assignment(sim, 0)).isr) == [0, 1, 2], "the damaged replica shrank the ISR to itself"
        description = leader.node.router.describe_coordinators(pb.DescribeCoordinatorsRequest(coordinator_ids=[0]))
        assert description.coordinators[0].state == "DAMAGED"
        gauges = {
            (name, labels.get("coordinator")): value for name, _, _, labels, value in coordinator_gauges(leader.node)
        }
        assert gauges[("diskless_coordinator_damaged", "0")] == 1.0
        assert gauges[("diskless_coordinator_damaged", "1")] == 0.0
        assert str(segment.name) in description.coordinators[0].error_message
        assert keys_found(leader, partition) in (pb.COORDINATOR_NOT_AVAILABLE, pb.NOT_COORDINATOR)
        assert await _commit(leader, partition, "wal/while-damaged", timeout_ms=1000) < 0
        healthy = next(n for n in sim.nodes if n is not leader)
        await sim.start(healthy.node_id)
        await _until("the healthy replica leads", lambda: healthy.up and healthy.shard(0).leads)
        await in_sync_with(sim, leader, healthy, partition, keys)
        assert not leader.shard(0).damaged
        assert await _commit(healthy, partition, "wal/after") == len(keys)

    simulate(tmp_path, seed, work)


def test_a_leader_whose_log_is_damaged_while_it_runs_steps_down_and_repairs_from_a_follower(tmp_path: Path) -> None:
    """A bit flips in the running leader's log; a follower that lost its disk fetches from the start, so the leader
    reads the damaged frame from disk: it answers no frame of it, steps down for the other in-sync replica and
    repairs from it; the wiped follower catches up from the new leader. Nothing acknowledged is lost."""
    seed = _seeds((5,))[0]
    print(f"seed {seed}")
    rng = random.Random(seed)
    settings = {"diskless.coordinator.replica.buffer.bytes": "1"}  # every fetch behind the log end reads the disk

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await formed(sim)
        await _topic(sim)
        leader = _leader(sim, 0)
        partition = _partition_of(sim, 0)
        keys = await acknowledge(leader, partition, "running-leader", 20)
        wiped, healthy = [n for n in sim.nodes if n is not leader]
        await _until("every replica applied them", lambda: all(
            n.shard(0).statistics().applied_offset == leader.shard(0).statistics().applied_offset for n in sim.nodes
        ))  # fmt: skip
        await sim.crash(wiped.node_id)
        sim.wipe(wiped.node_id)
        segment, position = flip_in_log(leader, 0, rng)
        print(f"flipped a bit at byte {position} of {segment}")
        await sim.start(wiped.node_id)
        await _until("the healthy follower leads", lambda: healthy.shard(0).leads and not leader.shard(0).leads)
        await in_sync_with(sim, leader, healthy, partition, keys)

        async def wiped_back() -> bool:
            return wiped.node_id in (await _assignment(sim, 0)).isr

        await _until("the wiped follower caught up from the new leader", wiped_back)
        assert keys_found(wiped, partition) == keys
        assert await _commit(healthy, partition, "wal/after") == len(keys)

    simulate(tmp_path, seed, work, settings=settings)


@pytest.mark.slow  # 120 commits and two snapshots first
def test_a_follower_whose_read_meets_damage_while_running_with_its_snapshots_damaged_repairs_from_the_leader(
    tmp_path: Path,
) -> None:
    """A read on the follower meets a damaged page (reported as the router reports it); the reload cannot rebuild
    locally (every snapshot flipped, the log pruned), so the follower repairs from the leader, by itself."""
    seed = _seeds((6,))[0]
    print(f"seed {seed}")
    rng = random.Random(seed)

    async def work(sim: SimCluster) -> None:
        leader, follower, partition, keys = await follower_with_a_pruned_log(sim, "running-follower")
        for path in sorted((coordinator_directory(follower.data_dir, 0) / "snapshots").glob("*.sqlite")):
            print(f"flipped a bit at byte {flip_bit(path, rng)} of {path}")
        follower.shard(0).report_damage(StateDamaged("the page at offset 4096 fails its checksum"))
        await asyncio.sleep(0)
        assert keys_found(follower, partition) in (keys, pb.COORDINATOR_NOT_AVAILABLE, pb.COORDINATOR_LOAD_IN_PROGRESS)
        await in_sync_with(sim, follower, leader, partition, keys)

    simulate(tmp_path, seed, work, settings=PRUNING)


FILE_KINDS = ("log", "state", "snapshot")


def flip_one_file(sim_node: SimNode, rng: random.Random) -> str:
    """One bit flipped in one file of the stopped replica of coordinator 0: a log segment, its state or a snapshot
    (the log when it has none); returns what was flipped, for the trace."""
    directory = coordinator_directory(sim_node.data_dir, 0)
    kind = rng.choice(FILE_KINDS)
    candidates = {
        "log": sorted((directory / "log").glob(f"*{SEGMENT_SUFFIX}")),
        "state": [directory / "state.sqlite"],
        "snapshot": sorted((directory / "snapshots").glob("*.sqlite")),
    }
    files = [p for p in candidates[kind] if p.exists() and p.stat().st_size > 0] or [
        p for p in candidates["log"] if p.stat().st_size > 0
    ]
    path = rng.choice(files)
    return f"{path.relative_to(sim_node.data_dir)} byte {flip_bit(path, rng)}"


def counts_of(directory: Path) -> tuple[int, int]:
    """Folders of files set aside for a repair, and states set aside for a local rebuild."""
    return len(damaged_folders(directory)), len(list(directory.glob("state.sqlite.corrupt-*")))


def outcome_of(directory: Path, before: tuple[int, int]) -> str:
    """How the replica dealt with the flip: repaired from a replica (its files set aside), rebuilt from its own
    snapshot and log (its state set aside), or no damage met (a flip nothing read yet, or a torn tail cut)."""
    after = counts_of(directory)
    if after[0] > before[0]:
        return "repaired from a replica"
    if after[1] > before[1]:
        return "state rebuilt locally"
    return "no damage met"


RETRIABLE_READ_REFUSALS = (pb.COORDINATOR_LOAD_IN_PROGRESS, pb.COORDINATOR_NOT_AVAILABLE, pb.NOT_COORDINATOR)


async def all_applied(sim: SimCluster, what: str, partition: int | None = None, keys: list[str] | None = None) -> None:
    """Waits for one leader serving and every replica applied as far as it. With `keys`: meanwhile, at every step,
    the leader answers the partition with exactly them or a retriable refusal, never fewer nor "unknown" (a new
    leader whose state is behind the log it was elected with once answered UNKNOWN_TOPIC_OR_PARTITION)."""

    def caught_up() -> bool:
        leaders = [n for n in sim.nodes if n.up and n.shard(0).leads]
        if len(leaders) != 1:
            return False
        if partition is not None and keys is not None:
            answer = keys_found(leaders[0], partition)
            assert answer == keys or answer in RETRIABLE_READ_REFUSALS, (
                f"leader node {leaders[0].node_id} answered {answer}, not the {len(keys)} acknowledged batches"
            )
        # The leader applied its whole log (a new leader answers no read before it has applied the log it was
        # elected with), and every replica as far as it.
        statistics = leaders[0].shard(0).statistics()
        if statistics.applied_offset < statistics.log_end_offset:
            return False
        return all(n.up and n.shard(0).statistics().applied_offset >= statistics.applied_offset for n in sim.nodes)

    await _until(what, caught_up)


async def damage_rounds(sim: SimCluster, rng: random.Random, rounds: int) -> list[tuple[str, str]]:
    """Each round: commits, one replica (leader or follower) stopped, one bit flipped in one of its files, started
    again; it must be back in the ISR with every acknowledged batch, and every replica answers exactly them.
    Returns (what was flipped, the outcome) per round."""
    await sim.start_all()
    await formed(sim)
    await _topic(sim)
    partition = _partition_of(sim, 0)
    keys: list[str] = []
    trace = []
    for round_number in range(rounds):
        await all_applied(sim, "a leader serves and every replica applied what it did")
        leader = _leader(sim, 0)
        keys += await acknowledge(leader, partition, f"round-{round_number}", 8, len(keys))
        await all_applied(sim, "every replica applied the round's commits")
        victim = rng.choice(sim.nodes)
        directory = coordinator_directory(victim.data_dir, 0)
        await sim.crash(victim.node_id)
        before = counts_of(directory)
        role = "leader" if victim is leader else "follower"
        flipped = f"node {victim.node_id} ({role}) {flip_one_file(victim, rng)}"
        await sim.start(victim.node_id)

        async def all_back(victim: SimNode = victim) -> bool:
            return victim.up and len((await _assignment(sim, 0)).isr) == 3

        await _until(f"node {victim.node_id} back in the ISR", all_back)
        await all_applied(sim, "every replica caught up", partition, keys)
        trace.append((flipped, outcome_of(directory, before)))
        print(f"round {round_number}: {flipped}: {trace[-1][1]}")
        for sim_node in sim.nodes:
            assert keys_found(sim_node, partition) == keys, f"node {sim_node.node_id} after {flipped}"
    return trace


@pytest.mark.parametrize("seed", [*_seeds((11,)), *(pytest.param(s, marks=pytest.mark.slow) for s in range(12, 32))])
def test_random_bit_flips_in_any_replicas_files_end_repaired_with_nothing_acknowledged_lost(
    tmp_path: Path, seed: int
) -> None:
    print(f"seed {seed}")
    settings = {
        "diskless.coordinator.log.segment.bytes": "4096",
        "diskless.coordinator.snapshot.interval.bytes": "4096",  # snapshots, and a pruned log, after a few rounds
    }
    rng = random.Random(seed)
    simulate(tmp_path, seed, lambda sim: damage_rounds(sim, rng, 4), settings=settings)


@pytest.mark.slow  # 120 commits and two snapshots first
@pytest.mark.parametrize("older_snapshot", [True, False], ids=["an-older-one-verifies", "none-verifies"])
def test_a_leader_whose_newest_snapshot_is_damaged_never_sends_it_to_a_follower(
    tmp_path: Path, older_snapshot: bool
) -> None:
    """A follower below the leader's log start fetches a snapshot: the leader never streams one that fails its
    checksum (the follower would refuse it for ever). It sends the newest that verifies (any kept one ends where the
    log continues it); with none, it takes a new one (a damaged one of the same id is copied again) and the
    follower's next fetch gets it."""
    seed = _seeds((7,))[0]
    print(f"seed {seed}")
    rng = random.Random(seed)
    settings = {
        "diskless.coordinator.log.segment.bytes": "4096",
        "diskless.coordinator.snapshot.interval.bytes": "0",
        "diskless.coordinator.snapshot.interval.ms": "0",
    }

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        behind = next(n for n in sim.nodes if n is not leader)
        partition = _partition_of(sim, 0)
        await sim.crash(behind.node_id)
        keys = await acknowledge(leader, partition, "snapshot", 120)
        await leader.shard(0).create_snapshot()
        if older_snapshot:
            keys += await acknowledge(leader, partition, "between", 40, len(keys))
        await leader.shard(0).create_snapshot()
        assert leader.shard(0).statistics().log_start_offset > 0, "the leader kept its whole log: nothing to test"
        snapshots = sorted((coordinator_directory(leader.data_dir, 0) / "snapshots").glob("*.sqlite"))
        assert len(snapshots) == (2 if older_snapshot else 1)
        print(f"flipped a bit at byte {flip_bit(snapshots[-1], rng)} of {snapshots[-1]}")
        await sim.start(behind.node_id)
        await _until("the follower caught up", lambda: (
            behind.up and behind.shard(0).statistics().applied_offset == leader.shard(0).statistics().applied_offset
        ))  # fmt: skip
        assert keys_found(behind, partition) == keys

    simulate(tmp_path, seed, work, settings=settings)
