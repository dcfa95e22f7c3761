"""The probe of a file nobody may hand over (DESIGN §5), asking the owner just before first, and KnownFiles' lookups
of many keys in one query (issue #38 item 5: what the node does for a consolidation job's emptied files).

A coordinator that waits for a file's ownership asks the owner just before it about the files, and the owners
before that only about the files it does not know; it takes a file only when none of them knows it, as when it
asked them all at once. A node in the test's process on a clock the test moves (tests/in_process.py), on a local
object store; the worker's KnownFiles calls are recorded by wrapping them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator.files.workers import FileWorker
from coordinator.machine.state import file_reads
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from protos import internal_pb2_grpc as internal_grpc
from tests.harness import Broker, batch, describe_file, laid_out, topic_name
from tests.in_process import InProcessNode
from tests.object_stores import ObjectStoreUnderTest
from tests.test_wal_files import FILE_WORKERS, INTERVAL_MS, PROBE_DELAY_MS, Cluster

FILES = 3


class Probes:
    """The KnownFiles calls the node's file workers made: (coordinators asked, keys asked), in order."""

    def __init__(self, worker: FileWorker) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple[str, ...]]] = []
        peers = worker._peers  # the test wraps what the workers call (one client for the node's workers)
        known_files = peers.known_files

        async def recorded(ids: Sequence[int], keys: Sequence[str], timeout_s: float) -> Any:
            self.calls.append((tuple(ids), tuple(keys)))
            return await known_files(ids, keys, timeout_s)

        peers.known_files = recorded  # type: ignore[method-assign]


@pytest.fixture
def cluster(tmp_path: Path, local_store_under_test: ObjectStoreUnderTest) -> Iterator[Cluster]:
    node = InProcessNode(
        tmp_path / "data", coordinators=4, settings={**local_store_under_test.settings, **FILE_WORKERS}
    ).start()
    yield Cluster(node, local_store_under_test)
    assert node.stop() == 0, "".join(node.output)


def _files(cluster: Cluster, owner_ids: list[int], on: tuple[int, ...]) -> tuple[list[str], bytes, dict[int, int]]:
    """FILES files of `owner_ids` committed on the coordinators `on` only (the others never heard of them)."""
    topic_id, partitions = cluster.partitions_on(*owner_ids)
    keys = [cluster.upload() for _ in range(FILES)]
    for key in keys:
        cluster.commit(key, topic_id, [partitions[c] for c in on], owner_ids)
    return keys, topic_id, partitions


def _probes_of_3(cluster: Cluster) -> Probes:
    """The probes of coordinator 3's file worker, the last owner in every test here."""
    node = cluster.node
    assert isinstance(node, InProcessNode)
    return Probes(node.file_workers[3])


def _all_deleted(cluster: Cluster, keys: Sequence[str]) -> None:
    for key in keys:
        cluster.wait_deleted(key)


def _probed(cluster: Cluster, probes: Probes) -> None:
    """Moves the clock past the probe delay: the waiting coordinator has made its probe pass."""
    cluster.advance(PROBE_DELAY_MS + INTERVAL_MS)
    assert probes.calls, "no probe after the probe delay"


def test_a_file_the_owner_just_before_knows_costs_one_lookup_and_is_not_taken(cluster: Cluster) -> None:
    probes = _probes_of_3(cluster)
    # 0 never heard of the files, 1 holds live batches in them, 3 waits for them.
    keys, topic_id, partitions = _files(cluster, [0, 1, 3], on=(1, 3))
    cluster.empty(topic_id, partitions[3])
    _probed(cluster, probes)
    # Only the owner just before was asked, and only once per pass: never coordinator 0, never both.
    assert set(probes.calls) == {((1,), tuple(keys))}, probes.calls
    assert all(cluster.state(key) == (pb.FILE_STATE_LIVE, [1, 3]) for key in keys), "taken while 1 holds batches"

    # Once 1 has no batch left, it asks 0 (none knows them), takes them and hands them to 3, the last owner.
    cluster.empty(topic_id, partitions[1])
    _all_deleted(cluster, keys)


def test_files_with_the_same_owner_just_before_are_asked_about_in_one_call(cluster: Cluster) -> None:
    probes = _probes_of_3(cluster)
    # Two owner lists (brokers permute them per file), the same owner just before 3: one call for all the files.
    topic_id, partitions = cluster.partitions_on(0, 1, 2, 3)
    keys = []
    for owner_ids in ([0, 1, 3], [2, 1, 3], [0, 1, 3], [2, 1, 3]):
        key = cluster.upload()
        cluster.commit(key, topic_id, [partitions[1], partitions[3]], owner_ids)
        keys.append(key)
    cluster.empty(topic_id, partitions[3])
    _probed(cluster, probes)
    assert set(probes.calls) == {((1,), tuple(keys))}, probes.calls
    cluster.empty(topic_id, partitions[1])
    _all_deleted(cluster, keys)


