"""A move with retention and the file workers' deletions (design §5a, issue #39 item 3): partition 0 moves between
coordinators while a broker commits WAL files each holding a batch of partition 0 and one of a partner partition on
another coordinator (both coordinators own the file), retention.bytes expires the oldest batches of both partitions in
passes, the file workers hand files over and delete them after a short grace period, and the leader of the source or
the target crashes at a seeded moment of the move. The rule proven: no WAL file is deleted while any coordinator's
leader still holds a live batch in it (checked at every deletion, and at the end for every file deleted); nothing
acknowledged and not expired is lost; each partition's offsets are contiguous above its log start.

Each test prints its seed; `pytest tests/test_simulation_moves_retention.py -k <name>` replays it exactly.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from coordinator.files.object_store.base import DeleteOutcome
from coordinator.files.object_store.local import LocalObjectStore
from coordinator.machine.state import file_reads, reads
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from tests.harness import batch, find_batches_request
from tests.simulation.cluster import SimCluster
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _leader, _topic, _until, simulate
from tests.test_simulation_moves import MOVING, _step

SIZE = 100
RETAINED = 1500  # retention.bytes: fifteen batches of SIZE per partition; passes expire batches all along the run
SETTINGS = {
    **MOVING,
    "diskless.coordinator.retention.check.interval.ms": "500",
    "diskless.coordinator.retention.batch.max": "5",
    "diskless.coordinator.file.worker.interval.ms": "300",
    "diskless.coordinator.file.deletion.grace.period.ms": "500",
}


def _live_holders(sim: SimCluster, key: str) -> list[str]:
    """The coordinators whose leader's state holds a live batch in the file (or lends it out)."""
    holders = []
    for coordinator_id in range(sim.coordinators):
        for sim_node in sim.leaders(coordinator_id):
            if not sim_node.up or sim_node.node is None:
                continue
            with sim_node.shard(coordinator_id).read_transaction() as db:
                facts = file_reads.file_facts(db, key)
            if facts is not None and (facts.live_batches > 0 or facts.loans_out > 0):
                holders.append(f"coordinator {coordinator_id} on node {sim_node.node_id}: {facts}")
    return holders


@contextmanager
def _watched_deletions(sim_ref: list[SimCluster], deleted: list[str], broken: list[str]) -> Iterator[None]:
    """Every object deletion of every node's file worker is checked against every coordinator's leader first."""
    original = LocalObjectStore.delete

    def delete(self: LocalObjectStore, keys: Sequence[str]) -> DeleteOutcome:
        if sim_ref:
            for key in keys:
                holders = _live_holders(sim_ref[0], key)
                if holders:
                    broken.append(f"{key} deleted while live at {holders}")
        outcome = original(self, keys)
        deleted.extend(outcome.deleted)
        return outcome

    LocalObjectStore.delete = delete  # type: ignore[method-assign]
    try:
        yield
    finally:
        LocalObjectStore.delete = original  # type: ignore[method-assign]


