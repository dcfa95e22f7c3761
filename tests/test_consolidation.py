"""Object consolidation through the real socket (DESIGN §4c): a merge job plans with GetFileMergeWorkItem, uploads
the merged object and calls ReplaceBatches; FindBatches answers the new positions at once; the old files go to the
file workers and are deleted after the grace; the state equals a rebuild from the log and survives a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from coordinator.client.routing_client import RoutingClient
from coordinator.config.settings import Settings
from coordinator.files.object_store import StoreConfig, open_object_store
from coordinator.files.object_store.base import ObjectStore
from coordinator.reads.find_batches import find_batches
from coordinator.reads.readers.board import Status, StatusBoard
from coordinator.reads.readers.state_files import reader_coordinators
from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    assert_state_equals_log_rebuild,
    batch,
    coordinator_of,
    coordinator_state_files,
    describe_file,
    fetch,
    find_batches_request,
    laid_out,
    topic_name,
)
from tests.in_process import InProcessNode
from tests.snapshot_helpers import MANUAL_SNAPSHOTS, create_snapshots

INTERVAL_MS = 1000
GRACE_MS = 10 * INTERVAL_MS
MIN_AGE_MS = 5000


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[InProcessNode, ObjectStore]]:
    root = tmp_path / "objects"
    root.mkdir()
    node = InProcessNode(
        tmp_path / "data",
        coordinators=2,
        settings={
            "diskless.storage.local.root": str(root),
            "diskless.coordinator.file.worker.interval.ms": str(INTERVAL_MS),
            "diskless.coordinator.file.deletion.grace.period.ms": str(GRACE_MS),
        },
    ).start()
    yield node, open_object_store(StoreConfig("local", local_root=str(root)))
    if node.is_running():
        assert node.stop() == 0, "".join(node.output)


def upload_and_commit(broker: Broker, store: ObjectStore, topic_id: bytes, partition: int, key: str) -> None:
    """A WAL file of two batches of the partition (2 and 3 records, 100 and 60 bytes), uploaded then committed."""
    batches = laid_out([batch(topic_id, partition, 2, size=100), batch(topic_id, partition, 3, size=60)])
    store.put(key, b"w" * 160)
    answer = broker.commit(batches, object_key=key)
    assert [b.error_code for b in answer.batches] == [pb.NONE, pb.NONE], answer


def plan(node: InProcessNode, coordinator_id: int, **given: int) -> pb.GetFileMergeWorkItemResponse:
    async def call() -> pb.GetFileMergeWorkItemResponse:
        async with RoutingClient([node.address], deadline_ms=10_000) as client:
            return await client.get_file_merge_work_item(
                pb.GetFileMergeWorkItemRequest(coordinator_id=coordinator_id, min_age_ms=MIN_AGE_MS, **given)
            )

    return asyncio.run(call())


def merged_request(key: str, files: list[pb.GetFileMergeWorkItemResponse.File], owner: int) -> pb.ReplaceBatchesRequest:
    """What the merge job asks: each partition's batches of the planned files, in offset order, one after another."""
    by_partition: dict[tuple[bytes, int], list[pb.GetFileMergeWorkItemResponse.Batch]] = {}
    for file in files:
        for found in file.batches:
            by_partition.setdefault((found.topic_id, found.partition), []).append(found)
    request = pb.ReplaceBatchesRequest(object_key=key, object_format=1, uploader_broker_id=9, owner_ids=[owner])
    position = 0
    for (topic_id, partition), batches in by_partition.items():
        batches.sort(key=lambda b: b.base_offset)
        size = sum(b.size for b in batches)
        request.extents.add(
            topic_id=topic_id, partition=partition, base_offset=batches[0].base_offset,
            last_offset=batches[-1].last_offset, byte_offset=position, size=size,
        )  # fmt: skip
        position += size
    request.file_size = position
    return request


