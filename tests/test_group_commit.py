"""Group commit: concurrent commits to one coordinator share fsyncs of its metadata log (DESIGN §3 step 3)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, batch, describe_coordinators, fetch_all_batches, laid_out

PARTITIONS = 8


@pytest.fixture
def one_coordinator(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh node with a single coordinator: every commit goes through one pipeline and one log."""
    process = ServerProcess(tmp_path / "data", coordinators=1).start()
    yield process
    if process.process is not None and process.process.poll() is None:
        assert process.stop() == 0, "".join(process.output)


def commit_request(topic_id: bytes, key: str, first_partition: int) -> pb.CommitFileRequest:
    batches = laid_out([batch(topic_id, (first_partition + i) % PARTITIONS, records=1 + i) for i in range(3)])
    return pb.CommitFileRequest(
        object_key=key,
        object_format=1,
        file_size=sum(b.size for b in batches),
        uploader_broker_id=1,
        owner_ids=[0],
        batches=batches,
    )


def flushes_and_appends(server: ServerProcess) -> tuple[int, int]:
    description = describe_coordinators(server.stub)[0]
    return description.log_flush_count, description.log_append_count


def assert_acknowledged_offsets_are_contiguous(server: ServerProcess, topic_id: bytes, commits: int) -> None:
    found = 0
    for partition in range(PARTITIONS):
        batches, _, high_watermark = fetch_all_batches(server.stub, topic_id, partition)
        expected = 0
        for info in batches:
            assert info.base_offset == expected, f"partition {partition}: {info.base_offset} after {expected}"
            expected = info.last_offset + 1
        assert expected == high_watermark
        found += len(batches)
    assert found == 3 * commits


def test_concurrent_commits_to_one_coordinator_share_fsyncs(one_coordinator: ServerProcess) -> None:
    committers, commits_each = 32, 25
    topic_id = Broker(one_coordinator.stub, 1).create_topic("group-commit", PARTITIONS)
    flushes_before, appends_before = flushes_and_appends(one_coordinator)
    start = threading.Barrier(committers)
    failures: list[str] = []
    acknowledged = [0] * committers

    def committer(index: int) -> None:
        channel = grpc.insecure_channel(one_coordinator.address)
        try:
            stub = pb_grpc.DisklessCoordinatorStub(channel)
            start.wait()
            for n in range(commits_each):
                response = stub.CommitFile(commit_request(topic_id, f"wal/{index}/{n}", index + n), timeout=60)
                codes = [b.error_code for b in response.batches]
                if codes != [pb.NONE] * 3:
                    failures.append(f"committer {index} commit {n}: {codes}")
                    return
                acknowledged[index] += 1
        except Exception as error:  # reported below, with every other committer's outcome
            failures.append(f"committer {index}: {error!r}")
        finally:
            channel.close()

    threads = [threading.Thread(target=committer, args=(i,)) for i in range(committers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    commits = committers * commits_each
    assert sum(acknowledged) == commits, "every commit must be acknowledged"

    flushes_after, appends_after = flushes_and_appends(one_coordinator)
    flushes, appends = flushes_after - flushes_before, appends_after - appends_before
    assert appends == commits, f"{appends} operations appended for {commits} commits"
    per_commit = flushes / commits
    print(f"\ngroup commit: {commits} concurrent commits, {flushes} fsyncs, {per_commit:.3f} fsyncs per commit")
    assert per_commit < 0.5, f"{flushes} fsyncs for {commits} concurrent commits: group commit does not group"
    assert_acknowledged_offsets_are_contiguous(one_coordinator, topic_id, commits)


def test_sequential_commits_take_about_one_fsync_each(one_coordinator: ServerProcess) -> None:
    """The measure is real: with nothing to group, every commit pays its own fsync."""
    commits = 100
    topic_id = Broker(one_coordinator.stub, 1).create_topic("one-at-a-time", PARTITIONS)
    flushes_before, appends_before = flushes_and_appends(one_coordinator)
    for n in range(commits):
        response = one_coordinator.stub.CommitFile(commit_request(topic_id, f"wal/seq/{n}", n), timeout=30)
        assert [b.error_code for b in response.batches] == [pb.NONE] * 3, response
    flushes_after, appends_after = flushes_and_appends(one_coordinator)
    flushes, appends = flushes_after - flushes_before, appends_after - appends_before
    assert appends == commits
    per_commit = flushes / commits
    print(f"\nsequential: {commits} commits, {flushes} fsyncs, {per_commit:.3f} fsyncs per commit")
    assert 0.95 <= per_commit <= 1.05, f"{flushes} fsyncs for {commits} sequential commits"
    assert_acknowledged_offsets_are_contiguous(one_coordinator, topic_id, commits)