@dataclass
class SharedCommitter:
    """A broker committing one WAL file at a time holding a batch of each partition, to each one's coordinator."""

    sim: SimCluster
    partitions: tuple[int, int]
    acknowledged: dict[int, dict[int, str]] = field(default_factory=dict)  # partition -> offset -> object key
    refused: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _coordinators(self) -> list[int] | None:
        asked = [n for n in self.sim.running() if n.up]
        if not asked or asked[0].node is None:
            return None
        topic = pb.FindCoordinatorRequest.Topic(topic_id=TOPIC_ID, partitions=list(self.partitions))
        found = await asked[0].node.router.find_coordinator(pb.FindCoordinatorRequest(topics=[topic]))
        ids = [p.coordinator_id for p in found.topics[0].partitions]
        return None if any(i < 0 for i in ids) else ids

    async def _commit(self, coordinator_id: int, request: pb.CommitFileRequest) -> pb.CommitFileResponse.BatchResult:
        leaders = [n for n in self.sim.leaders(coordinator_id) if n.up]
        if len(leaders) != 1 or leaders[0].node is None:
            return pb.CommitFileResponse.BatchResult(error_code=pb.NOT_COORDINATOR)
        try:
            return (await leaders[0].node.router.commit_file(request)).batches[0]
        except Exception:  # a node closing under the call: the broker was told nothing
            return pb.CommitFileResponse.BatchResult(error_code=pb.REQUEST_TIMED_OUT)

    async def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            coordinators = await self._coordinators()
            if coordinators is None:
                await asyncio.sleep(0.05)
                continue
            number += 1
            key = f"wal/shared/{number}"
            owners = sorted(set(coordinators))
            for position, (partition, coordinator_id) in enumerate(zip(self.partitions, coordinators, strict=True)):
                request = pb.CommitFileRequest(
                    object_key=key, object_format=1, file_size=2 * SIZE, uploader_broker_id=1, owner_ids=owners,
                    batches=[batch(TOPIC_ID, partition, byte_offset=position * SIZE, size=SIZE)], timeout_ms=3000,
                )  # fmt: skip
                result = await self._commit(coordinator_id, request)
                if result.error_code != pb.NONE:
                    self.refused += 1
                    continue
                acknowledged = self.acknowledged.setdefault(partition, {})
                earlier = acknowledged.get(result.assigned_base_offset)
                assert earlier is None, (
                    f"{partition}@{result.assigned_base_offset} acknowledged twice: {earlier}, {key}"
                )
                acknowledged[result.assigned_base_offset] = key
            await asyncio.sleep(0.02)


def _read_from_start(sim: SimCluster, partition: int) -> tuple[list[pb.BatchInfo], int, int]:
    """The partition's batches from its log start at its coordinator's leader; its log start; its high watermark."""
    first = sim.running()[0].node
    assert first is not None
    coordinator_id = first.router.catalog.coordinator_of(TOPIC_ID, partition)
    assert coordinator_id is not None
    node = _leader(sim, coordinator_id).node
    assert node is not None
    with _leader(sim, coordinator_id).shard(coordinator_id).read_transaction() as db:
        offsets = reads.partition_offsets(db, TOPIC_ID, partition)
    assert offsets is not None
    log_start = offsets.log_start_offset
    batches: list[pb.BatchInfo] = []
    offset = log_start
    while True:
        raw = node.router.find_batches(find_batches_request(TOPIC_ID, partition, offset, 0))
        result = pb.FindBatchesResponse.FromString(raw).topics[0].partitions[0]
        assert result.error_code == pb.NONE, result
        batches.extend(result.batches)
        if not result.batches or batches[-1].last_offset + 1 >= result.high_watermark:
            return batches, log_start, result.high_watermark
        offset = batches[-1].last_offset + 1


