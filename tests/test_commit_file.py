"""CommitFile through the real socket: DESIGN §4's checks in their order, offsets, idempotence, files."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence

import grpc
import pytest

from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    batch,
    coordinator_of,
    delete_records,
    describe_coordinator,
    describe_file,
    fetch,
    high_watermark,
    laid_out,
    new_topic_id,
    topic_name,
)
from tests.in_process import InProcessNode

Batch = pb.CommitFileRequest.Batch
SEQ_MAX = 2**31 - 1
PID = 4242


# ---------------------------------------------------------------- helpers


def new_key() -> str:
    return f"wal/{uuid.uuid4()}"


def codes(response: pb.CommitFileResponse) -> list[int]:
    return [b.error_code for b in response.batches]


def bases(response: pb.CommitFileResponse) -> list[int]:
    return [b.assigned_base_offset for b in response.batches]


def topic(broker: Broker, partitions: int = 1) -> bytes:
    return broker.create_topic(topic_name("commit"), partitions)


def spread_topic(broker: Broker) -> tuple[bytes, dict[int, int]]:
    """A topic with one partition on each of the node's coordinators: {partition: coordinator}."""
    topic_id = topic(broker, broker.coordinators)
    placement = {p: coordinator_of(broker.stub, topic_id, p) for p in range(broker.coordinators)}
    assert sorted(placement.values()) == list(range(broker.coordinators)), placement
    return topic_id, placement


def same_coordinator_pair(broker: Broker) -> tuple[bytes, int, int]:
    """A topic with two partitions on the same coordinator."""
    topic_id = topic(broker, broker.coordinators + 1)
    first = coordinator_of(broker.stub, topic_id, 0)
    for p in range(1, broker.coordinators + 1):
        if coordinator_of(broker.stub, topic_id, p) == first:
            return topic_id, 0, p
    raise AssertionError("no two partitions share a coordinator")


def request(
    batches: Sequence[Batch],
    owner_ids: Sequence[int],
    *,
    object_key: str | None = None,
    file_size: int | None = None,
    object_format: int = 1,
    uploader_broker_id: int = 1,
) -> pb.CommitFileRequest:
    return pb.CommitFileRequest(
        object_key=new_key() if object_key is None else object_key,
        object_format=object_format,
        file_size=file_size if file_size is not None else max([b.byte_offset + b.size for b in batches] or [1]),
        uploader_broker_id=uploader_broker_id,
        owner_ids=owner_ids,
        batches=batches,
    )


def idem(topic_id: bytes, partition: int, sequence: int, records: int = 1, *, epoch: int = 0, pid: int = PID) -> Batch:
    return batch(topic_id, partition, records, producer_id=pid, epoch=epoch, sequence=sequence)


def commit_one(broker: Broker, b: Batch) -> pb.CommitFileResponse.BatchResult:
    b.byte_offset = 0
    return broker.commit([b]).batches[0]


def log_end(broker: Broker, coordinator_id: int) -> int:
    return describe_coordinator(broker.stub, coordinator_id).log_end_offset


# ---------------------------------------------------------------- the request as a whole


REQUEST_PROBLEMS: dict[str, Callable[[pb.CommitFileRequest, int], None]] = {
    "empty object key": lambda r, c: setattr(r, "object_key", ""),
    "object key of 1025 ASCII bytes": lambda r, c: setattr(r, "object_key", "k" * 1025),
    "object key of 1026 UTF-8 bytes in 513 characters": lambda r, c: setattr(r, "object_key", "é" * 513),
    "file_size 0": lambda r, c: setattr(r, "file_size", 0),
    "file_size -1": lambda r, c: setattr(r, "file_size", -1),
    "empty owner_ids": lambda r, c: r.ClearField("owner_ids"),
    "repeated owner_ids": lambda r, c: r.owner_ids.extend([c]),
    "foreign owner id past the node's coordinators": lambda r, c: r.owner_ids.append(4),
    "negative owner id": lambda r, c: r.owner_ids.append(-1),
    "object_format 0": lambda r, c: setattr(r, "object_format", 0),
    "object_format 2": lambda r, c: setattr(r, "object_format", 2),
    "negative uploader_broker_id": lambda r, c: setattr(r, "uploader_broker_id", -1),
}


@pytest.mark.parametrize("problem", list(REQUEST_PROBLEMS))
def test_request_problem_makes_every_batch_invalid_request_and_writes_nothing(broker: Broker, problem: str) -> None:
    topic_id, placement = spread_topic(broker)
    batches = laid_out([batch(topic_id, 0, 3), batch(topic_id, 1, 2), batch(topic_id, 0, 1, magic=9)])
    owners = [placement[0], placement[1]]
    commit = request(batches, owners)
    REQUEST_PROBLEMS[problem](commit, placement[0])
    ends = {c: log_end(broker, c) for c in owners}

    response = broker.stub.CommitFile(commit)

    assert codes(response) == [pb.INVALID_REQUEST] * 3
    assert all(b.assigned_base_offset == -1 and b.log_append_time == -1 for b in response.batches)
    assert all(b.log_start_offset == -1 and not b.is_duplicate for b in response.batches)
    assert high_watermark(broker.stub, topic_id, 0) == 0
    assert high_watermark(broker.stub, topic_id, 1) == 0
    assert {c: log_end(broker, c) for c in owners} == ends
    if commit.object_key and len(commit.object_key.encode()) <= 1024:
        assert describe_file(broker.stub, commit.object_key).state == pb.FILE_STATE_UNKNOWN


