"""A partition moved between coordinators of a running `diskless serve` under steady commits (design §5a; issue #39
item 3), with the operator's command: `diskless move-partition --wait` while a producer commits through the routing
client, each WAL file holding a batch of the moving partition and one of another partition. Nothing acknowledged is
lost or at another offset, FindBatches at the target answers the offsets and positions each commit was acknowledged
with, a resend of a batch acknowledged before the move is a duplicate after it, and the other partition never
stopped."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from coordinator.client.routing_client import RoutingClient
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from tests.cluster_harness import wait_for
from tests.harness import REPO, Broker, ServerProcess, batch, coordinator_of, fetch_all_batches, topic_name

PRODUCERS = {0: 8101, 1: 8102}  # partition -> its idempotent producer
LONE_PRODUCER = 8103
SIZE = 100
SETTINGS = {
    "diskless.partition.move.chunk.batches": "25",  # a move of many chunks
    "diskless.partition.move.interval.ms": "100",
}


def commit_request(topic_id: bytes, sequence: int, owners: list[int]) -> tuple[str, pb.CommitFileRequest]:
    """One WAL file with a 2-record batch of each partition, partition 0's at position 0, partition 1's after it."""
    key = f"wal/{uuid.uuid4()}"
    batches = [
        batch(topic_id, p, 2, producer_id=pid, epoch=0, sequence=sequence, byte_offset=p * SIZE, size=SIZE)
        for p, pid in PRODUCERS.items()
    ]
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=2 * SIZE, uploader_broker_id=1, owner_ids=owners, batches=batches
    )
    return key, request


async def produce_during(
    address: str, topic_id: bytes, owners_now: Callable[[], list[int]], command: list[str], sequence: int
) -> tuple[dict[int, dict[int, tuple[str, int]]], float, str]:
    """Commits one file after another until the command ended and a few more after it; for each partition, sequence ->
    (object key, acknowledged offset); the longest a commit waited (s); the command's stdout."""
    acknowledged: dict[int, dict[int, tuple[str, int]]] = {p: {} for p in PRODUCERS}
    longest = 0.0
    process = await asyncio.create_subprocess_exec(
        *command, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    waited = asyncio.ensure_future(process.communicate())
    after = 0
    owners = owners_now()
    rewritten = [0]
    async with RoutingClient(address, deadline_ms=60_000) as client:
        while after < 20:
            for _ in range(5):  # a file refused whole for its owners is written again, as a broker would
                key, request = commit_request(topic_id, sequence, owners)
                started = time.monotonic()
                response = await client.commit_file(request)
                longest = max(longest, time.monotonic() - started)
                for answer, sent in zip(response.batches, request.batches, strict=True):
                    if answer.error_code == pb.NONE:
                        earlier = acknowledged[sent.partition].get(sequence)
                        assert answer.is_duplicate == (earlier is not None), answer
                        if earlier is None:
                            acknowledged[sent.partition][sequence] = (key, answer.assigned_base_offset)
                        else:  # acknowledged in the file before: the retry answers its offset
                            assert answer.assigned_base_offset == earlier[1]
                if all(answer.error_code == pb.NONE for answer in response.batches):
                    break
                # The freeze's NOT_COORDINATOR is the client's to retry; what reaches here is a file whose owners no
                # longer name the partition's coordinator (it moved while the file was on its way): unacknowledged.
                assert all(
                    a.error_code == pb.NONE or "do not name coordinator" in a.error_message for a in response.batches
                ), response
                owners = owners_now()
                rewritten[0] += 1
            else:
                raise AssertionError(f"sequence {sequence} not committed: {response}")
            sequence += 2
            if waited.done():
                after += 1
            await asyncio.sleep(0.005)
    out, err = await waited
    assert process.returncode == 0, err.decode()
    assert b"moved out" in err  # --wait's progress, step by step
    print(f"\n{sequence // 2} files committed, {rewritten[0]} written again for their owners", end="")
    return acknowledged, longest, out.decode()


@pytest.mark.slow
def test_a_partition_moves_under_steady_commits_and_nothing_acknowledged_changes(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", coordinators=4, settings=SETTINGS).start()
    try:
        broker = Broker(server.stub, 4)
        topic_id = broker.create_topic(topic_name("moving"), 2)
        source, other = coordinator_of(server.stub, topic_id, 0), coordinator_of(server.stub, topic_id, 1)
        target = next(c for c in range(4) if c not in (source, other))
        # A backlog before the move: it goes in several chunks.
        backlog = 150
        for sequence in range(0, 2 * backlog, 2):
            _, request = commit_request(topic_id, sequence, [source, other])
            assert all(b.error_code == pb.NONE for b in server.stub.CommitFile(request, timeout=30).batches)
        # Another producer of partition 0 commits once, acknowledged by the source; it resends after the move.
        lone = pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=SIZE, uploader_broker_id=1,
            owner_ids=[source],
            batches=[batch(topic_id, 0, 2, producer_id=LONE_PRODUCER, epoch=0, sequence=0, size=SIZE)],
        )  # fmt: skip
        first = server.stub.CommitFile(lone, timeout=30).batches[0]
        assert first.error_code == pb.NONE
        before, _, _ = fetch_all_batches(server.stub, topic_id, 0)
        assert len(before) == backlog + 1

        command = [
            sys.executable, "-m", "coordinator", "move-partition", "--bootstrap", server.address, "--topic-id",
            topic_id.hex(), "--partition", "0", "--to", str(target), "--wait", "--json", "--timeout-s", "120",
        ]  # fmt: skip

        def owners_now() -> list[int]:  # what FindCoordinator names now, as a broker asks before it uploads a file
            return sorted({coordinator_of(server.stub, topic_id, p) for p in PRODUCERS})

        acknowledged, longest, out = asyncio.run(
            produce_during(server.address, topic_id, owners_now, command, 2 * backlog)
        )
        printed = json.loads(out)
        assert (printed["from_coordinator"], printed["to_coordinator"], printed["step"]) == (
            source,
            target,
            "moved out",
        )
        assert coordinator_of(server.stub, topic_id, 0) == target
        print(f"\nlongest commit wait during the move: {longest * 1000:.0f} ms (loaded machine)")

        # Every batch where it was acknowledged, at the target, with the positions it was committed with.
        batches, _, high_watermark = fetch_all_batches(server.stub, topic_id, 0)
        kept = len(before)
        assert [(b.object_key, b.byte_offset, b.base_offset, b.producer_id) for b in batches[:kept]] == [
            (b.object_key, b.byte_offset, b.base_offset, b.producer_id) for b in before
        ]
        found = {b.base_offset: (b.object_key, b.byte_offset, b.producer_id) for b in batches}
        for key, offset in acknowledged[0].values():
            assert found[offset] == (key, 0, PRODUCERS[0])
        assert len(batches) == kept + len(acknowledged[0])
        assert high_watermark == 2 * len(batches)
        # The other partition: every batch acknowledged, where it was acknowledged.
        others, _, _ = fetch_all_batches(server.stub, topic_id, 1)
        found_others = {b.base_offset: b.object_key for b in others}
        assert all(found_others[offset] == key for key, offset in acknowledged[1].values())

        # A resend of the batch the source acknowledged before the move (a new file, naming the target as a broker's
        # retry would) is a duplicate at the target, at the same offset.
        resend = pb.CommitFileRequest()
        resend.CopyFrom(lone)
        resend.object_key, resend.owner_ids[:] = f"wal/{uuid.uuid4()}", [target]
        again = server.stub.CommitFile(resend, timeout=30).batches[0]
        assert (again.error_code, again.is_duplicate, again.assigned_base_offset) == (
            pb.NONE, True, first.assigned_base_offset
        )  # fmt: skip
    finally:
        assert server.stop() == 0, "".join(server.output)


@pytest.mark.slow
def test_a_partition_moves_on_a_node_spread_over_commit_processes(tmp_path: Path) -> None:
    """`diskless serve` with its coordinators in two commit processes: MovePartition and DescribePartitionMove sent to
    the node's first process (which leads none) are passed on to the leading process; the data is at the target."""
    settings = {**SETTINGS, "diskless.node.processes": "2"}
    server = ServerProcess(tmp_path / "data", coordinators=4, settings=settings).start()
    try:
        broker = Broker(server.stub, 4)
        topic_id = broker.create_topic(topic_name("moving"), 2)
        source, other = coordinator_of(server.stub, topic_id, 0), coordinator_of(server.stub, topic_id, 1)
        target = next(c for c in range(4) if c not in (source, other))
        for sequence in range(0, 60, 2):
            _, request = commit_request(topic_id, sequence, [source, other])
            assert all(b.error_code == pb.NONE for b in server.stub.CommitFile(request, timeout=30).batches)
        before, _, _ = fetch_all_batches(server.stub, topic_id, 0)
        assert len(before) == 30

        command = [
            sys.executable, "-m", "coordinator", "move-partition", "--bootstrap", server.address, "--topic-id",
            topic_id.hex(), "--partition", "0", "--to", str(target), "--wait", "--json", "--timeout-s", "120",
        ]  # fmt: skip
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        printed = json.loads(done.stdout)
        assert (printed["from_coordinator"], printed["to_coordinator"], printed["step"]) == (
            source,
            target,
            "moved out",
        )

        # The admin calls at the node's listen address, as an operator names it: the first process passes them on.
        admin_stub = admin_pb2_grpc.CoordinatorAdminStub(grpc.insecure_channel(server.address))
        described = admin_stub.DescribePartitionMove(
            admin.DescribePartitionMoveRequest(
                topic_id=topic_id, partition=0, from_coordinator_id=source, move_id=printed["move_id"]
            ),
            timeout=30,
        )
        assert (described.error_code, described.step) == (pb.NONE, "moved out"), described
        back = admin.MovePartitionRequest(topic_id=topic_id, partition=1, to_coordinator_id=source)
        started = admin_stub.MovePartition(back, timeout=30)
        assert (started.error_code, started.from_coordinator_id) == (pb.NONE, other), started
        asked = admin.DescribePartitionMoveRequest(
            topic_id=topic_id, partition=1, from_coordinator_id=other, move_id=started.move_id
        )
        wait_for(
            "partition 1 moved out",
            lambda: admin_stub.DescribePartitionMove(asked, timeout=30).step == "moved out" or None,
            timeout_s=120,
        )
        # The first process holds the catalog: it reads the cut-over from the commit processes' logs soon after.
        started_s = time.monotonic()
        wait_for(
            "the node names the new coordinator", lambda: coordinator_of(server.stub, topic_id, 1) == source or None
        )
        print(f"\nthe first process named the new coordinator {time.monotonic() - started_s:.2f} s after moved out")
        assert coordinator_of(server.stub, topic_id, 0) == target

        # The first process reads FindBatches from the state files, its routes cached up to ROUTE_CACHE_S (5 s).
        after, _, _ = wait_for("the target's batches read", lambda: fetch_all_batches(server.stub, topic_id, 0))
        assert [(b.object_key, b.byte_offset, b.base_offset) for b in after] == [
            (b.object_key, b.byte_offset, b.base_offset) for b in before
        ]
        _, request = commit_request(topic_id, 60, sorted({target, source}))
        committed = server.stub.CommitFile(request, timeout=30).batches
        assert [b.error_code for b in committed] == [pb.NONE, pb.NONE], [b.error_message for b in committed]
        assert committed[0].assigned_base_offset == 60  # 30 batches of 2 records moved: the target goes on after them
    finally:
        assert server.stop() == 0, "".join(server.output)


@pytest.mark.slow
def test_a_move_nobody_polls_reaches_the_first_process_and_brokers_find_the_target(tmp_path: Path) -> None:
    """On a node spread over commit processes the cut-over happens in the target's process; the first process, which
    answers FindCoordinator, must learn it by itself (the commit process tells it), not only when someone asks
    DescribePartitionMove: else a broker is sent to the source for ever and its files are refused."""
    settings = {**SETTINGS, "diskless.node.processes": "2"}
    server = ServerProcess(tmp_path / "data", coordinators=4, settings=settings).start()
    try:
        topic_id = Broker(server.stub, 4).create_topic(topic_name("unpolled"), 2)
        source, other = coordinator_of(server.stub, topic_id, 0), coordinator_of(server.stub, topic_id, 1)
        # A target led by the other commit process (coordinator c by process c % 2): the cut-over is then in a
        # process that did not take the partition's earlier files.
        target = next(c for c in range(4) if c not in (source, other) and c % 2 != source % 2)
        for sequence in range(0, 10, 2):  # passed on by the first process, which learns partition 0 is the source's
            _, request = commit_request(topic_id, sequence, [source, other])
            assert all(b.error_code == pb.NONE for b in server.stub.CommitFile(request, timeout=30).batches)
        admin_stub = admin_pb2_grpc.CoordinatorAdminStub(grpc.insecure_channel(server.address))
        move = admin.MovePartitionRequest(topic_id=topic_id, partition=0, to_coordinator_id=target)
        started = admin_stub.MovePartition(move, timeout=30)
        assert started.error_code == pb.NONE, started

        # Nobody polls the move and no broker commits meanwhile: the first process learns the cut-over by itself.
        wait_for(
            "FindCoordinator naming the target",
            lambda: coordinator_of(server.stub, topic_id, 0) == target or None,
            timeout_s=30,
        )
        # The broker's next file names the owners FindCoordinator names now, and is committed at the first try: the
        # first process passes partition 0's batch on to the target, not to the source it sent the earlier files to
        # (which would refuse a file not naming it, INVALID_REQUEST, and the broker would never get through).
        owners = sorted({target, coordinator_of(server.stub, topic_id, 1)})
        _, request = commit_request(topic_id, 10, owners)
        answers = server.stub.CommitFile(request, timeout=30).batches
        assert [b.error_code for b in answers] == [pb.NONE, pb.NONE], answers
        assert coordinator_of(server.stub, topic_id, 0) == target
    finally:
        assert server.stop() == 0, "".join(server.output)
