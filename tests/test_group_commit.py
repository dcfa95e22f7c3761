"""Group commit: concurrent commits to one coordinator share fsyncs of its metadata log (DESIGN §3 step 3)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, batch, describe_coordinators, fetch_all_batches, laid_out, new_topic_id

pytestmark = pytest.mark.slow

PARTITIONS = 8


# A stalled operation shows up as REQUEST_TIMED_OUT within seconds rather than 30.
BASE_SETTINGS = {"diskless.coordinator.request.timeout.ms": "5000"}


def start_one_coordinator(data_dir: Path, linger_ms: int) -> ServerProcess:
    """A fresh node with a single coordinator: every commit goes through one pipeline and one log."""
    settings = dict(BASE_SETTINGS, **{"diskless.coordinator.append.linger.ms": str(linger_ms)})
    return ServerProcess(data_dir, coordinators=1, settings=settings).start()


@pytest.fixture
def one_coordinator(tmp_path: Path) -> Iterator[ServerProcess]:
    process = start_one_coordinator(tmp_path / "data", linger_ms=0)
    yield process
    if process.process is not None and process.process.poll() is None:
        assert process.stop() == 0, "".join(process.output)


def create_topic(server: ServerProcess, name: str) -> bytes:
    topic_id = new_topic_id()
    response = server.stub.CreatePartitions(
        pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=PARTITIONS)]
        ),
        timeout=60,
    )
    result = response.topics[0]
    assert result.error_code == pb.NONE, (
        f"CreatePartitions on an idle node answered {pb.ErrorCode.Name(result.error_code)}: {result.error_message}"
    )
    return topic_id


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


def run_concurrent_committers(server: ServerProcess, topic_id: bytes, committers: int, commits_each: int) -> None:
    """`committers` threads, each with its own channel, each committing `commits_each` files one after another."""
    start = threading.Barrier(committers)
    failures: list[str] = []
    acknowledged = [0] * committers

    def committer(index: int) -> None:
        channel = grpc.insecure_channel(server.address)
        try:
            stub = pb_grpc.DisklessCoordinatorStub(channel)
            start.wait()
            for n in range(commits_each):
                response = stub.CommitFile(commit_request(topic_id, f"wal/{index}/{n}", index + n), timeout=60)
                codes = [pb.ErrorCode.Name(b.error_code) for b in response.batches]
                if codes != ["NONE"] * 3:
                    failures.append(f"committer {index} commit {n}: {codes} {response.batches[0].error_message}")
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
    assert not failures, failures[:5]
    assert sum(acknowledged) == committers * commits_each, "every commit must be acknowledged"


# (append linger in ms, the most fsyncs per commit allowed). Without linger a group holds only what
# arrives while the previous write is in flight; on a disk whose fdatasync takes ~0.1 ms (this test
# machine) that is little: 0.2 to 0.77 fsyncs per commit were seen with 32 committers, depending on
# the machine's load. A linger of 2 ms lets a group fill: 0.1 to 0.2 were seen.
GROUPING = [(0, 0.9), (2, 0.5)]


@pytest.mark.parametrize(("linger_ms", "most_per_commit"), GROUPING, ids=[f"linger-{g[0]}ms" for g in GROUPING])
def test_concurrent_commits_to_one_coordinator_share_fsyncs(
    tmp_path: Path, linger_ms: int, most_per_commit: float
) -> None:
    committers, commits_each = 32, 25
    server = start_one_coordinator(tmp_path / "data", linger_ms)
    try:
        topic_id = create_topic(server, "group-commit")
        flushes_before, appends_before = flushes_and_appends(server)
        run_concurrent_committers(server, topic_id, committers, commits_each)
        commits = committers * commits_each
        flushes_after, appends_after = flushes_and_appends(server)
        flushes, appends = flushes_after - flushes_before, appends_after - appends_before
        assert appends == commits, f"{appends} operations appended for {commits} commits"
        per_commit = flushes / commits
        print(
            f"\ngroup commit, linger {linger_ms} ms: {commits} concurrent commits, {flushes} fsyncs, "
            f"{per_commit:.3f} fsyncs per commit"
        )
        assert per_commit < most_per_commit, (
            f"{flushes} fsyncs for {commits} concurrent commits ({per_commit:.3f} per commit, linger {linger_ms} ms)"
        )
        assert_acknowledged_offsets_are_contiguous(server, topic_id, commits)
        assert server.stop() == 0
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()


def test_sequential_commits_take_about_one_fsync_each(one_coordinator: ServerProcess) -> None:
    """The measure is real: with nothing to group, every commit pays its own fsync."""
    commits = 100
    topic_id = create_topic(one_coordinator, "one-at-a-time")
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


def test_without_pipelining_every_commit_pays_its_own_fsync(tmp_path: Path) -> None:
    """The sequential baseline: pipelining off means one operation per write, even under concurrency."""
    server = ServerProcess(
        tmp_path / "data", coordinators=1, settings={"diskless.coordinator.pipeline.enable": "false"}
    ).start()
    try:
        broker = Broker(server.stub, 1)
        topic = broker.create_topic("sequential", 4)
        before = server.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators[0]
        with ThreadPoolExecutor(max_workers=16) as pool:
            responses = list(pool.map(lambda i: broker.commit(laid_out([batch(topic, i % 4)])), range(160)))
        assert all(r.batches[0].error_code == pb.NONE for r in responses)
        after = server.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators[0]
        assert after.log_flush_count - before.log_flush_count == 160
    finally:
        assert server.stop() == 0


def test_a_lone_committer_is_not_held_by_the_linger(tmp_path: Path) -> None:
    """With nobody else committing there is nothing to group: each commit is written at once.

    The linger here is the longest allowed (1 s); a lone committer's commits would each take a
    second if they waited for it. Concurrent committers do wait for it (the test above).
    """
    server = start_one_coordinator(tmp_path / "data", linger_ms=1000)
    try:
        topic_id = create_topic(server, "lone-committer")
        flushes_before, _ = flushes_and_appends(server)
        commits = 5
        started = time.monotonic()
        for number in range(commits):
            response = server.stub.CommitFile(commit_request(topic_id, f"wal/lone/{number}", number), timeout=30)
            assert all(b.error_code == pb.NONE for b in response.batches), response
        elapsed_s = time.monotonic() - started
        flushes_after, _ = flushes_and_appends(server)
        assert flushes_after - flushes_before == commits, "each lone commit is its own group"
        assert elapsed_s < commits * 1.0 / 2, f"{commits} lone commits took {elapsed_s:.2f} s with a 1 s linger"
        assert server.stop() == 0
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()


def replace_request(topic_id: bytes, partition: int, sizes: list[int], key: str) -> pb.ReplaceBatchesRequest:
    """The partition's batches (one record each: offsets 0.., `sizes` bytes each) moved into one new object."""
    request = pb.ReplaceBatchesRequest(
        object_key=key, object_format=1, file_size=sum(sizes), uploader_broker_id=9, owner_ids=[0]
    )
    request.extents.add(
        topic_id=topic_id, partition=partition, base_offset=0, last_offset=len(sizes) - 1, byte_offset=0,
        size=sum(sizes),
    )  # fmt: skip
    return request


