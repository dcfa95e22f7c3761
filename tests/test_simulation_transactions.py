"""Transactions in the simulated cluster (DESIGN §4b): transactional producers whose markers cross failovers. Nothing
acknowledged is lost, the last stable offset a read_committed consumer sees never moves back, and every replica
holds the same open transactions, coordinator epochs and aborted ranges.

The seeded randomized runs (tests/simulation/transactions.py) print their seed; as the plain runs,
`DISKLESS_SIM_SEEDS=7 DISKLESS_SIM_STEPS=500 pytest tests/test_simulation_transactions.py -k seeded` replays one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from protos import coordinator_pb2 as pb
from tests.harness import batch
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.transactions import TransactionalWorkload
from tests.simulation.workload import TOPIC_ID, RunReport
from tests.test_simulation import _leader, _partition_of, _seeds, _steps, _topic, _until, simulate
from tests.test_transactions_core import marker

PRODUCERS = (31, 32, 33)
FAST_SEEDS = (1,)
FAST_STEPS = 200
SLOW_SEEDS = tuple(range(200, 203))  # three: each runs 20-50 s, and the README command stays under 20 minutes
SLOW_STEPS = 1000


def _run(root: Path, seed: int, steps: int) -> tuple[RunReport, TransactionalWorkload]:
    def work(sim: SimCluster) -> Any:
        workload = TransactionalWorkload(sim, seed, steps)
        return workload.run(), workload

    async def run(sim: SimCluster) -> tuple[RunReport, TransactionalWorkload]:
        report, workload = work(sim)
        return await report, workload

    report, workload = simulate(root, seed, run)
    ended = workload.ended
    print(
        f"seed {seed}: {report.steps} steps in {report.wall_s:.2f} s ({report.simulated_s:.0f} s simulated), "
        f"{report.acknowledged} batches acknowledged, {report.refused} refused; {len(ended)} transaction ends "
        f"({sum(not e.committed for e in ended)} aborts), {workload.transactions_checked} read_committed checks"
    )
    return report, workload


def _assert_it_checked(workload: TransactionalWorkload) -> None:
    ended = workload.ended
    assert any(e.committed and e.offsets for e in ended), "no transaction committed with a batch: nothing checked"
    assert any(not e.committed and e.offsets for e in ended), "no transaction aborted with a batch: nothing checked"
    assert workload.transactions_checked > 0


@pytest.mark.parametrize("seed", _seeds(FAST_SEEDS))
def test_seeded_run_with_transactions_loses_nothing_keeps_the_lso_and_replicas_agree(tmp_path: Path, seed: int) -> None:
    _, workload = _run(tmp_path, seed, _steps(FAST_STEPS))
    _assert_it_checked(workload)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_seeded_long_run_with_transactions_loses_nothing_keeps_the_lso_and_replicas_agree(
    tmp_path: Path, seed: int
) -> None:
    _, workload = _run(tmp_path, seed, SLOW_STEPS)
    _assert_it_checked(workload)


def test_a_seed_with_transactions_replays_exactly(tmp_path: Path) -> None:
    first, _ = _run(tmp_path / "first", 12, 80)
    second, _ = _run(tmp_path / "second", 12, 80)
    assert first.trace == second.trace
    assert any(" commit [" in line or " abort [" in line for line in first.trace), "no transaction ended"


def _data(partition: int, producer: int, sequence: int) -> pb.CommitFileRequest.Batch:
    produced = batch(TOPIC_ID, partition, 2, producer_id=producer, epoch=0, sequence=sequence)
    produced.is_transactional = True
    return produced


def _marker(partition: int, producer: int, commit: bool, coordinator_epoch: int) -> pb.CommitFileRequest.Batch:
    made = marker(partition, producer, 0, commit, coordinator_epoch)
    made.topic_id = TOPIC_ID
    return made


def _tables(sim_node: SimNode) -> tuple[list[tuple[Any, ...]], ...]:
    with sim_node.shard(0).read_transaction() as db:
        return tuple(
            [tuple(row) for row in db.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
            for table in ("producer_transactions", "aborted_transactions", "producers")
        )


@pytest.mark.parametrize("seed", [41, pytest.param(42, marks=pytest.mark.slow)])
def test_markers_cross_failovers_nothing_acknowledged_is_lost_and_the_lso_never_moves_back(
    tmp_path: Path, seed: int
) -> None:
    async def commit(sim: SimCluster, partition: int, produced: pb.CommitFileRequest.Batch, key: str) -> int:
        """The acknowledged offset, retried on the current leader until one answers (as a broker retries)."""
        for _ in range(50):
            node = _leader(sim, 0).node if len(sim.leaders(0)) == 1 else None
            if node is not None:
                request = pb.CommitFileRequest(object_key=key, object_format=1, file_size=100, uploader_broker_id=1,
                                               owner_ids=[0], batches=[produced], timeout_ms=3000)  # fmt: skip
                result = (await node.router.commit_file(request)).batches[0]
                if result.error_code == pb.NONE:
                    return result.assigned_base_offset
                assert result.error_code in (pb.NOT_COORDINATOR, pb.COORDINATOR_LOAD_IN_PROGRESS,
                                             pb.REQUEST_TIMED_OUT, pb.NOT_ENOUGH_REPLICAS), result  # fmt: skip
            await asyncio.sleep(0.5)
        raise AssertionError(f"{key} never acknowledged")

    def read_committed(sim_node: SimNode, partition: int) -> pb.FindBatchesResponse.PartitionResult:
        assert sim_node.node is not None
        wanted = pb.FindBatchesRequest.Partition(partition=partition, offset=0, max_partition_fetch_bytes=2**30)
        topics = [pb.FindBatchesRequest.Topic(topic_id=TOPIC_ID, partitions=[wanted])]
        request = pb.FindBatchesRequest(fetch_max_bytes=2**30, isolation_level=pb.READ_COMMITTED, topics=topics)
        answer = pb.FindBatchesResponse.FromString(sim_node.node.router.find_batches(request))
        return answer.topics[0].partitions[0]

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        partition = _partition_of(sim, 0)
        sequences = dict.fromkeys(PRODUCERS, 0)
        acknowledged: dict[int, int] = {}  # offset -> producer (data batches and markers)
        aborted: list[tuple[int, int]] = []  # (producer, first offset)
        seen_lso = 0
        for round_number in range(3):
            opened: dict[int, int] = {}
            for producer in PRODUCERS:
                offset = await commit(sim, partition, _data(partition, producer, sequences[producer]),
                                      f"wal/t/{round_number}/{producer}")  # fmt: skip
                sequences[producer] += 2
                acknowledged[offset] = producer
                opened[producer] = offset
            stable = read_committed(_leader(sim, 0), partition).last_stable_offset
            assert seen_lso <= stable <= min(opened.values()), (seen_lso, stable, opened)
            seen_lso = stable
            old = _leader(sim, 0)
            await sim.crash(old.node_id)  # the markers go to whichever node leads next
            await _until("another node leads", lambda old=old: any(n is not old for n in sim.leaders(0)))
            for producer in PRODUCERS:
                commit_it = producer != PRODUCERS[round_number % len(PRODUCERS)]
                offset = await commit(sim, partition, _marker(partition, producer, commit_it, round_number),
                                      f"wal/m/{round_number}/{producer}")  # fmt: skip
                acknowledged[offset] = producer
                if not commit_it:
                    aborted.append((producer, opened[producer]))
                answer = read_committed(_leader(sim, 0), partition)
                assert answer.last_stable_offset >= seen_lso, (answer.last_stable_offset, seen_lso)
                seen_lso = answer.last_stable_offset
            await sim.start(old.node_id)
        leader = _leader(sim, 0)
        answer = read_committed(leader, partition)
        assert answer.last_stable_offset == answer.high_watermark  # every transaction ended
        held = {b.base_offset: b.producer_id for b in answer.batches}
        assert acknowledged == {offset: held.get(offset) for offset in acknowledged}  # nothing lost
        assert sorted((a.producer_id, a.first_offset) for a in answer.aborted_transactions) == sorted(aborted)

        def agree() -> bool:
            ends = {n.shard(0).statistics().applied_offset for n in sim.running()}
            return len(ends) == 1

        await _until("every replica applied the same log", agree)
        tables = [_tables(n) for n in sim.running()]
        assert len(tables) == 3 and tables[0] == tables[1] == tables[2], tables
        assert len(tables[0][1]) == len(aborted)  # one aborted range per ABORT that ended a transaction
        # Follower reads run the same code on the same state: every replica answers the leader's answer.
        assert all(read_committed(n, partition) == answer for n in sim.running()), [n.node_id for n in sim.running()]

    simulate(tmp_path, seed, work)
