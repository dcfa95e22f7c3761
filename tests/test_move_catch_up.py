"""A partition move's catch-up end to end through the node's real interfaces (design §5a): MovePartition starts it,
the source's move worker copies the committed batches while a broker's commits to the partition go on and are
acknowledged, freezes once at most diskless.partition.move.freeze.tail.batches are left (commits then answer
NOT_COORDINATOR), copies the tail, and the target serves every acknowledged batch at the offset and position the
source gave it; the producer goes on there. Commits as fast as the copy end in the freeze all the same
(diskless.partition.move.catch.up.rounds). A worker cut off during the catch-up or after the freeze, the node
restarted, finishes the move from both logs."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from coordinator.client.routing_client import RoutingClient
from coordinator.cluster.peers import PeerClient
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from tests.harness import Broker, assert_state_equals_log_rebuild, fetch_all_batches
from tests.in_process import InProcessNode
from tests.test_move_partition import (
    SETTINGS,
    CutOff,
    assert_moved_intact,
    cut_off_worker,
    idempotent,
    move,
    moving_partition,
    positions,
    run_pass,
    step_of,
    supervised_worker,
)

BATCHES = 9  # at the start; chunks of 2 (SETTINGS)
TAIL = 2
CATCH_UP = {**SETTINGS, "diskless.partition.move.freeze.tail.batches": str(TAIL)}


ROUTED_DEADLINE_MS = 20_000


async def routed_commit(address: str, sent: pb.CommitFileRequest.Batch, owners: list[int]) -> pb.CommitFileResponse:
    async with RoutingClient(address, deadline_ms=ROUTED_DEADLINE_MS) as client:
        request = pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=sent.byte_offset + sent.size,
            uploader_broker_id=1, owner_ids=owners, batches=[sent],
        )  # fmt: skip
        return await client.commit_file(request)


class CommitsDuringTheCopy:
    """A move worker's peers that let a broker commit to the moving partition after each of the first `commits`
    chunks (or after every chunk, with None), as commits arrive while the worker copies; before the adoption they
    read the partition at the source (frozen by then) and commit once more."""

    def __init__(self, peers: PeerClient, broker: Broker, topic_id: bytes, sequence: int, commits: int | None) -> None:
        self._peers = peers
        self._broker = broker
        self._topic_id = topic_id
        self._commits = commits
        self.sequence = sequence  # the producer's next sequence
        self.answers: list[tuple[int, int]] = []  # (error code, assigned base offset) of each commit
        self.before_adoption: list[Any] = []

    def _commit(self) -> None:
        answer = self._broker.commit([idempotent(self._topic_id, self.sequence)]).batches[0]
        self.answers.append((answer.error_code, answer.assigned_base_offset))
        if answer.error_code == pb.NONE:
            self.sequence += 2

    async def adopt_partition_chunk(
        self, request: internal.AdoptPartitionChunkRequest, timeout_s: float
    ) -> internal.AdoptPartitionChunkResponse:
        answer = await self._peers.adopt_partition_chunk(request, timeout_s)
        if request.index >= 0 and (self._commits is None or len(self.answers) < self._commits):
            await asyncio.to_thread(self._commit)  # the node's loop answers it meanwhile
        return answer

    async def adopt_partition(
        self, request: internal.AdoptPartitionRequest, timeout_s: float
    ) -> internal.AdoptPartitionResponse:
        batches = (await asyncio.to_thread(fetch_all_batches, self._broker.stub, self._topic_id, 0))[0]
        self.before_adoption = positions(batches)
        await asyncio.to_thread(self._commit)
        return await self._peers.adopt_partition(request, timeout_s)

    async def abandon_adoption(
        self, request: internal.AbandonAdoptionRequest, timeout_s: float
    ) -> internal.AbandonAdoptionResponse:
        return await self._peers.abandon_adoption(request, timeout_s)


def test_commits_acknowledged_during_the_catch_up_are_at_the_target_at_their_offsets(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=CATCH_UP).start()
    try:
        broker, topic_id, source, target = moving_partition(node, BATCHES)
        started = move(node, topic_id, target)
        assert step_of(node, topic_id, started) == "catching up"
        peers = CommitsDuringTheCopy(node.node.peers, broker, topic_id, 2 * BATCHES, commits=3)
        done = run_pass(cut_off_worker(node, source, peers), node)
        assert (done.frozen, done.adopted, done.dropped, done.failures) == (1, 1, 1, [])
        # Three commits while chunks went (9 + 3 batches, 2 a chunk, frozen with at most 2 left), one after the freeze.
        assert done.chunks_sent == 6
        assert peers.answers[:3] == [(pb.NONE, 2 * BATCHES + 2 * i) for i in range(3)]
        assert peers.answers[3][0] == pb.NOT_COORDINATOR  # frozen: the broker finds the coordinator again
        acknowledged = {offset for code, offset in peers.answers if code == pb.NONE}
        assert acknowledged <= {p[3] for p in peers.before_adoption} and len(peers.before_adoption) == BATCHES + 3
        assert step_of(node, topic_id, started) == "moved out"
        assert_moved_intact(node, broker, topic_id, target, peers.before_adoption)
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")


def test_commits_as_fast_as_the_copy_are_frozen_after_the_catch_up_rounds(tmp_path: Path) -> None:
    settings = {
        **SETTINGS,
        "diskless.partition.move.chunk.batches": "1",
        "diskless.partition.move.freeze.tail.batches": "0",
        "diskless.partition.move.catch.up.rounds": "3",
    }
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=settings).start()
    try:
        broker, topic_id, source, target = moving_partition(node, 4)
        started = move(node, topic_id, target)
        peers = CommitsDuringTheCopy(node.node.peers, broker, topic_id, 8, commits=None)  # one per chunk, for ever
        done = run_pass(cut_off_worker(node, source, peers), node)
        assert (done.frozen, done.adopted, done.dropped, done.failures) == (1, 1, 1, [])
        codes = [code for code, _ in peers.answers]
        # One batch out, one in per chunk: the batches left stay 4, so the fourth look (three chunks without a new
        # fewest) freezes; the commits after every later chunk are refused.
        assert codes[:3] == [pb.NONE] * 3 and codes[3:] and set(codes[3:]) == {pb.NOT_COORDINATOR}
        assert step_of(node, topic_id, started) == "moved out"
        assert_moved_intact(node, broker, topic_id, target, peers.before_adoption)
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")


# A pass of the 9-batch move (tail 2, chunks of 2) makes these calls: ask, chunk 0, ask, chunk 1, ask, chunk 2, ask,
# chunk 3, ask (1 left: the freeze), chunk 4, ask, adopt, ask, then the drop.
@pytest.mark.parametrize(("at", "step"), [(3, "catching up"), (9, "chunks sent")])
def test_a_move_cut_off_during_the_catch_up_or_after_the_freeze_finishes_after_a_restart(
    tmp_path: Path, at: int, step: str
) -> None:
    frozen = step != "catching up"  # "chunks sent": frozen, the tail on its way
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=CATCH_UP).start()
    try:
        broker, topic_id, source, target = moving_partition(node, BATCHES)
        started = move(node, topic_id, target)
        cut = CutOff(node.node.peers, at, answer_lost=False)
        first = run_pass(cut_off_worker(node, source, cut), node)
        assert len(first.failures) == 1 and first.frozen == int(frozen)
        assert step_of(node, topic_id, started) == step
        expected = pb.NOT_COORDINATOR if frozen else pb.NONE
        assert broker.commit([idempotent(topic_id, 2 * BATCHES)]).batches[0].error_code == expected

        node.restart()  # the worker's state is gone: both logs say where the move is, the freeze included
        broker = Broker(node.stub, node.coordinators)
        assert step_of(node, topic_id, started) == step
        assert broker.commit([idempotent(topic_id, 2 * BATCHES + 2)]).batches[0].error_code == expected
        before = positions(fetch_all_batches(node.stub, topic_id, 0)[0])
        resumed = run_pass(supervised_worker(node, source), node)
        assert (resumed.frozen, resumed.adopted, resumed.dropped, resumed.failures) == (
            int(not frozen), 1, 1, []
        )  # fmt: skip
        assert step_of(node, topic_id, started) == "moved out"
        assert_moved_intact(node, broker, topic_id, target, before)
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")


def test_a_commit_whose_file_names_the_source_after_the_cut_over_answers_not_coordinator(tmp_path: Path) -> None:
    """A broker's CommitFile retried after the move, its WAL file naming the owners of before (the source), is
    refused retriably per batch for the moved partition (the broker finds the coordinator again and commits it in a
    file naming the target) and, as before, INVALID_REQUEST for a partition the coordinator does not serve; nothing
    of it is written."""
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=CATCH_UP).start()
    try:
        broker, topic_id, source, target = moving_partition(node, 3)
        move(node, topic_id, target)
        assert run_pass(supervised_worker(node, source), node).dropped == 1
        high = fetch_all_batches(node.stub, topic_id, 0)[2]
        stale = broker.commit([idempotent(topic_id, 6)], owner_ids=[source]).batches
        assert [b.error_code for b in stale] == [pb.NOT_COORDINATOR]
        assert "find the coordinator again" in stale[0].error_message
        assert fetch_all_batches(node.stub, topic_id, 0)[2] == high  # nothing written
        # The routing client (a broker's) gives that answer back at once: only a new file naming the coordinator can
        # commit it, so retrying the same one until the deadline would only make the producer wait.
        started = time.monotonic()
        routed = node.loop.run(routed_commit(node.address, idempotent(topic_id, 6), [source]))
        assert [b.error_code for b in routed.batches] == [pb.NOT_COORDINATOR]
        assert time.monotonic() - started < ROUTED_DEADLINE_MS / 2000
        renamed = broker.commit([idempotent(topic_id, 6)]).batches  # a file naming the coordinators of now
        assert [(b.error_code, b.assigned_base_offset) for b in renamed] == [(pb.NONE, high)]
    finally:
        node.stop()
    assert_state_equals_log_rebuild(tmp_path / "data", 4, tmp_path / "rebuild")
