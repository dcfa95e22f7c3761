"""A partition moved between coordinators end to end through the node's real interfaces (design §5a): MovePartition
(admin) freezes it on its coordinator's leader, the source's move worker sends its chunks (AdoptPartitionChunk) and
asks for the adoption (AdoptPartition) over gRPC, and the target serves it. Nothing acknowledged is lost or at
another offset, FindBatches at the target answers the source's offsets and positions, a resend of an acknowledged
batch is a duplicate and the producer goes on at the high watermark. The worker keeps nothing of its own: cut off
at any call (before the target recorded it, or with its answer lost) and the node restarted, a new pass finishes
the move, the drop and the return of the borrowed WAL files included. A move stuck for
diskless.partition.move.timeout.ms is abandoned at the target and only then cancelled at the source (a late adoption
is refused); one the target adopted meanwhile ends with its drop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.main import main
from coordinator.cluster.peers import PeerClient, PeerError
from coordinator.files.loan_returns import LoanReturnWorker
from coordinator.node.worker_registry import LOAN_RETURNS, PARTITION_MOVES
from coordinator.topics.move_worker import MovePass, MoveWorker
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from tests.harness import (
    Broker,
    assert_state_equals_log_rebuild,
    batch,
    coordinator_of,
    delete_records,
    fetch_all_batches,
    high_watermark,
    topic_name,
)
from tests.in_process import InProcessNode, clock_running

PID = 7070
CHUNK_BATCHES = 2
TIMEOUT_MS = 60_000
SETTINGS = {
    "diskless.partition.move.chunk.batches": str(CHUNK_BATCHES),
    "diskless.partition.move.timeout.ms": str(TIMEOUT_MS),
    # The supervised worker never runs a pass of its own here: each test runs the passes it means.
    "diskless.partition.move.interval.ms": "3600000",
}


def positions(batches: list[pb.BatchInfo]) -> list[tuple[Any, ...]]:
    """Everything of a FindBatches entry but the batch id, which is per coordinator."""
    return [
        (b.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset, b.log_append_timestamp,
         b.batch_max_timestamp, b.producer_id, b.is_transactional, b.is_control)
        for b in batches
    ]  # fmt: skip


def idempotent(topic_id: bytes, sequence: int, offset_in_file: int = 0) -> pb.CommitFileRequest.Batch:
    return batch(topic_id, 0, 2, producer_id=PID, epoch=1, sequence=sequence, byte_offset=offset_in_file)


def admin_stub(node: InProcessNode) -> admin_pb2_grpc.CoordinatorAdminStub:
    return admin_pb2_grpc.CoordinatorAdminStub(node.channel())


def move(node: InProcessNode, topic_id: bytes, to: int) -> admin.MovePartitionResponse:
    request = admin.MovePartitionRequest(topic_id=topic_id, partition=0, to_coordinator_id=to)
    response: admin.MovePartitionResponse = admin_stub(node).MovePartition(request, timeout=30)
    return response


def step_of(node: InProcessNode, topic_id: bytes, started: admin.MovePartitionResponse) -> str:
    request = admin.DescribePartitionMoveRequest(
        topic_id=topic_id, partition=0, from_coordinator_id=started.from_coordinator_id, move_id=started.move_id
    )
    return str(admin_stub(node).DescribePartitionMove(request, timeout=30).step)


def moving_partition(node: InProcessNode, batches: int = 5) -> tuple[Broker, bytes, int, int]:
    """A topic of two partitions whose partition 0 holds `batches` idempotent batches, each in a WAL file shared
    with a batch of partition 1; (broker, topic id, its coordinator, another coordinator)."""
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("move"), 2)
    for sequence in range(0, 2 * batches, 2):
        response = broker.commit([idempotent(topic_id, sequence), batch(topic_id, 1, 1, byte_offset=100)])
        assert [b.error_code for b in response.batches] == [pb.NONE, pb.NONE], response
    source = coordinator_of(node.stub, topic_id, 0)
    # A target holding no row of the files (neither coordinator of the partitions): it borrows them from the source.
    others = {source, coordinator_of(node.stub, topic_id, 1)}
    target = next(c for c in range(node.coordinators) if c not in others)
    return broker, topic_id, source, target


def loan_rows(node: InProcessNode, coordinator_id: int) -> int:
    with node.node.shards[coordinator_id].read_transaction() as db:
        return int(db.execute("SELECT count(*) FROM files WHERE lender_id >= 0").fetchone()[0])


def loans_out(node: InProcessNode, coordinator_id: int) -> int:
    with node.node.shards[coordinator_id].read_transaction() as db:
        return int(db.execute("SELECT count(*) FROM file_loans").fetchone()[0])


def run_pass(worker: Any, node: InProcessNode) -> MovePass:
    result: MovePass = node.loop.run(worker.run_pass())
    return result


def supervised_worker(node: InProcessNode, coordinator_id: int) -> MoveWorker:
    worker = node.node.running_workers(PARTITION_MOVES.name)[coordinator_id]
    assert isinstance(worker, MoveWorker)
    return worker


def assert_moved_intact(node: InProcessNode, broker: Broker, topic_id: bytes, target: int, before: list[Any]) -> None:
    """The target serves the partition with every batch where the source had it; the producer goes on there."""
    assert coordinator_of(node.stub, topic_id, 0) == target
    batches, _, high_watermark = fetch_all_batches(node.stub, topic_id, 0)
    assert positions(batches) == before
    last_sequence = 2 * (len(before) - 1)
    resend = broker.commit([idempotent(topic_id, last_sequence)]).batches[0]
    assert (resend.error_code, resend.assigned_base_offset, resend.is_duplicate) == (
        pb.NONE, before[-1][3], True
    )  # fmt: skip
    following = broker.commit([idempotent(topic_id, last_sequence + 2)]).batches[0]
    assert (following.error_code, following.assigned_base_offset, following.is_duplicate) == (
        pb.NONE, high_watermark, False
    )  # fmt: skip
    other = broker.commit([batch(topic_id, 1, 1)]).batches[0]  # the topic's other partition never stopped
    assert other.error_code == pb.NONE


def test_move_partition_moves_it_whole_and_the_producer_goes_on_at_the_target(
    tmp_path: Path,
) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=SETTINGS).start()
    try:
        broker, topic_id, source, target = moving_partition(node)
        before = positions(fetch_all_batches(node.stub, topic_id, 0)[0])

        started = move(node, topic_id, target)
        assert started.error_code == pb.NONE and started.from_coordinator_id == source and started.move_id >= 0
        again = move(node, topic_id, target)  # idempotent: the same move's id, nothing written
        assert (again.error_code, again.move_id) == (pb.NONE, started.move_id)
        elsewhere = move(node, topic_id, next(c for c in range(4) if c not in (source, target)))
        assert elsewhere.error_code == pb.INVALID_REQUEST  # another move of a frozen partition
        assert step_of(node, topic_id, started) == "catching up"
        caught_up = broker.commit([idempotent(topic_id, 10)]).batches[0]
        assert caught_up.error_code == pb.NONE  # the catch-up: commits go on until the worker freezes the tail
        before = positions(fetch_all_batches(node.stub, topic_id, 0)[0])

        done = run_pass(supervised_worker(node, source), node)
        # 6 batches, chunks of 2: at most diskless.partition.move.freeze.tail.batches are left, so frozen at once.
        assert (done.frozen, done.chunks_sent, done.adopted, done.dropped, done.failures) == (1, 3, 1, 1, [])
        assert step_of(node, topic_id, started) == "moved out"
        assert_moved_intact(node, broker, topic_id, target, before)
        again = run_pass(supervised_worker(node, source), node)  # nothing is left to do
        assert (again.chunks_sent, again.adopted, again.dropped) == (0, 0, 0)

        node.restart()
        assert coordinator_of(node.stub, topic_id, 0) == target  # the catalog rebuilt from the logs names the target
        assert len(fetch_all_batches(node.stub, topic_id, 0)[0]) == len(before) + 1

        # The target borrowed the source's WAL files (each also holds a batch of partition 1, elsewhere); once it
        # holds no live batch in them, its loan-return worker gives them back and the source's loans end.
        assert loan_rows(node, target) == len(before) and loans_out(node, source) == len(before)
        deleted = delete_records(node.stub, topic_id, 0, high_watermark(node.stub, topic_id, 0))
        assert deleted.error_code == pb.NONE
        returns = node.node.running_workers(LOAN_RETURNS.name)[target]
        assert isinstance(returns, LoanReturnWorker)
        assert node.loop.run(returns.run_pass()) == len(before)
        assert (loan_rows(node, target), loans_out(node, source)) == (0, 0)
        assert node.loop.run(returns.run_pass()) == 0
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")


class CutOff:
    """The peers of a move worker, cut off at call `at` (0 = the first): before the target gets it, or after (its
    answer lost). Every call after the cut also fails, as with a crashed source."""

    def __init__(self, peers: PeerClient, at: int, answer_lost: bool) -> None:
        self._peers = peers
        self._at = at
        self._answer_lost = answer_lost
        self.calls = 0

    async def _call(self, forward: Any) -> Any:
        self.calls += 1
        if self.calls - 1 < self._at:
            return await forward()
        if self._answer_lost and self.calls - 1 == self._at:
            await forward()
        raise PeerError(f"cut off at call {self._at}")

    async def adopt_partition_chunk(
        self, request: internal.AdoptPartitionChunkRequest, timeout_s: float
    ) -> internal.AdoptPartitionChunkResponse:
        return await self._call(lambda: self._peers.adopt_partition_chunk(request, timeout_s))  # type: ignore[no-any-return]

    async def adopt_partition(
        self, request: internal.AdoptPartitionRequest, timeout_s: float
    ) -> internal.AdoptPartitionResponse:
        return await self._call(lambda: self._peers.adopt_partition(request, timeout_s))  # type: ignore[no-any-return]


def cut_off_worker(node: InProcessNode, source: int, peers: Any) -> MoveWorker:
    return MoveWorker(node.node.shards[source], node.node.settings, node.clock, peers)


# A pass of a 5-batch move in chunks of 2 makes these calls: ask, chunk 0, ask, chunk 1, ask, chunk 2, ask, adopt,
# ask (adopted: the loans), then records the drop here.
@pytest.mark.parametrize("answer_lost", [False, True], ids=["before-the-target", "answer-lost"])
@pytest.mark.parametrize("at", [1, 3, 5, 7, 8])
def test_a_move_cut_off_at_any_call_finishes_after_a_restart(tmp_path: Path, at: int, answer_lost: bool) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=SETTINGS).start()
    try:
        broker, topic_id, source, target = moving_partition(node)
        before = positions(fetch_all_batches(node.stub, topic_id, 0)[0])
        started = move(node, topic_id, target)
        assert started.error_code == pb.NONE

        cut = CutOff(node.node.peers, at, answer_lost)
        first = run_pass(cut_off_worker(node, source, cut), node)
        assert len(first.failures) == 1 and cut.calls == at + 1
        assert first.adopted == (1 if at == 8 else 0) and first.dropped == 0
        adopted = at == 8 or (answer_lost and at == 7)
        expected = "frozen" if at == 1 and not answer_lost else "adopted" if adopted else "chunks sent"
        assert step_of(node, topic_id, started) == expected

        node.restart()  # the worker's state, if it kept any, is gone: the logs say where the move is
        broker = Broker(node.stub, node.coordinators)
        resumed = run_pass(supervised_worker(node, source), node)
        assert resumed.failures == []
        assert (resumed.adopted, resumed.dropped) == (0 if adopted else 1, 1)
        assert step_of(node, topic_id, started) == "moved out"
        assert_moved_intact(node, broker, topic_id, target, before)
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")


class Stuck:
    """Peers of a move worker with which the move cannot go on: chunks never reach the target, or the adoption does
    not (or reaches it with its answer lost). The abandon and the asks go through."""

    def __init__(self, peers: PeerClient, stuck: str) -> None:
        self._peers = peers
        self._stuck = stuck
        self.adoption: internal.AdoptPartitionRequest | None = None

    async def adopt_partition_chunk(
        self, request: internal.AdoptPartitionChunkRequest, timeout_s: float
    ) -> internal.AdoptPartitionChunkResponse:
        if request.index >= 0 and self._stuck == "chunks":
            raise PeerError("the target's leader is away")
        return await self._peers.adopt_partition_chunk(request, timeout_s)

    async def adopt_partition(
        self, request: internal.AdoptPartitionRequest, timeout_s: float
    ) -> internal.AdoptPartitionResponse:
        self.adoption = request
        if self._stuck == "adoption-answer-lost":
            await self._peers.adopt_partition(request, timeout_s)
        raise PeerError("the adoption is lost")

    async def abandon_adoption(
        self, request: internal.AbandonAdoptionRequest, timeout_s: float
    ) -> internal.AbandonAdoptionResponse:
        return await self._peers.abandon_adoption(request, timeout_s)


@pytest.mark.parametrize("stuck", ["chunks", "adoption", "adoption-answer-lost"])
def test_a_move_stuck_past_its_timeout_is_abandoned_at_the_target_then_cancelled_unless_adopted(
    tmp_path: Path, stuck: str
) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=SETTINGS).start()
    try:
        broker, topic_id, source, target = moving_partition(node)
        started = move(node, topic_id, target)
        peers = Stuck(node.node.peers, stuck)
        worker = cut_off_worker(node, source, peers)
        first = run_pass(worker, node)
        assert first.failures and (first.abandoned, first.cancelled) == (0, 0)

        node.advance(TIMEOUT_MS - 1)
        not_yet = run_pass(worker, node)
        if stuck == "adoption-answer-lost":  # the next ask finds it adopted: the move ends with its drop
            assert (not_yet.dropped, not_yet.abandoned) == (1, 0)
            assert step_of(node, topic_id, started) == "moved out"
            assert coordinator_of(node.stub, topic_id, 0) == target
            return
        assert (not_yet.abandoned, not_yet.cancelled) == (0, 0)
        node.advance(10_000)  # past the timeout and the step's backoff (at most retry.backoff.max.ms)
        last = run_pass(worker, node)
        assert (last.abandoned, last.cancelled) == (1, 1)
        assert step_of(node, topic_id, started) == "cancelled"
        assert coordinator_of(node.stub, topic_id, 0) == source
        resend = broker.commit([idempotent(topic_id, 8)]).batches[0]  # the source serves it again
        assert (resend.error_code, resend.is_duplicate) == (pb.NONE, True)
        if peers.adoption is not None:  # an adoption arriving late is refused: never two coordinators serving
            late = node.loop.run(node.node.peers.adopt_partition(peers.adoption, 10))
            assert late.error_code == pb.INVALID_REQUEST
            assert coordinator_of(node.stub, topic_id, 0) == source
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")


def test_the_move_partition_command_starts_the_move_and_waits_until_it_is_moved_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=4).start()
    try:
        broker, topic_id, source, target = moving_partition(node)
        before = positions(fetch_all_batches(node.stub, topic_id, 0)[0])
        command = ["move-partition", "--bootstrap", node.address, "--topic-id", topic_id.hex(), "--partition", "0"]
        with clock_running(node):
            assert main([*command, "--to", str(target), "--wait", "--json"]) == 0
        out, err = capsys.readouterr()
        printed = json.loads(out)
        assert (printed["from_coordinator"], printed["to_coordinator"], printed["step"]) == (
            source,
            target,
            "moved out",
        )
        assert "moved out" in err  # the steps, as they came, on stderr
        assert_moved_intact(node, broker, topic_id, target, before)
        # Again: the partition is the target's now; a move to where it is is refused (exit 2, the reason on stderr).
        assert main([*command, "--to", str(target)]) == 2
        assert "refused" in capsys.readouterr().err
    finally:
        node.stop()


class Forgetful:
    """Peers whose target, asked for a chunk once, answers as after a failover that lost its staged chunks: a gap."""

    def __init__(self, peers: PeerClient) -> None:
        self._peers = peers
        self.gaps = 0

    async def adopt_partition_chunk(
        self, request: internal.AdoptPartitionChunkRequest, timeout_s: float
    ) -> internal.AdoptPartitionChunkResponse:
        if request.index == 1 and not self.gaps:
            self.gaps += 1
            return internal.AdoptPartitionChunkResponse(
                error_code=pb.INVALID_REQUEST, error_message="chunk 1 after 0 staged", staged_chunks=0
            )
        return await self._peers.adopt_partition_chunk(request, timeout_s)

    async def adopt_partition(
        self, request: internal.AdoptPartitionRequest, timeout_s: float
    ) -> internal.AdoptPartitionResponse:
        return await self._peers.adopt_partition(request, timeout_s)


def test_a_gap_at_the_target_stops_the_pass_and_the_next_one_goes_on_from_where_the_target_is(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=SETTINGS).start()
    try:
        broker, topic_id, source, target = moving_partition(node)
        before = positions(fetch_all_batches(node.stub, topic_id, 0)[0])
        started = move(node, topic_id, target)
        peers = Forgetful(node.node.peers)
        worker = cut_off_worker(node, source, peers)
        first = run_pass(worker, node)
        assert peers.gaps == 1 and len(first.failures) == 1 and "not 1" in first.failures[0]
        assert (first.chunks_sent, first.dropped) == (1, 0)  # the pass stopped at the gap: no spinning
        node.advance(10_000)  # past the backoff
        second = run_pass(worker, node)
        assert (second.chunks_sent, second.adopted, second.dropped, second.failures) == (2, 1, 1, [])
        assert step_of(node, topic_id, started) == "moved out"
        assert_moved_intact(node, broker, topic_id, target, before)
    finally:
        node.stop()


def source_holds(node: InProcessNode, coordinator_id: int) -> tuple[int, int]:
    """(batches awaiting the purge, live batches its files count) at a coordinator."""
    with node.node.shards[coordinator_id].read_transaction() as db:
        awaiting = int(db.execute("SELECT count(*) FROM partitions_awaiting_purge").fetchone()[0])
        live = int(db.execute("SELECT coalesce(sum(live_batches), 0) FROM files").fetchone()[0])
    return awaiting, live


def test_the_drop_wakes_the_sources_purge_and_its_files_stop_counting_the_moved_batches(tmp_path: Path) -> None:
    """The drop sets the moved batches aside for the purge's passes (design §5a); the purge must start by itself, as
    after a topic deletion, or the source's WAL files count them live (and are kept) until its next load."""
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=SETTINGS).start()
    try:
        _, topic_id, source, target = moving_partition(node)
        node.run_purge_passes(2)  # each purger's first look, at its start, is over: it waits to be woken
        _, live_before = source_holds(node, source)
        assert live_before == 5  # partition 0's batches; partition 1's live on its own coordinator
        assert move(node, topic_id, target).error_code == pb.NONE
        done = run_pass(supervised_worker(node, source), node)
        assert (done.adopted, done.dropped, done.failures) == (1, 1, [])
        assert source_holds(node, source) == (1, 5)  # set aside, still counted: the purge removes them

        node.run_purge_passes(2)
        assert source_holds(node, source) == (0, 0)
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")