def test_a_merge_is_planned_replaced_read_at_its_new_positions_and_the_old_files_deleted_after_the_grace(
    served: tuple[InProcessNode, ObjectStore], tmp_path: Path
) -> None:
    node, store = served
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("merge"), 1)
    owner = coordinator_of(node.stub, topic_id, 0)
    old_keys = [f"wal/0{i}/{i:032x}.wal" for i in range(3)]
    for key in old_keys:
        upload_and_commit(broker, store, topic_id, 0, key)  # offsets 0..14, six batches
    before = fetch(node.stub, topic_id, 0, 0)
    assert plan(node, owner).files == []  # younger than min_age_ms
    node.advance(MIN_AGE_MS)
    planned = plan(node, owner)
    assert planned.error_code == pb.NONE and [f.object_key for f in planned.files] == old_keys
    assert planned.next_page_token == b"" and all(len(f.batches) == 2 for f in planned.files)
    assert plan(node, 1 - owner).files == []  # the other coordinator holds none of them

    merged_key = "wal/ff/" + "f" * 32 + ".wal"
    request = merged_request(merged_key, list(planned.files), owner)
    store.put(merged_key, b"m" * request.file_size)
    assert [e.error_code for e in node.stub.ReplaceBatches(request).extents] == [pb.NONE]
    after = fetch(node.stub, topic_id, 0, 0)
    assert [(b.object_key, b.byte_offset, b.byte_size) for b in after.batches] == [
        (merged_key, p, s) for p, s in zip([0, 100, 160, 260, 320, 420], [100, 60] * 3, strict=True)
    ]
    keep = ("base_offset", "last_offset", "batch_max_timestamp", "log_append_timestamp", "byte_size", "producer_id")
    assert [[getattr(b, f) for f in keep] for b in after.batches] == [
        [getattr(b, f) for f in keep] for b in before.batches
    ]
    # A retry answers as the first call and changes nothing; the same key with other extents is refused.
    assert [e.error_code for e in node.stub.ReplaceBatches(request).extents] == [pb.NONE]
    assert fetch(node.stub, topic_id, 0, 0) == after
    other = pb.ReplaceBatchesRequest()
    other.CopyFrom(request)
    other.extents[0].byte_offset = 1
    other.file_size += 1
    assert [e.error_code for e in node.stub.ReplaceBatches(other).extents] == [pb.INVALID_REQUEST]

    described = describe_file(node.stub, merged_key)
    assert (described.state, described.has_live_batches, list(described.coordinator_ids)) == (
        pb.FILE_STATE_LIVE, True, [owner],
    )  # fmt: skip
    for key in old_keys:
        old = describe_file(node.stub, key)
        assert (old.state, old.has_live_batches) == (pb.FILE_STATE_AWAITING_DELETION, False)
    node.advance(GRACE_MS)  # readers holding old positions may still read the old objects meanwhile
    assert all(store.head(key) is not None for key in old_keys)
    node.advance(2 * INTERVAL_MS)
    assert [describe_file(node.stub, key).state for key in old_keys] == [pb.FILE_STATE_UNKNOWN] * 3
    assert all(store.head(key) is None for key in old_keys) and store.head(merged_key) is not None
    # The merged object is a file like any other: planned again while it is small enough, not once it is larger.
    assert [f.object_key for f in plan(node, owner).files] == [merged_key]
    assert plan(node, owner, max_file_size=request.file_size - 1).files == []

    node.restart()
    assert fetch(node.stub, topic_id, 0, 0) == after
    assert node.stop() == 0
    assert_state_equals_log_rebuild(tmp_path / "data", node.coordinators, tmp_path / "rebuilt")


def test_a_call_that_moves_nothing_leaves_its_object_to_be_deleted_after_the_grace(
    served: tuple[InProcessNode, ObjectStore],
) -> None:
    node, store = served
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("merge"), 1)
    owner = coordinator_of(node.stub, topic_id, 0)
    upload_and_commit(broker, store, topic_id, 0, "wal/01/" + "1" * 32 + ".wal")
    key = "wal/02/" + "2" * 32 + ".wal"
    store.put(key, b"m" * 160)
    request = pb.ReplaceBatchesRequest(object_key=key, object_format=1, file_size=160, owner_ids=[owner])
    request.extents.add(topic_id=topic_id, partition=0, base_offset=0, last_offset=4, byte_offset=0, size=159)
    answer = node.stub.ReplaceBatches(request).extents
    assert answer[0].error_code == pb.INVALID_REQUEST and "size 159 differs" in answer[0].error_message
    assert describe_file(node.stub, key).state == pb.FILE_STATE_AWAITING_DELETION
    node.advance(GRACE_MS + 2 * INTERVAL_MS)
    assert describe_file(node.stub, key).state == pb.FILE_STATE_UNKNOWN and store.head(key) is None