def _run(tmp_path: Path, seed: int, victim: str) -> None:
    rng = random.Random(seed)
    deleted: list[str] = []
    broken: list[str] = []
    sim_ref: list[SimCluster] = []

    async def work(sim: SimCluster) -> None:
        sim_ref.append(sim)
        await sim.start_all()
        await _topic(sim)
        first = sim.running()[0].node
        assert first is not None
        change = pb.AlterTopicConfigsRequest.Topic(
            topic_id=TOPIC_ID, set=[pb.TopicConfig(name="retention.bytes", value=str(RETAINED))]
        )
        altered = await first.router.alter_topic_configs(pb.AlterTopicConfigsRequest(topics=[change], timeout_ms=5000))
        assert altered.topics[0].error_code == pb.NONE, altered
        moved = 0
        source = first.router.catalog.coordinator_of(TOPIC_ID, moved)
        assert source is not None
        partner = next(p for p in range(1, 4) if first.router.catalog.coordinator_of(TOPIC_ID, p) != source)
        source_node = _leader(sim, source).node_id
        target = next(c for c in range(sim.coordinators) if c != source and _leader(sim, c).node_id != source_node)
        committer = SharedCommitter(sim, (moved, partner))
        committing = asyncio.ensure_future(committer.run())
        await _until("a backlog past retention", lambda: len(committer.acknowledged.get(moved, {})) >= 40)

        sim.network.faults.delay, sim.network.faults.delay_max_ms = 1.0, 10
        source_leader = _leader(sim, source)
        assert source_leader.node is not None
        move = admin.MovePartitionRequest(topic_id=TOPIC_ID, partition=moved, to_coordinator_id=target)
        started = await source_leader.node.router.move_partition(move)
        assert started.error_code == pb.NONE, started
        staged_before_crash = rng.choice((0, 1, 5, 12))

        async def staged_enough() -> bool:
            leaders = [n for n in sim.leaders(target) if n.up]
            if len(leaders) != 1:
                return False
            staged, _, adopted, _ = leaders[0].shard(target).adoption_progress(source, started.move_id)
            return adopted or staged >= staged_before_crash

        while not await staged_enough():
            await asyncio.sleep(0.001)
        crashed = _leader(sim, source if victim == "source" else target)
        step = await _step(sim, source, started, moved)
        await sim.crash(crashed.node_id)
        print(f"seed {seed}: node {crashed.node_id} ({victim}'s leader) crashed, the move at {step!r}", end=", ")
        await asyncio.sleep(rng.randint(500, 5000) / 1000)
        await sim.start(crashed.node_id)

        async def moved_out() -> bool:
            return await _step(sim, source, started, moved) == "moved out"

        await _until("the move ends moved out", moved_out, within_s=120)
        await _until("commits go on at the target", lambda: len(committer.acknowledged[moved]) >= 90, within_s=120)
        committer.stop.set()
        await committing
        await _until("the file workers deleted files", lambda: len(deleted) >= 20, within_s=60)
        await asyncio.sleep(5)  # more passes and deletions, then the replicas catch up

        for partition in (moved, partner):
            batches, log_start, high_watermark = _read_from_start(sim, partition)
            assert log_start > 0, f"seed {seed}: retention expired nothing of partition {partition}"
            found = {b.base_offset: b.object_key for b in batches}
            for offset, key in committer.acknowledged[partition].items():
                if offset >= log_start:
                    assert found.get(offset) == key, f"seed {seed}: {partition}@{offset} acknowledged as {key}"
            assert [b.base_offset for b in batches] == list(range(log_start, high_watermark))
        for key in set(deleted):
            assert not _live_holders(sim, key), f"seed {seed}: {key} deleted yet live: {_live_holders(sim, key)}"
        assert not broken, f"seed {seed}: {broken[:3]}"
        # The drop set the moved batches aside for the purge, which it started: none is left at the source, and its
        # files count only the batches it still holds (they were kept past retention while the purge waited).
        with _leader(sim, source).shard(source).read_transaction() as db:
            awaiting = db.execute("SELECT count(*) FROM partitions_awaiting_purge").fetchone()[0]
            counted = db.execute("SELECT coalesce(sum(live_batches), 0) FROM files").fetchone()[0]
            held = db.execute("SELECT count(*) FROM batches").fetchone()[0]
        assert (awaiting, counted) == (0, held), f"seed {seed}: the source's purge did not run"
        print(f"seed {seed}: {len(set(deleted))} files deleted, {committer.refused} commits refused meanwhile")

    (tmp_path / "objects").mkdir()  # the store's root: deleting a missing object counts as deleted only under it
    with _watched_deletions(sim_ref, deleted, broken):
        simulate(tmp_path, seed, work, settings=SETTINGS)


@pytest.mark.parametrize("victim", ["source", "target"])
@pytest.mark.parametrize("seed", [5, 23])
def test_no_shared_wal_file_is_deleted_while_live_through_a_move_with_retention_and_a_crash(
    tmp_path: Path, seed: int, victim: str
) -> None:
    _run(tmp_path, seed, victim)


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["source", "target"])
@pytest.mark.parametrize("seed", range(100, 112))
def test_more_seeds_no_shared_wal_file_is_deleted_while_live_through_a_move_with_retention(
    tmp_path: Path, seed: int, victim: str
) -> None:
    _run(tmp_path, seed, victim)