def test_object_key_of_exactly_1024_utf8_bytes_is_accepted(broker: Broker) -> None:
    topic_id = topic(broker)
    key = "é" * 512  # 1024 bytes, 512 characters
    response = broker.commit([batch(topic_id, 0)], object_key=key)
    assert codes(response) == [pb.NONE]
    assert describe_file(broker.stub, key).state == pb.FILE_STATE_LIVE


def test_uploader_broker_id_zero_is_accepted(broker: Broker) -> None:
    topic_id = topic(broker)
    owner = coordinator_of(broker.stub, topic_id, 0)
    response = broker.stub.CommitFile(request([batch(topic_id, 0)], [owner], uploader_broker_id=0))
    assert codes(response) == [pb.NONE]


def test_zero_batches_is_refused_as_a_whole(broker: Broker) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        broker.stub.CommitFile(request([], [0], file_size=100))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_batch_limit_is_a_setting_past_which_the_call_is_refused(fresh_node: InProcessNode) -> None:
    fresh_node.settings = {"diskless.coordinator.commit.max.batches": "3"}
    stub = fresh_node.start().stub
    broker = Broker(stub, fresh_node.coordinators)
    topic_id = broker.create_topic(topic_name(), 1)
    owner = coordinator_of(stub, topic_id, 0)

    at_limit = stub.CommitFile(request(laid_out([batch(topic_id, 0) for _ in range(3)]), [owner]))
    assert codes(at_limit) == [pb.NONE] * 3
    with pytest.raises(grpc.RpcError) as caught:
        stub.CommitFile(request(laid_out([batch(topic_id, 0) for _ in range(4)]), [owner]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert high_watermark(stub, topic_id, 0) == 3


def test_default_batch_limit_refuses_10001_batches_and_answers_10000(broker: Broker) -> None:
    unknown = new_topic_id()
    many = laid_out([batch(unknown, 0, size=1) for _ in range(10001)])
    with pytest.raises(grpc.RpcError) as caught:
        broker.stub.CommitFile(request(many, [0]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    response = broker.stub.CommitFile(request(many[:10000], [0]))
    assert codes(response) == [pb.UNKNOWN_TOPIC_OR_PARTITION] * 10000


def test_message_size_limit_is_a_setting_past_which_the_call_is_refused(fresh_node: InProcessNode) -> None:
    fresh_node.settings = {"diskless.coordinator.request.max.bytes": "65536"}
    stub = fresh_node.start().stub
    topic_id = Broker(stub, 4).create_topic(topic_name(), 1)
    owner = coordinator_of(stub, topic_id, 0)
    big = request(laid_out([batch(topic_id, 0, size=1) for _ in range(2000)]), [owner])
    assert big.ByteSize() > 65536
    with pytest.raises(grpc.RpcError) as caught:
        stub.CommitFile(big)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert high_watermark(stub, topic_id, 0) == 0


# ---------------------------------------------------------------- per coordinator


def test_owner_ids_not_naming_a_coordinator_rejects_only_its_batches(broker: Broker) -> None:
    topic_id, placement = spread_topic(broker)
    named, unnamed = placement[0], placement[1]
    key = new_key()
    batches = laid_out([batch(topic_id, 1, 2), batch(topic_id, 0, 3), batch(topic_id, 1, 1, magic=7)])
    end_before = log_end(broker, unnamed)

    response = broker.stub.CommitFile(request(batches, [named], object_key=key))

    # The per-coordinator check comes before structure: the malformed batch is INVALID_REQUEST too.
    assert codes(response) == [pb.INVALID_REQUEST, pb.NONE, pb.INVALID_REQUEST]
    assert response.batches[1].assigned_base_offset == 0
    assert high_watermark(broker.stub, topic_id, 0) == 3
    assert high_watermark(broker.stub, topic_id, 1) == 0
    assert log_end(broker, unnamed) == end_before
    described = describe_file(broker.stub, key)
    assert list(described.coordinator_ids) == [named]


def test_key_already_committed_to_a_coordinator_rejects_its_batches_while_others_go_on(broker: Broker) -> None:
    topic_id, placement = spread_topic(broker)
    first, second = placement[0], placement[1]
    key = new_key()
    assert codes(broker.commit([batch(topic_id, 0, 2)], object_key=key, owner_ids=[first])) == [pb.NONE]
    end_before = log_end(broker, first)

    retried = laid_out([idem(topic_id, 0, 0, 4), batch(topic_id, 1, 5), batch(topic_id, 0, 1, size=0)])
    response = broker.stub.CommitFile(request(retried, [first, second], object_key=key))

    assert codes(response) == [pb.INVALID_REQUEST, pb.NONE, pb.INVALID_REQUEST]
    assert response.batches[1].assigned_base_offset == 0
    # Nothing written on the coordinator that knew the key: no offsets, no producer state, no log record.
    assert log_end(broker, first) == end_before
    assert high_watermark(broker.stub, topic_id, 0) == 2
    assert high_watermark(broker.stub, topic_id, 1) == 5
    accepted = commit_one(broker, idem(topic_id, 0, 0, 4))
    assert (accepted.error_code, accepted.is_duplicate, accepted.assigned_base_offset) == (pb.NONE, False, 2)
    assert sorted(describe_file(broker.stub, key).coordinator_ids) == sorted([first, second])


def test_key_is_checked_per_coordinator_so_another_coordinator_accepts_it(broker: Broker) -> None:
    topic_id, placement = spread_topic(broker)
    key = new_key()
    assert codes(broker.commit([batch(topic_id, 0)], object_key=key, owner_ids=[placement[0]])) == [pb.NONE]
    again = broker.commit([batch(topic_id, 1)], object_key=key, owner_ids=[placement[1]])
    assert codes(again) == [pb.NONE]
    assert high_watermark(broker.stub, topic_id, 1) == 1


def test_key_committed_twice_concurrently_is_accepted_once(broker: Broker) -> None:
    topic_id = topic(broker)
    owner = coordinator_of(broker.stub, topic_id, 0)
    key = new_key()
    # Other batches each time (an identical request would be a retry, tests/test_retried_commits.py).
    futures = [
        broker.stub.CommitFile.future(request([batch(topic_id, 0, records)], [owner], object_key=key))
        for records in range(1, 9)
    ]
    results = [f.result(timeout=30).batches[0] for f in futures]
    assert sorted(r.error_code for r in results) == [pb.NONE] + [pb.INVALID_REQUEST] * 7
    accepted = next(records for records, r in enumerate(results, 1) if r.error_code == pb.NONE)
    assert high_watermark(broker.stub, topic_id, 0) == accepted


def test_key_recorded_by_a_commit_with_no_accepted_batch_cannot_be_committed_again(broker: Broker) -> None:
    topic_id = topic(broker)
    key = new_key()
    assert codes(broker.commit([batch(topic_id, 0, magic=5)], object_key=key)) == [pb.INVALID_RECORD]
    assert codes(broker.commit([batch(topic_id, 0)], object_key=key)) == [pb.INVALID_REQUEST]
    assert high_watermark(broker.stub, topic_id, 0) == 0


# ---------------------------------------------------------------- structure: INVALID_RECORD


def _idempotent(**fields: int) -> Callable[[Batch], None]:
    def change(b: Batch) -> None:
        b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence = PID, 0, 0, b.last_offset - b.base_offset
        for name, value in fields.items():
            setattr(b, name, value)

    return change


def _set(**fields: int) -> Callable[[Batch], None]:
    def change(b: Batch) -> None:
        for name, value in fields.items():
            setattr(b, name, value)

    return change


# Each mutates a valid batch of 3 records at bytes 0..100 of a 1000-byte file.
MALFORMED: dict[str, Callable[[Batch], None]] = {
    "size 0": _set(size=0),
    "size -1": _set(size=-1),
    "byte_offset -1": _set(byte_offset=-1),
    "byte range past the file end": _set(byte_offset=901),
    "byte range far past the file end": _set(byte_offset=2**31 - 200),
    "base_offset -1": _set(base_offset=-1, last_offset=1),
    "last_offset < base_offset": _set(base_offset=5, last_offset=4),
    "more records than an int32 offset delta": _set(base_offset=0, last_offset=2**31),
    "magic -1": _set(magic=-1),
    "magic 3": _set(magic=3),
    "magic 0 with CREATE_TIME": _set(magic=0, timestamp_type=pb.CREATE_TIME),
    "magic 0 with LOG_APPEND_TIME": _set(magic=0, timestamp_type=pb.LOG_APPEND_TIME),
    "magic 1 with NO_TIMESTAMP_TYPE": _set(magic=1, timestamp_type=pb.NO_TIMESTAMP_TYPE),
    "magic 2 with NO_TIMESTAMP_TYPE": _set(magic=2, timestamp_type=pb.NO_TIMESTAMP_TYPE),
    "magic 2 with timestamp type 2": _set(magic=2, timestamp_type=2),
    "magic 2 with timestamp type -2": _set(magic=2, timestamp_type=-2),
    "max timestamp -2": _set(batch_max_timestamp=-2),
    "producer_id -2": _set(producer_id=-2),
    "idempotent with epoch -1": _idempotent(producer_epoch=-1),
    "idempotent with epoch past int16": _idempotent(producer_epoch=32768),
    "idempotent with base_sequence -1": _idempotent(base_sequence=-1, last_sequence=1),
    "idempotent with last_sequence one short": _idempotent(base_sequence=10, last_sequence=11),
    "idempotent with last_sequence one long": _idempotent(base_sequence=10, last_sequence=13),
    "idempotent with last_sequence not wrapped": _idempotent(base_sequence=SEQ_MAX - 1, last_sequence=SEQ_MAX),
    "idempotent with last_sequence wrapped one too far": _idempotent(base_sequence=SEQ_MAX - 1, last_sequence=1),
}


@pytest.mark.parametrize("problem", list(MALFORMED))
def test_malformed_batch_is_invalid_record_and_the_others_go_on(broker: Broker, problem: str) -> None:
    topic_id = topic(broker)
    bad = batch(topic_id, 0, 3)
    MALFORMED[problem](bad)
    good = batch(topic_id, 0, 2, byte_offset=500)

    response = broker.commit([bad, good], file_size=1000)

    assert codes(response) == [pb.INVALID_RECORD, pb.NONE]
    assert response.batches[0].error_message
    assert (response.batches[0].assigned_base_offset, response.batches[0].log_start_offset) == (-1, -1)
    assert response.batches[1].assigned_base_offset == 0
    assert high_watermark(broker.stub, topic_id, 0) == 2


VALID_EDGES: dict[str, Callable[[Batch], None]] = {
    "magic 0 with NO_TIMESTAMP_TYPE and no timestamp": _set(
        magic=0, timestamp_type=pb.NO_TIMESTAMP_TYPE, batch_max_timestamp=-1
    ),
    "magic 1 with CREATE_TIME": _set(magic=1, timestamp_type=pb.CREATE_TIME),
    "magic 1 with LOG_APPEND_TIME": _set(magic=1, timestamp_type=pb.LOG_APPEND_TIME),
    "magic 2 with LOG_APPEND_TIME": _set(magic=2, timestamp_type=pb.LOG_APPEND_TIME),
    "max timestamp -1": _set(batch_max_timestamp=-1),
    "max timestamp 0": _set(batch_max_timestamp=0),
    "byte range ending exactly at the file end": _set(byte_offset=900),
    "producer-assigned base offset other than 0": _set(base_offset=1000, last_offset=1002),
    "non-idempotent batch with garbage producer fields": _set(
        producer_id=-1, producer_epoch=7, base_sequence=55, last_sequence=-9
    ),
    "idempotent with the largest epoch": _idempotent(producer_epoch=32767),
    "idempotent with last_sequence wrapping to 0": _idempotent(base_sequence=SEQ_MAX - 1, last_sequence=0),
    "idempotent with last_sequence wrapping past 0": _idempotent(base_sequence=SEQ_MAX, last_sequence=1),
}


@pytest.mark.parametrize("edge", list(VALID_EDGES))
def test_well_formed_edge_batch_is_accepted(broker: Broker, edge: str) -> None:
    topic_id = topic(broker)
    b = batch(topic_id, 0, 3)
    VALID_EDGES[edge](b)
    response = broker.commit([b], file_size=1000)
    assert codes(response) == [pb.NONE], response
    assert response.batches[0].assigned_base_offset == 0
    assert high_watermark(broker.stub, topic_id, 0) == 3


def test_overlapping_byte_range_is_invalid_record(broker: Broker) -> None:
    topic_id = topic(broker)
    first = batch(topic_id, 0, byte_offset=0, size=100)
    overlapping = batch(topic_id, 0, byte_offset=99, size=10)
    response = broker.commit([first, overlapping], file_size=1000)
    assert codes(response) == [pb.NONE, pb.INVALID_RECORD]


def test_touching_and_out_of_order_byte_ranges_do_not_overlap(broker: Broker) -> None:
    topic_id = topic(broker)
    batches = [
        batch(topic_id, 0, byte_offset=200, size=100),
        batch(topic_id, 0, byte_offset=0, size=100),
        batch(topic_id, 0, byte_offset=100, size=100),
        batch(topic_id, 0, byte_offset=300, size=100),
    ]
    assert codes(broker.commit(batches, file_size=400)) == [pb.NONE] * 4


def test_overlap_counts_earlier_batches_whether_rejected_or_not(broker: Broker) -> None:
    topic_id, placement = spread_topic(broker)
    unknown = new_topic_id()
    batches = [
        batch(topic_id, 0, byte_offset=0, size=100, magic=9),  # rejected: bad magic
        batch(topic_id, 0, byte_offset=50, size=100),  # overlaps the rejected one
        batch(topic_id, 0, byte_offset=200, size=100),  # fine
        batch(topic_id, 0, byte_offset=140, size=20),  # overlaps only the overlap-rejected one (50..150)
        batch(unknown, 0, byte_offset=400, size=100),  # unknown partition
        batch(topic_id, 0, byte_offset=450, size=10),  # overlaps it
        batch(b"\x01" * 15, 0, byte_offset=600, size=100),  # malformed topic id
        batch(topic_id, 0, byte_offset=650, size=10),  # overlaps it
        batch(topic_id, 1, byte_offset=250, size=10),  # another coordinator's batch overlapping a fine one
        batch(topic_id, 0, byte_offset=160, size=1000),  # outside the file
        batch(topic_id, 0, byte_offset=800, size=10),  # inside the range of the out-of-file batch
    ]
    response = broker.commit(batches, file_size=1000, owner_ids=[placement[0], placement[1]])
    assert codes(response) == [
        pb.INVALID_RECORD,
        pb.INVALID_RECORD,
        pb.NONE,
        pb.INVALID_RECORD,
        pb.UNKNOWN_TOPIC_OR_PARTITION,
        pb.INVALID_RECORD,
        pb.INVALID_REQUEST,
        pb.INVALID_RECORD,
        pb.INVALID_RECORD,
        pb.INVALID_RECORD,
        pb.INVALID_RECORD,
    ]
    assert high_watermark(broker.stub, topic_id, 0) == 1
    assert high_watermark(broker.stub, topic_id, 1) == 0


def test_overlap_spans_the_union_of_earlier_ranges(broker: Broker) -> None:
    topic_id = topic(broker)
    batches = [
        batch(topic_id, 0, byte_offset=0, size=100),
        batch(topic_id, 0, byte_offset=300, size=100),
        batch(topic_id, 0, byte_offset=150, size=100),
        batch(topic_id, 0, byte_offset=120, size=250),  # overlaps two earlier ranges: rejected, still counted
        batch(topic_id, 0, byte_offset=100, size=20),  # exactly the gap 100..120 left between them
    ]
    assert codes(broker.commit(batches, file_size=400)) == [pb.NONE, pb.NONE, pb.NONE, pb.INVALID_RECORD, pb.NONE]


# ---------------------------------------------------------------- partition existence and topic ids


def test_unknown_partition_and_unknown_topic_are_unknown_topic_or_partition(broker: Broker) -> None:
    topic_id = topic(broker, 2)
    batches = laid_out(
        [batch(topic_id, 2), batch(topic_id, -1), batch(new_topic_id(), 0), batch(topic_id, 1, 4), batch(topic_id, 0)]
    )
    response = broker.commit(batches, owner_ids=[0, 1, 2, 3])
    assert codes(response) == [pb.UNKNOWN_TOPIC_OR_PARTITION] * 3 + [pb.NONE, pb.NONE]
    assert [b.assigned_base_offset for b in response.batches] == [-1, -1, -1, 0, 0]


@pytest.mark.parametrize(
    "bad_id", [b"", b"\x01" * 15, b"\x01" * 17, b"\x00" * 16], ids=["empty", "15 bytes", "17 bytes", "all zeros"]
)
def test_malformed_topic_id_is_invalid_request_for_that_batch(broker: Broker, bad_id: bytes) -> None:
    topic_id = topic(broker)
    batches = laid_out([batch(bad_id, 0), batch(topic_id, 0, 2)])
    response = broker.commit(batches, owner_ids=[coordinator_of(broker.stub, topic_id, 0)])
    assert codes(response) == [pb.INVALID_REQUEST, pb.NONE]
    assert response.batches[1].assigned_base_offset == 0


# ---------------------------------------------------------------- check order


def test_structure_is_checked_before_partition_existence(broker: Broker) -> None:
    topic_id = topic(broker)
    batches = laid_out([batch(topic_id, 7, size=0), batch(new_topic_id(), 0, magic=3), batch(topic_id, 7)])
    response = broker.commit(batches, owner_ids=[0])
    assert codes(response) == [pb.INVALID_RECORD, pb.INVALID_RECORD, pb.UNKNOWN_TOPIC_OR_PARTITION]


def test_malformed_topic_id_wins_over_a_structure_problem(broker: Broker) -> None:
    # DESIGN is silent; a malformed id makes the item unreadable as a request, so INVALID_REQUEST.
    response = broker.commit([batch(b"\x00" * 16, 0, size=0)], file_size=10, owner_ids=[0])
    assert codes(response) == [pb.INVALID_REQUEST]


def test_structure_is_checked_before_producer_rules(broker: Broker) -> None:
    topic_id = topic(broker)
    first = commit_one(broker, idem(topic_id, 0, 0, 2, epoch=1))
    assert first.error_code == pb.NONE
    # A retry of that batch with a malformed byte range is not a duplicate.
    retried = idem(topic_id, 0, 0, 2, epoch=1)
    retried.byte_offset = -5
    assert broker.commit([retried], file_size=100).batches[0].error_code == pb.INVALID_RECORD
    # An out-of-order batch with bad magic is INVALID_RECORD, and advances nothing.
    out_of_order = idem(topic_id, 0, 9, epoch=1)
    out_of_order.magic = 4
    assert commit_one(broker, out_of_order).error_code == pb.INVALID_RECORD
    stale_epoch = idem(topic_id, 0, 2, epoch=0)
    stale_epoch.batch_max_timestamp = -3
    assert commit_one(broker, stale_epoch).error_code == pb.INVALID_RECORD
    nxt = commit_one(broker, idem(topic_id, 0, 2, epoch=1))
    assert (nxt.error_code, nxt.is_duplicate, nxt.assigned_base_offset) == (pb.NONE, False, 2)


def test_partition_existence_is_checked_before_producer_rules(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, idem(topic_id, 0, 0, epoch=5)).error_code == pb.NONE
    # Same producer, lower epoch, bad sequence: on a partition that does not exist, that is all that matters.
    response = broker.commit([idem(topic_id, 1, 77, epoch=1)], owner_ids=[0, 1, 2, 3])
    assert codes(response) == [pb.UNKNOWN_TOPIC_OR_PARTITION]


# ---------------------------------------------------------------- offsets and times


def test_offsets_are_assigned_contiguously_per_partition(broker: Broker) -> None:
    topic_id, p, q = same_coordinator_pair(broker)
    first = broker.commit(
        laid_out([batch(topic_id, p, 5), batch(topic_id, q, 2), batch(topic_id, p, 1), batch(topic_id, p, 10)])
    )
    assert codes(first) == [pb.NONE] * 4
    assert bases(first) == [0, 0, 5, 6]
    produced = batch(topic_id, p, 3)
    produced.base_offset, produced.last_offset = 500, 502  # the producer's own numbering is ignored
    second = broker.commit(laid_out([produced, batch(topic_id, q, 1)]))
    assert bases(second) == [16, 2]
    assert high_watermark(broker.stub, topic_id, p) == 19
    assert high_watermark(broker.stub, topic_id, q) == 3
    found = fetch(broker.stub, topic_id, p, 0)
    assert [(b.base_offset, b.last_offset) for b in found.batches] == [(0, 4), (5, 5), (6, 15), (16, 18)]


def test_rejected_batches_take_no_offsets(broker: Broker) -> None:
    topic_id = topic(broker)
    response = broker.commit(laid_out([batch(topic_id, 0, 2), batch(topic_id, 0, 4, magic=8), batch(topic_id, 0, 3)]))
    assert codes(response) == [pb.NONE, pb.INVALID_RECORD, pb.NONE]
    assert bases(response) == [0, -1, 2]


def test_one_commit_has_one_append_time_reported_only_for_log_append_time(
    broker: Broker, server: InProcessNode
) -> None:
    topic_id, p, q = same_coordinator_pair(broker)
    server.advance(1234)
    now_ms = server.clock.now_ms()
    response = broker.commit(
        laid_out(
            [
                batch(topic_id, p, timestamp_type=pb.LOG_APPEND_TIME),
                batch(topic_id, q, timestamp_type=pb.CREATE_TIME),
                batch(topic_id, p, magic=0, timestamp_type=pb.NO_TIMESTAMP_TYPE, max_timestamp=-1),
                batch(topic_id, q, timestamp_type=pb.LOG_APPEND_TIME, max_timestamp=1),
            ]
        )
    )
    assert codes(response) == [pb.NONE] * 4
    times = [b.log_append_time for b in response.batches]
    assert times[1] == times[2] == -1
    assert times[0] == times[3]
    assert times[0] == now_ms, "the node's clock at the commit"
    # Every stored batch carries the commit's append time, whatever its timestamp type.
    stored = [*fetch(broker.stub, topic_id, p, 0).batches, *fetch(broker.stub, topic_id, q, 0).batches]
    assert [b.log_append_timestamp for b in stored] == [times[0]] * 4


def test_one_commit_has_one_append_time_across_coordinators(broker: Broker, server: InProcessNode) -> None:
    topic_id = topic(broker, 8)
    owners = sorted({coordinator_of(broker.stub, topic_id, p) for p in range(8)})
    assert len(owners) > 1
    batches = laid_out([batch(topic_id, p, timestamp_type=pb.LOG_APPEND_TIME) for p in range(8)])
    # The node's clock ticks a millisecond at a time meanwhile: coordinators' clocks read apart would differ.
    ticking = threading.Event()
    ticker = threading.Thread(target=tick, args=(server, ticking), daemon=True)
    ticker.start()
    try:
        for _ in range(20):
            response = broker.commit(batches)
            assert codes(response) == [pb.NONE] * 8
            assert len({b.log_append_time for b in response.batches}) == 1
    finally:
        ticking.set()
        ticker.join()


def tick(server: InProcessNode, stop: threading.Event) -> None:
    """Moves the clock by 1 ms at a time (the file workers sleep an hour: none wakes)."""
    while not stop.is_set():
        server.clock.advance(1)
        time.sleep(0.0005)


def test_append_time_moves_forward_between_commits(broker: Broker, server: InProcessNode) -> None:
    topic_id = topic(broker)
    first = commit_one(broker, batch(topic_id, 0, timestamp_type=pb.LOG_APPEND_TIME))
    server.advance(10)
    second = commit_one(broker, batch(topic_id, 0, timestamp_type=pb.LOG_APPEND_TIME))
    assert second.log_append_time == first.log_append_time + 10 > 10


def test_log_start_offset_is_the_partitions_current_log_start(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, batch(topic_id, 0, 10)).log_start_offset == 0
    assert delete_records(broker.stub, topic_id, 0, 4).low_watermark == 4
    response = broker.commit(laid_out([batch(topic_id, 0, 2), batch(topic_id, 0, 1, magic=9)]))
    assert response.batches[0].log_start_offset == 4
    assert response.batches[1].log_start_offset == -1


# ---------------------------------------------------------------- idempotence


def test_retry_within_the_last_five_batches_is_a_duplicate_with_the_original_offset(broker: Broker) -> None:
    topic_id = topic(broker)
    sequence, originals = 0, []
    for records in (1, 3, 2, 1, 4):
        result = commit_one(broker, idem(topic_id, 0, sequence, records))
        assert (result.error_code, result.is_duplicate) == (pb.NONE, False)
        originals.append((sequence, records, result.assigned_base_offset))
        sequence += records
    end = high_watermark(broker.stub, topic_id, 0)
    batches_before = len(fetch(broker.stub, topic_id, 0, 0).batches)

    retry_keys = []
    for seq, records, base in reversed(originals):
        key = new_key()
        retry_keys.append(key)
        retry = broker.commit([idem(topic_id, 0, seq, records)], object_key=key).batches[0]
        assert (retry.error_code, retry.is_duplicate, retry.assigned_base_offset) == (pb.NONE, True, base)
        assert retry.log_append_time == -1 and retry.log_start_offset == 0

    assert high_watermark(broker.stub, topic_id, 0) == end
    assert len(fetch(broker.stub, topic_id, 0, 0).batches) == batches_before
    # A file holding only a duplicate has no accepted batch: recorded, to be deleted.
    assert describe_file(broker.stub, retry_keys[0]).state == pb.FILE_STATE_AWAITING_DELETION
    nxt = commit_one(broker, idem(topic_id, 0, sequence))
    assert (nxt.error_code, nxt.is_duplicate, nxt.assigned_base_offset) == (pb.NONE, False, end)


def test_duplicate_reports_the_original_append_time_and_current_log_start(
    broker: Broker, server: InProcessNode
) -> None:
    topic_id = topic(broker)
    original = idem(topic_id, 0, 0, 3)
    original.timestamp_type = pb.LOG_APPEND_TIME
    first = commit_one(broker, original)
    assert first.log_append_time > 0
    assert delete_records(broker.stub, topic_id, 0, 2).error_code == pb.NONE
    server.advance(10)
    retry = commit_one(broker, original)
    assert (retry.is_duplicate, retry.assigned_base_offset) == (True, 0)
    assert retry.log_append_time == first.log_append_time
    assert retry.log_start_offset == 2


def test_sixth_oldest_batch_is_not_a_duplicate(broker: Broker) -> None:
    topic_id = topic(broker)
    for sequence in range(6):
        assert commit_one(broker, idem(topic_id, 0, sequence)).error_code == pb.NONE
    oldest = commit_one(broker, idem(topic_id, 0, 0))
    assert (oldest.error_code, oldest.is_duplicate) == (pb.OUT_OF_ORDER_SEQUENCE_NUMBER, False)
    assert oldest.assigned_base_offset == -1
    second_oldest = commit_one(broker, idem(topic_id, 0, 1))
    assert (second_oldest.error_code, second_oldest.is_duplicate, second_oldest.assigned_base_offset) == (
        pb.NONE,
        True,
        1,
    )
    assert high_watermark(broker.stub, topic_id, 0) == 6


def test_duplicate_needs_an_exact_sequence_range_match(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, idem(topic_id, 0, 0, 5)).error_code == pb.NONE
    partial = commit_one(broker, idem(topic_id, 0, 0, 2))
    assert (partial.error_code, partial.is_duplicate) == (pb.OUT_OF_ORDER_SEQUENCE_NUMBER, False)


def test_lower_epoch_is_invalid_producer_epoch_before_any_sequence_rule(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, idem(topic_id, 0, 0, epoch=3)).error_code == pb.NONE
    assert commit_one(broker, idem(topic_id, 0, 1, epoch=2)).error_code == pb.INVALID_PRODUCER_EPOCH
    assert commit_one(broker, idem(topic_id, 0, 99, epoch=2)).error_code == pb.INVALID_PRODUCER_EPOCH
    # Even an exact retry of an older epoch's batch is fenced.
    assert commit_one(broker, idem(topic_id, 0, 0, epoch=2)).error_code == pb.INVALID_PRODUCER_EPOCH
    assert commit_one(broker, idem(topic_id, 0, 1, epoch=3)).assigned_base_offset == 1


def test_new_epoch_must_start_at_sequence_zero(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, idem(topic_id, 0, 0, 3, epoch=0)).error_code == pb.NONE
    assert commit_one(broker, idem(topic_id, 0, 3, epoch=1)).error_code == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
    bumped = commit_one(broker, idem(topic_id, 0, 0, epoch=1))
    assert (bumped.error_code, bumped.is_duplicate, bumped.assigned_base_offset) == (pb.NONE, False, 3)
    assert commit_one(broker, idem(topic_id, 0, 3, epoch=0)).error_code == pb.INVALID_PRODUCER_EPOCH
    assert commit_one(broker, idem(topic_id, 0, 1, epoch=1)).assigned_base_offset == 4


def test_no_producer_state_accepts_any_sequence(broker: Broker) -> None:
    topic_id = topic(broker)
    first = commit_one(broker, idem(topic_id, 0, 1000, 3, epoch=7))
    assert (first.error_code, first.assigned_base_offset) == (pb.NONE, 0)
    assert commit_one(broker, idem(topic_id, 0, 1003, epoch=7)).assigned_base_offset == 3
    other = commit_one(broker, idem(topic_id, 0, 55, pid=PID + 1))
    assert (other.error_code, other.assigned_base_offset) == (pb.NONE, 4)


def test_producer_state_is_per_partition(broker: Broker) -> None:
    topic_id = topic(broker, 2)
    assert commit_one(broker, idem(topic_id, 0, 0, 5, epoch=4)).error_code == pb.NONE
    elsewhere = commit_one(broker, idem(topic_id, 1, 70, epoch=1))
    assert (elsewhere.error_code, elsewhere.is_duplicate) == (pb.NONE, False)


def test_gap_or_step_back_in_sequence_at_same_epoch_is_out_of_order(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, idem(topic_id, 0, 0, 3)).error_code == pb.NONE
    assert commit_one(broker, idem(topic_id, 0, 4)).error_code == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit_one(broker, idem(topic_id, 0, 2)).error_code == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit_one(broker, idem(topic_id, 0, 3)).assigned_base_offset == 3
    assert high_watermark(broker.stub, topic_id, 0) == 4


def test_sequence_wraps_from_max_to_zero(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, idem(topic_id, 0, SEQ_MAX - 1, 2)).error_code == pb.NONE  # last = 2^31-1
    assert commit_one(broker, idem(topic_id, 0, 1)).error_code == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
    wrapped = commit_one(broker, idem(topic_id, 0, 0, 2))
    assert (wrapped.error_code, wrapped.assigned_base_offset) == (pb.NONE, 2)
    straddling = commit_one(broker, idem(topic_id, 0, 2, 1))
    assert straddling.assigned_base_offset == 4
    # A batch whose own sequences wrap, then its successor.
    topic2 = topic(broker)
    assert commit_one(broker, idem(topic2, 0, SEQ_MAX, 3)).error_code == pb.NONE  # sequences 2^31-1, 0, 1
    assert commit_one(broker, idem(topic2, 0, 2)).assigned_base_offset == 3


def test_batches_of_one_commit_are_checked_against_each_other(broker: Broker) -> None:
    topic_id = topic(broker)
    response = broker.commit(
        laid_out(
            [
                idem(topic_id, 0, 0, 2),
                idem(topic_id, 0, 2),
                idem(topic_id, 0, 0, 2),  # retry of the first, inside the same commit
                idem(topic_id, 0, 4),  # gap
                idem(topic_id, 0, 3, epoch=1),  # new epoch must start at 0
                idem(topic_id, 0, 0, epoch=1),  # bump
                idem(topic_id, 0, 3, epoch=0),  # fenced by the bump above
                idem(topic_id, 0, 1, epoch=1),
            ]
        )
    )
    assert codes(response) == [
        pb.NONE,
        pb.NONE,
        pb.NONE,
        pb.OUT_OF_ORDER_SEQUENCE_NUMBER,
        pb.OUT_OF_ORDER_SEQUENCE_NUMBER,
        pb.NONE,
        pb.INVALID_PRODUCER_EPOCH,
        pb.NONE,
    ]
    assert [b.is_duplicate for b in response.batches] == [False, False, True, False, False, False, False, False]
    assert bases(response) == [0, 2, 0, -1, -1, 3, -1, 4]
    assert high_watermark(broker.stub, topic_id, 0) == 5


def test_rejected_idempotent_batch_does_not_advance_producer_state(broker: Broker) -> None:
    topic_id = topic(broker)
    assert commit_one(broker, idem(topic_id, 0, 0)).error_code == pb.NONE
    assert commit_one(broker, idem(topic_id, 0, 5)).error_code == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit_one(broker, idem(topic_id, 0, 6)).error_code == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit_one(broker, idem(topic_id, 0, 1)).error_code == pb.NONE


# ---------------------------------------------------------------- files


def test_file_with_no_accepted_batch_is_still_recorded_awaiting_deletion(broker: Broker) -> None:
    topic_id = topic(broker)
    owner = coordinator_of(broker.stub, topic_id, 0)
    counts_before = describe_coordinator(broker.stub, owner)
    key = new_key()
    response = broker.commit(laid_out([batch(topic_id, 0, magic=4), batch(topic_id, 0, size=0)]), object_key=key)
    assert codes(response) == [pb.INVALID_RECORD, pb.INVALID_RECORD]
    described = describe_file(broker.stub, key)
    assert (described.error_code, described.state, described.has_live_batches) == (
        pb.NONE,
        pb.FILE_STATE_AWAITING_DELETION,
        False,
    )
    assert list(described.coordinator_ids) == [owner]
    after = describe_coordinator(broker.stub, owner)
    assert after.files_awaiting_deletion == counts_before.files_awaiting_deletion + 1
    assert after.live_file_count == counts_before.live_file_count


def test_file_with_no_accepted_batch_and_a_later_owner_awaits_handover(broker: Broker) -> None:
    topic_id, placement = spread_topic(broker)
    key = new_key()
    owners = [placement[0], placement[1]]  # this coordinator is the first owner, not the last
    response = broker.commit([idem(topic_id, 0, 0, epoch=-1)], object_key=key, owner_ids=owners)
    assert codes(response) == [pb.INVALID_RECORD]
    described = describe_file(broker.stub, key)
    assert described.state in (pb.FILE_STATE_AWAITING_HANDOVER, pb.FILE_STATE_AWAITING_DELETION)
    assert not described.has_live_batches
    assert placement[0] in described.coordinator_ids


def test_file_with_only_unknown_partitions_is_not_recorded(broker: Broker) -> None:
    topic_id = topic(broker)
    key = new_key()
    response = broker.commit(laid_out([batch(new_topic_id(), 0), batch(topic_id, 3)]), object_key=key, owner_ids=[0])
    assert codes(response) == [pb.UNKNOWN_TOPIC_OR_PARTITION] * 2
    assert describe_file(broker.stub, key).state == pb.FILE_STATE_UNKNOWN
    assert codes(broker.commit([batch(topic_id, 0)], object_key=key)) == [pb.NONE]


def test_commit_across_every_coordinator_commits_each_part(broker: Broker) -> None:
    topic_id, placement = spread_topic(broker)
    key = new_key()
    order = [3, 0, 2, 1, 0, 3]
    response = broker.commit(
        laid_out([batch(topic_id, p, p + 1) for p in order]),
        object_key=key,
        owner_ids=[placement[2], placement[0], placement[3], placement[1]],
    )
    assert codes(response) == [pb.NONE] * 6
    assert bases(response) == [0, 0, 0, 0, 1, 4]
    assert [high_watermark(broker.stub, topic_id, p) for p in range(4)] == [2, 2, 3, 8]
    described = describe_file(broker.stub, key)
    assert described.state == pb.FILE_STATE_LIVE and described.has_live_batches
    assert sorted(described.coordinator_ids) == [0, 1, 2, 3]
    for p in range(4):
        assert {b.object_key for b in fetch(broker.stub, topic_id, p, 0).batches} == {key}


def test_commit_part_of_one_coordinator_does_not_depend_on_anothers_rejections(broker: Broker) -> None:
    topic_id, placement = spread_topic(broker)
    key = new_key()
    response = broker.commit(
        laid_out([batch(topic_id, 0, magic=9), batch(topic_id, 1, 2), batch(topic_id, 2, size=0)]),
        object_key=key,
        owner_ids=[placement[0], placement[1], placement[2]],
    )
    assert codes(response) == [pb.INVALID_RECORD, pb.NONE, pb.INVALID_RECORD]
    described = describe_file(broker.stub, key)
    assert described.state == pb.FILE_STATE_LIVE
    assert sorted(described.coordinator_ids) == sorted([placement[0], placement[1], placement[2]])


# ---------------------------------------------------------------- free-form fields


@pytest.mark.parametrize("timeout_ms", [-1, 0, 1000, 2**31 - 1])
def test_request_id_and_timeout_take_any_value(broker: Broker, timeout_ms: int) -> None:
    # DESIGN is silent: request_id is the broker's own tag, and timeout_ms <= 0 means the server's default.
    topic_id = topic(broker)
    owner = coordinator_of(broker.stub, topic_id, 0)
    batches = laid_out([batch(topic_id, 0, 2), batch(topic_id, 0, 1)])
    batches[0].request_id, batches[1].request_id = -5, 2**31 - 1
    commit = request(batches, [owner])
    commit.timeout_ms = timeout_ms
    response = broker.stub.CommitFile(commit)
    assert codes(response) == [pb.NONE, pb.NONE]
    assert bases(response) == [0, 2]