def test_requests_the_node_cannot_answer_are_refused_whole(served: tuple[InProcessNode, ObjectStore]) -> None:
    node, _ = served
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("merge"), 1)
    bad_format = pb.ReplaceBatchesRequest(object_key="wal/x", object_format=2, file_size=10, owner_ids=[0])
    bad_format.extents.add(topic_id=topic_id, partition=0, base_offset=0, last_offset=0, size=10)
    bad_format.extents.add(topic_id=topic_id, partition=5, base_offset=0, last_offset=0, byte_offset=10, size=10)
    assert [e.error_code for e in node.stub.ReplaceBatches(bad_format).extents] == [pb.INVALID_REQUEST] * 2
    assert describe_file(node.stub, "wal/x").state == pb.FILE_STATE_UNKNOWN
    for nonsense in (
        pb.GetFileMergeWorkItemRequest(coordinator_id=2),
        pb.GetFileMergeWorkItemRequest(coordinator_id=0, min_age_ms=-1),
        pb.GetFileMergeWorkItemRequest(coordinator_id=0, page_token=b"x"),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            node.stub.GetFileMergeWorkItem(nonsense)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_moved_positions_are_in_snapshots_and_a_reader_process_answers_them(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=1, settings=MANUAL_SNAPSHOTS).start()
    try:
        broker = Broker(node.stub, 1)
        topic_id = broker.create_topic(topic_name("merge"), 1)
        for i in range(3):
            answer = broker.commit(laid_out([batch(topic_id, 0, 2, size=100)]), object_key=f"wal/old/{i}")
            assert answer.batches[0].error_code == pb.NONE

        def replace(key: str, base: int, last: int, size: int) -> None:
            request = pb.ReplaceBatchesRequest(object_key=key, object_format=1, file_size=size, owner_ids=[0])
            request.extents.add(
                topic_id=topic_id, partition=0, base_offset=base, last_offset=last, byte_offset=0, size=size
            )
            assert [e.error_code for e in node.stub.ReplaceBatches(request).extents] == [pb.NONE]

        replace("wal/merged/1", 0, 3, 200)
        create_snapshots(node)
        replace("wal/merged/2", 4, 5, 100)  # the log's tail after the snapshot
        seen = fetch(node.stub, topic_id, 0, 0)
        assert [(b.object_key, b.byte_offset) for b in seen.batches] == [
            ("wal/merged/1", 0), ("wal/merged/1", 100), ("wal/merged/2", 0),
        ]  # fmt: skip
        # A reader process reads the same rows (coordinator/reads/readers): the same answer, at once.
        board = StatusBoard.create(1)
        board.publish(0, Status(0, 1))
        request = find_batches_request(topic_id, 0, 0)
        with reader_coordinators(Settings(), [node.data_dir / "coordinator-0"], board, lambda *_: None) as view:
            assert pb.FindBatchesResponse.FromString(find_batches(view, request)) == node.stub.FindBatches(request)
        node.stop()
        for path in coordinator_state_files(node.data_dir, 0):
            path.unlink(missing_ok=True)
        node.start()
        assert "restored snapshot" in "".join(node.output)
        assert fetch(node.stub, topic_id, 0, 0) == seen
    finally:
        if node.is_running():
            node.stop()


def test_a_call_spanning_two_coordinators_records_one_part_each_and_an_unnamed_owner_refuses_its_own(
    served: tuple[InProcessNode, ObjectStore],
) -> None:
    node, store = served
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("merge"), 8)
    on = {coordinator_of(node.stub, topic_id, p): p for p in range(8)}
    assert set(on) == {0, 1}, "eight partitions over two coordinators reach both"
    for coordinator_id, partition in on.items():
        upload_and_commit(broker, store, topic_id, partition, f"wal/span/{coordinator_id}")
    request = pb.ReplaceBatchesRequest(object_key="wal/span/merged", object_format=1, file_size=320, owner_ids=[0, 1])
    for index, partition in enumerate((on[0], on[1])):
        request.extents.add(
            topic_id=topic_id, partition=partition, base_offset=0, last_offset=4, byte_offset=160 * index, size=160
        )
    assert [e.error_code for e in node.stub.ReplaceBatches(request).extents] == [pb.NONE, pb.NONE]
    described = describe_file(node.stub, "wal/span/merged")
    assert (described.state, list(described.coordinator_ids)) == (pb.FILE_STATE_LIVE, [0, 1])
    assert [fetch(node.stub, topic_id, on[c], 0).batches[1].byte_offset for c in (0, 1)] == [100, 260]
    # Owners naming only coordinator 0: coordinator 1's extent is refused, coordinator 0's moves.
    for coordinator_id, partition in on.items():
        upload_and_commit(broker, store, topic_id, partition, f"wal/span/second-{coordinator_id}")
    only_first = pb.ReplaceBatchesRequest()
    only_first.CopyFrom(request)
    only_first.object_key, only_first.owner_ids[:] = "wal/span/merged-2", [0]
    for extent in only_first.extents:
        extent.base_offset, extent.last_offset = 5, 9
    answers = node.stub.ReplaceBatches(only_first).extents
    assert [e.error_code for e in answers] == [pb.NONE, pb.INVALID_REQUEST]
    assert "do not name coordinator 1" in answers[1].error_message
    assert list(describe_file(node.stub, "wal/span/merged-2").coordinator_ids) == [0]