def test_concurrent_replace_batches_calls_share_a_group_commit_and_a_lone_one_is_not_held(tmp_path: Path) -> None:
    """A merge job sends the calls whose runs share source files together (spark/consolidation_tasks.py
    `replace_groups`): while others are under way, a call's part waits for the append tick, as a commit's does, so
    that one SQLite transaction writes the files' rows once. Here six calls at once, each a partition's run of the
    same two files, take two log writes at most (the first call's alone, then the five that waited), with a linger
    (1 s) far longer than their spread; a lone call is written at once."""
    server = start_one_coordinator(tmp_path / "data", linger_ms=1000)
    try:
        topic_id = create_topic(server, "merged")
        broker = Broker(server.stub, 1)
        sizes: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        for file in range(2):
            batches = laid_out([batch(topic_id, p, 1) for p in range(PARTITIONS)])  # offsets 0, then 1
            for found in batches:
                sizes[found.partition].append(found.size)
            answer = broker.commit(batches, object_key=f"wal/source/{file}")
            assert all(b.error_code == pb.NONE for b in answer.batches), answer
        started = time.monotonic()
        lone = server.stub.ReplaceBatches(replace_request(topic_id, 7, sizes[7], "merged/7"), timeout=30)
        assert [e.error_code for e in lone.extents] == [pb.NONE], lone
        assert time.monotonic() - started < 0.5, "a lone ReplaceBatches call waited for the 1 s linger"
        flushes_before, _ = flushes_and_appends(server)
        start = threading.Barrier(6)

        def replace(partition: int) -> pb.ReplaceBatchesResponse:
            channel = grpc.insecure_channel(server.address)
            try:
                start.wait()
                request = replace_request(topic_id, partition, sizes[partition], f"merged/{partition}")
                return pb_grpc.DisklessCoordinatorStub(channel).ReplaceBatches(request, timeout=30)
            finally:
                channel.close()

        with ThreadPoolExecutor(max_workers=6) as pool:
            answers = list(pool.map(replace, range(6)))
        assert all([e.error_code for e in a.extents] == [pb.NONE] for a in answers), answers
        flushes_after, _ = flushes_and_appends(server)
        assert 1 <= flushes_after - flushes_before <= 2, f"{flushes_after - flushes_before} log writes for 6 calls"
        assert server.stop() == 0
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()