def test_the_owners_further_before_are_asked_about_what_the_one_just_before_does_not_know(cluster: Cluster) -> None:
    probes = _probes_of_3(cluster)
    # 1 never heard of the files (a partial commit); 0, the first owner, holds live batches in them.
    keys, topic_id, partitions = _files(cluster, [0, 1, 3], on=(0, 3))
    cluster.empty(topic_id, partitions[3])
    _probed(cluster, probes)
    assert probes.calls[:2] == [((1,), tuple(keys)), ((0,), tuple(keys))]
    assert all(cluster.state(key) == (pb.FILE_STATE_LIVE, [0, 3]) for key in keys), "taken while 0 holds batches"

    # 0 empties: it hands the files to 1 (which records files it never knew), 1 to 3, which deletes them.
    cluster.empty(topic_id, partitions[0])
    _all_deleted(cluster, keys)


def test_a_file_no_owner_before_knows_is_taken_after_asking_each(cluster: Cluster) -> None:
    probes = _probes_of_3(cluster)
    keys, topic_id, partitions = _files(cluster, [0, 1, 3], on=(3,))
    cluster.empty(topic_id, partitions[3])
    cluster.run_until(
        lambda: all(cluster.state(key) == (pb.FILE_STATE_AWAITING_DELETION, [3]) for key in keys),
        "coordinator 3 takes the files",
    )
    assert probes.calls == [((1,), tuple(keys)), ((0,), tuple(keys))]
    _all_deleted(cluster, keys)


def _known(stub: internal_grpc.CoordinatorInternalStub, keys: Sequence[str]) -> dict[str, dict[int, int]]:
    """KnownFiles of every coordinator of the node: key -> {coordinator: state there}."""
    answer = stub.KnownFiles(internal.KnownFilesRequest(coordinator_ids=range(4), object_keys=keys))
    assert answer.error_code == pb.NONE, answer
    assert [f.object_key for f in answer.files] == list(keys)
    return {f.object_key: dict(zip(f.coordinator_ids, f.states, strict=True)) for f in answer.files}


def test_known_files_answers_many_keys_at_once_as_it_answers_each(tmp_path: Path) -> None:
    """One query for a step's keys: the same states as one key a call, batches of a deleted topic not live."""
    node = InProcessNode(tmp_path / "data", coordinators=4).start()
    try:
        broker = Broker(node.stub, node.coordinators)
        doomed = broker.create_topic(topic_name("doomed"), 4)
        kept = broker.create_topic(topic_name("kept"), 4)
        doomed_only, mixed = [], []
        for partition in range(4):
            for batches, keys in (
                ([batch(doomed, partition)], doomed_only),
                ([batch(doomed, partition), batch(kept, partition)], mixed),
            ):
                key = f"wal/{uuid.uuid4()}"
                committed = broker.commit(laid_out(batches), object_key=key)
                assert all(b.error_code == pb.NONE for b in committed.batches), committed
                keys.append(key)
        (deleted,) = node.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[doomed])).topics
        assert deleted.error_code == pb.NONE  # no purge pass has run: the doomed batches still count in the rows
        stub = internal_grpc.CoordinatorInternalStub(grpc.insecure_channel(node.address))
        unknown = f"wal/{uuid.uuid4()}"
        asked = [doomed_only[0], unknown, *mixed, *doomed_only[1:]]
        together = _known(stub, asked)
        assert together[unknown] == {}
        for key in asked:
            assert together[key] == _known(stub, [key])[key], key
        for key in doomed_only:
            assert together[key] and pb.FILE_STATE_LIVE not in together[key].values(), key
            assert describe_file(node.stub, key).state == pb.FILE_STATE_AWAITING_DELETION
        for key in mixed:
            assert pb.FILE_STATE_LIVE in together[key].values(), key
    finally:
        assert node.stop() == 0, "".join(node.output)


def test_known_files_and_describe_files_read_off_the_loop_first_then_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read of files' rows runs first on a thread of its own (the pages of files emptied long ago may have left
    the OS cache), then on the loop, where its answer is taken with the commits in flight."""
    reads_made: list[tuple[bool, tuple[str, ...]]] = []  # (on the node's loop, the keys read)
    described = file_reads.described_files_facts

    def watched(db: Any, object_keys: Sequence[str]) -> Any:
        try:
            asyncio.get_running_loop()
            on_the_loop = True
        except RuntimeError:
            on_the_loop = False
        reads_made.append((on_the_loop, tuple(object_keys)))
        return described(db, object_keys)

    monkeypatch.setattr(file_reads, "described_files_facts", watched)
    node = InProcessNode(tmp_path / "data", coordinators=4).start()
    try:
        broker = Broker(node.stub, node.coordinators)
        topic = broker.create_topic(topic_name("probed"), 1)
        key = f"wal/{uuid.uuid4()}"
        assert all(b.error_code == pb.NONE for b in broker.commit(laid_out([batch(topic, 0)]), object_key=key).batches)
        stub = internal_grpc.CoordinatorInternalStub(grpc.insecure_channel(node.address))
        reads_made.clear()
        assert list(_known(stub, [key])[key].values()) == [pb.FILE_STATE_LIVE]
        assert reads_made == [(False, (key,))] * 4 + [(True, (key,))] * 4  # each coordinator's, off it then on it
        reads_made.clear()  # DescribeFiles the same way
        assert describe_file(node.stub, key).state == pb.FILE_STATE_LIVE
        assert reads_made == [(False, (key,))] * 4 + [(True, (key,))] * 4
    finally:
        assert node.stop() == 0, "".join(node.output)
