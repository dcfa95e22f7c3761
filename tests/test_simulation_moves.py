"""A partition moved between coordinators in the simulated cluster (design §5a), under steady commits, with the node
leading the source or the target crashed at a seeded moment of the move (a seeded number of chunks staged; calls between
nodes delayed so that the move spans simulated time) and started again: the move worker on the
new leader goes on from the logs, the move ends moved out, every acknowledged batch is at its offset at the target,
the partition's offsets are contiguous and every replica of both coordinators converges.

Each test prints its seed; `pytest tests/test_simulation_moves.py -k <name>` replays it exactly.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from tests.harness import batch, find_batches_request
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _leader, _topic, _until, simulate

MOVING = {
    "diskless.partition.move.chunk.batches": "1",  # many chunks: a crash lands between them
    "diskless.partition.move.interval.ms": "200",
}


@dataclass
class Committer:
    """A broker committing one batch at a time to a partition, at the leader FindCoordinator names now."""

    sim: SimCluster
    partition: int
    acknowledged: dict[int, str] = field(default_factory=dict)  # offset -> object key
    refused: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _where(self) -> tuple[int, SimNode] | None:
        asked = [n for n in self.sim.running() if n.up]
        if not asked or asked[0].node is None:
            return None
        topic = pb.FindCoordinatorRequest.Topic(topic_id=TOPIC_ID, partitions=[self.partition])
        found = await asked[0].node.router.find_coordinator(pb.FindCoordinatorRequest(topics=[topic]))
        coordinator_id = found.topics[0].partitions[0].coordinator_id
        leaders = [n for n in self.sim.leaders(coordinator_id) if n.up] if coordinator_id >= 0 else []
        return (coordinator_id, leaders[0]) if len(leaders) == 1 else None

    async def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            where = await self._where()
            if where is None or where[1].node is None:
                await asyncio.sleep(0.05)
                continue
            coordinator_id, leader = where
            number += 1
            key = f"wal/{self.partition}/{number}"
            request = pb.CommitFileRequest(
                object_key=key, object_format=1, file_size=100, uploader_broker_id=1, owner_ids=[coordinator_id],
                batches=[batch(TOPIC_ID, self.partition)], timeout_ms=3000,
            )  # fmt: skip
            try:
                result = (await leader.node.router.commit_file(request)).batches[0]
            except Exception:  # a node closing under the call: the broker was told nothing
                result = pb.CommitFileResponse.BatchResult(error_code=pb.REQUEST_TIMED_OUT)
            if result.error_code == pb.NONE:
                earlier = self.acknowledged.get(result.assigned_base_offset)
                assert earlier is None, f"offset {result.assigned_base_offset} acknowledged twice: {earlier}, {key}"
                self.acknowledged[result.assigned_base_offset] = key
            else:
                self.refused += 1
            await asyncio.sleep(0.02)


async def _step(sim: SimCluster, source: int, started: admin.MovePartitionResponse, partition: int) -> str:
    leaders = [n for n in sim.leaders(source) if n.up]
    if len(leaders) != 1 or leaders[0].node is None:
        return ""
    request = admin.DescribePartitionMoveRequest(
        topic_id=TOPIC_ID, partition=partition, from_coordinator_id=source, move_id=started.move_id, timeout_ms=2000
    )
    return str((await leaders[0].node.router.describe_partition_move(request)).step)


def _read_all(node: SimNode, partition: int) -> tuple[list[pb.BatchInfo], int]:
    assert node.node is not None
    batches: list[pb.BatchInfo] = []
    offset = 0
    while True:
        raw = node.node.router.find_batches(find_batches_request(TOPIC_ID, partition, offset, 0))
        result = pb.FindBatchesResponse.FromString(raw).topics[0].partitions[0]
        assert result.error_code == pb.NONE, result
        batches.extend(result.batches)
        if not result.batches or batches[-1].last_offset + 1 >= result.high_watermark:
            return batches, result.high_watermark
        offset = batches[-1].last_offset + 1


@pytest.mark.parametrize("victim", ["source", "target"])
@pytest.mark.parametrize("seed", [3, 11, 17])
def test_a_move_survives_a_crash_of_either_sides_leader_and_loses_nothing(
    tmp_path: Path, seed: int, victim: str
) -> None:
    rng = random.Random(seed)

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        partition = 0
        first = sim.running()[0].node
        assert first is not None
        source = first.router.catalog.coordinator_of(TOPIC_ID, partition)
        assert source is not None
        # A target led by another node than the source: a crash takes one side's leader only.
        source_node = _leader(sim, source).node_id
        target = next(c for c in range(sim.coordinators) if c != source and _leader(sim, c).node_id != source_node)
        committer = Committer(sim, partition)
        committing = asyncio.ensure_future(committer.run())
        await _until("a backlog to move", lambda: len(committer.acknowledged) >= 30)

        # Every call between nodes takes up to 10 simulated ms: the move spans time, and a crash lands inside it.
        sim.network.faults.delay, sim.network.faults.delay_max_ms = 1.0, 10
        source_leader = _leader(sim, source)
        assert source_leader.node is not None
        move = admin.MovePartitionRequest(topic_id=TOPIC_ID, partition=partition, to_coordinator_id=target)
        started = await source_leader.node.router.move_partition(move)
        assert started.error_code == pb.NONE, started

        # A seeded moment of the move: once the target staged a seeded number of chunks, or at once (frozen).
        staged_before_crash = rng.choice((0, 1, 5, 12, 25))

        async def staged_enough() -> bool:
            leaders = [n for n in sim.leaders(target) if n.up]
            if len(leaders) != 1:
                return False
            staged, _, adopted, _ = leaders[0].shard(target).adoption_progress(source, started.move_id)
            return adopted or staged >= staged_before_crash

        while not await staged_enough():  # looked at every simulated millisecond: a chunk takes a few
            await asyncio.sleep(0.001)
        crashed = _leader(sim, source if victim == "source" else target)
        step = await _step(sim, source, started, partition)
        await sim.crash(crashed.node_id)
        print(f"seed {seed}: node {crashed.node_id} ({victim}'s leader) crashed, the move at {step!r}", end=", ")
        await asyncio.sleep(rng.randint(500, 5000) / 1000)
        await sim.start(crashed.node_id)

        async def moved_out() -> bool:
            return await _step(sim, source, started, partition) == "moved out"

        await _until("the move ends moved out", moved_out, within_s=120)
        await _until("commits go on at the target", lambda: len(committer.acknowledged) >= 60, within_s=120)
        committer.stop.set()
        await committing
        await asyncio.sleep(10)  # replicas catch up

        leader = _leader(sim, target)
        assert leader.node is not None and leader.node.router.catalog.coordinator_of(TOPIC_ID, partition) == target
        batches, high_watermark = _read_all(leader, partition)
        found = {b.base_offset: b.object_key for b in batches}
        for offset, key in committer.acknowledged.items():
            assert found.get(offset) == key, (
                f"seed {seed}: offset {offset} acknowledged as {key}, found {found.get(offset)}"
            )
        assert [b.base_offset for b in batches] == list(range(high_watermark))  # contiguous from 0
        for coordinator_id in (source, target):
            ends = {n.node_id: n.shard(coordinator_id).statistics().log_end_offset for n in sim.running()}
            assert len(set(ends.values())) == 1, f"seed {seed}: coordinator {coordinator_id} replicas differ: {ends}"
        print(f"seed {seed}: {len(committer.acknowledged)} acknowledged, {committer.refused} refused meanwhile")

    simulate(tmp_path, seed, work, settings=MOVING)
