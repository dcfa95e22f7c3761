"""Producer-id expiry in the simulated cluster (DESIGN §4a): the leader's decision is a record every replica applies
alike, and a new leader goes on from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from protos import coordinator_pb2 as pb
from tests.harness import batch
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _leader, _partition_of, _topic, _until, simulate


def test_followers_forget_the_producers_their_leader_expires_and_a_new_leader_goes_on(tmp_path: Path) -> None:
    """Producer-id expiry (DESIGN §4a) is the leader's record: every replica drops the same producers, and after a
    failover the expired one is unknown (any sequence) while the busy one keeps its sequence."""
    settings = {
        "diskless.coordinator.producer.id.expiration.ms": "60000",
        "diskless.coordinator.producer.id.expiration.check.interval.ms": "10000",
    }
    idle, busy = 1, 2

    async def produce(sim: SimCluster, partition: int, producer_id: int, sequence: int, key: str) -> int:
        node = _leader(sim, 0).node
        assert node is not None
        produced = batch(TOPIC_ID, partition, producer_id=producer_id, epoch=0, sequence=sequence,
                         timestamp_type=pb.LOG_APPEND_TIME)  # fmt: skip
        request = pb.CommitFileRequest(object_key=key, object_format=1, file_size=100, uploader_broker_id=1,
                                       owner_ids=[0], batches=[produced], timeout_ms=5000)  # fmt: skip
        return (await node.router.commit_file(request)).batches[0].error_code

    def producers(sim_node: SimNode) -> list[tuple[int, ...]]:
        with sim_node.shard(0).read_transaction() as db:
            return [tuple(row) for row in db.execute("SELECT * FROM producers ORDER BY partition_key, producer_id")]

    def caught_up(sim: SimCluster) -> bool:
        ends = {n.shard(0).statistics().applied_offset for n in sim.running()}
        return len(ends) == 1

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        partition = _partition_of(sim, 0)
        assert await produce(sim, partition, idle, 0, "wal/p/idle") == pb.NONE
        for sequence in range(10):  # 200 s of a producer writing every 20 s
            assert await produce(sim, partition, busy, sequence, f"wal/p/{sequence}") == pb.NONE
            await asyncio.sleep(20)
        await _until("every replica applied the same log", lambda: caught_up(sim))
        kept = [producers(n) for n in sim.running()]
        assert kept[0] == kept[1] == kept[2] and [row[1] for row in kept[0]] == [busy], kept
        assert all(n.shard(0).statistics().producer_count == 1 for n in sim.running())
        old = _leader(sim, 0)
        await sim.crash(old.node_id)
        await _until("another node leads", lambda: any(n is not old for n in sim.leaders(0)))
        assert await produce(sim, partition, idle, 4242, "wal/p/idle-again") == pb.NONE  # unknown: any sequence
        assert await produce(sim, partition, busy, 99, "wal/p/busy-skips") == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert await produce(sim, partition, busy, 10, "wal/p/busy-next") == pb.NONE

    simulate(tmp_path, 27, work, settings=settings)
