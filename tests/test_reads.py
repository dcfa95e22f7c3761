"""DeleteRecords, ListOffsets, FindBatches, DescribeFiles, DescribeCoordinators through the real socket (DESIGN §4)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import grpc
import pytest

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
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
    list_offset,
    log_start,
    new_topic_id,
    topic_name,
)
from tests.in_process import InProcessNode

Batch = pb.CommitFileRequest.Batch
BAD_IDS = {"empty": b"", "15 bytes": b"\x05" * 15, "17 bytes": b"\x05" * 17, "all zeros": b"\x00" * 16}
FUTURE_MS = 5_000_000_000_000  # year 2128: later than any append time in these tests


# ---------------------------------------------------------------- helpers


def new_key() -> str:
    return f"wal/{uuid.uuid4()}"


def topic(broker: Broker, partitions: int = 1) -> bytes:
    return broker.create_topic(topic_name("reads"), partitions)


def fill(
    broker: Broker, topic_id: bytes, partition: int, records: Sequence[int], size: int = 100, key: str | None = None
) -> pb.CommitFileResponse:
    """One commit of one batch per entry of `records` (its record count) to one partition."""
    response = broker.commit(laid_out([batch(topic_id, partition, n, size=size) for n in records]), object_key=key)
    assert all(b.error_code == pb.NONE for b in response.batches), response
    return response


def ranges(result: pb.FindBatchesResponse.PartitionResult) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in result.batches]


def offsets_of(result: pb.ListOffsetsResponse.PartitionResult) -> tuple[int, int, int]:
    return result.error_code, result.timestamp, result.offset


FetchItem = tuple[bytes, int, int, int]  # topic id, partition, offset, max partition bytes


def fetch_many(
    stub: pb_grpc.DisklessCoordinatorStub, items: Sequence[FetchItem], fetch_max_bytes: int, max_batches: int = 0
) -> list[pb.FindBatchesResponse.PartitionResult]:
    """One FindBatches call; consecutive items of one topic go in one Topic entry. Results in request order."""
    request = pb.FindBatchesRequest(fetch_max_bytes=fetch_max_bytes, max_batches_per_partition=max_batches)
    for topic_id, partition, offset, max_bytes in items:
        if not request.topics or request.topics[-1].topic_id != topic_id:
            request.topics.add(topic_id=topic_id)
        request.topics[-1].partitions.add(partition=partition, offset=offset, max_partition_fetch_bytes=max_bytes)
    response = stub.FindBatches(request)
    return [p for t in response.topics for p in t.partitions]


BIG = 2**31 - 1


# ---------------------------------------------------------------- DeleteRecords


def test_delete_records_minus_one_deletes_up_to_the_high_watermark(broker: Broker) -> None:
    topic_id = topic(broker)
    key = new_key()
    fill(broker, topic_id, 0, [3, 4], key=key)
    result = delete_records(broker.stub, topic_id, 0, -1)
    assert (result.error_code, result.low_watermark) == (pb.NONE, 7)
    assert log_start(broker.stub, topic_id, 0) == 7
    fetched = fetch(broker.stub, topic_id, 0, 7)
    assert (fetched.error_code, fetched.log_start_offset, fetched.high_watermark) == (pb.NONE, 7, 7)
    assert not fetched.batches
    # Its only file has no live batch left.
    assert describe_file(broker.stub, key).state == pb.FILE_STATE_AWAITING_DELETION
    # New batches continue from the high watermark.
    assert fill(broker, topic_id, 0, [1]).batches[0].assigned_base_offset == 7


@pytest.mark.parametrize("offset", [-2, -3, -100, -(2**63), 8, 9, 2**63 - 1])
def test_delete_records_outside_the_log_is_offset_out_of_range(broker: Broker, offset: int) -> None:
    topic_id = topic(broker)
    fill(broker, topic_id, 0, [3, 4])
    assert delete_records(broker.stub, topic_id, 0, 2).low_watermark == 2
    result = delete_records(broker.stub, topic_id, 0, offset)
    assert (result.error_code, result.low_watermark, result.partition) == (pb.OFFSET_OUT_OF_RANGE, -1, 0)
    assert result.error_message
    assert log_start(broker.stub, topic_id, 0) == 2
    assert ranges(fetch(broker.stub, topic_id, 0, 2)) == [(0, 2), (3, 6)]


def test_delete_records_on_an_empty_partition(broker: Broker) -> None:
    topic_id = topic(broker)
    assert (delete_records(broker.stub, topic_id, 0, -1).low_watermark, log_start(broker.stub, topic_id, 0)) == (0, 0)
    assert delete_records(broker.stub, topic_id, 0, 0).error_code == pb.NONE
    assert delete_records(broker.stub, topic_id, 0, 1).error_code == pb.OFFSET_OUT_OF_RANGE


def test_delete_records_at_or_below_log_start_changes_nothing_and_never_goes_back(broker: Broker) -> None:
    topic_id = topic(broker)
    fill(broker, topic_id, 0, [5, 5])
    assert delete_records(broker.stub, topic_id, 0, 6).low_watermark == 6
    coordinator = coordinator_of(broker.stub, topic_id, 0)
    end_before = describe_coordinator(broker.stub, coordinator).log_end_offset
    for offset in (6, 3, 0):
        result = delete_records(broker.stub, topic_id, 0, offset)
        assert (result.error_code, result.low_watermark) == (pb.NONE, 6)
    assert describe_coordinator(broker.stub, coordinator).log_end_offset == end_before  # nothing written
    assert log_start(broker.stub, topic_id, 0) == 6
    assert delete_records(broker.stub, topic_id, 0, 10).low_watermark == 10


def test_delete_records_keeps_a_straddling_batch_and_serves_it(broker: Broker) -> None:
    topic_id = topic(broker)
    coordinator = coordinator_of(broker.stub, topic_id, 0)
    fill(broker, topic_id, 0, [5, 5, 5])
    live_before = describe_coordinator(broker.stub, coordinator).live_batch_count
    assert delete_records(broker.stub, topic_id, 0, 7).low_watermark == 7
    assert describe_coordinator(broker.stub, coordinator).live_batch_count == live_before - 1
    served = fetch(broker.stub, topic_id, 0, 7)
    assert (served.error_code, served.log_start_offset, served.high_watermark) == (pb.NONE, 7, 15)
    assert ranges(served) == [(5, 9), (10, 14)]
    below = fetch(broker.stub, topic_id, 0, 6)
    assert (below.error_code, below.log_start_offset, below.high_watermark) == (pb.OFFSET_OUT_OF_RANGE, 7, 15)
    assert not below.batches
    # A boundary exactly at a batch start removes the batch before it.
    assert delete_records(broker.stub, topic_id, 0, 10).low_watermark == 10
    assert ranges(fetch(broker.stub, topic_id, 0, 10)) == [(10, 14)]


def test_delete_records_repeated_items_are_processed_in_order(broker: Broker) -> None:
    topic_id, other = topic(broker, 2), topic(broker)
    fill(broker, topic_id, 0, [10])
    fill(broker, topic_id, 1, [4])
    response = broker.stub.DeleteRecords(
        pb.DeleteRecordsRequest(
            topics=[
                pb.DeleteRecordsRequest.Topic(
                    topic_id=topic_id,
                    partitions=[
                        pb.DeleteRecordsRequest.Partition(partition=0, offset=5),
                        pb.DeleteRecordsRequest.Partition(partition=0, offset=3),
                        pb.DeleteRecordsRequest.Partition(partition=1, offset=-1),
                        pb.DeleteRecordsRequest.Partition(partition=0, offset=11),
                        pb.DeleteRecordsRequest.Partition(partition=0, offset=-1),
                        pb.DeleteRecordsRequest.Partition(partition=9, offset=0),
                    ],
                ),
                pb.DeleteRecordsRequest.Topic(
                    topic_id=b"\x00" * 16, partitions=[pb.DeleteRecordsRequest.Partition(partition=0, offset=0)]
                ),
                pb.DeleteRecordsRequest.Topic(
                    topic_id=other, partitions=[pb.DeleteRecordsRequest.Partition(partition=0, offset=0)]
                ),
            ]
        )
    )
    got = [[(p.partition, p.error_code, p.low_watermark) for p in t.partitions] for t in response.topics]
    assert got == [
        [
            (0, pb.NONE, 5),
            (0, pb.NONE, 5),
            (1, pb.NONE, 4),
            (0, pb.OFFSET_OUT_OF_RANGE, -1),
            (0, pb.NONE, 10),
            (9, pb.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ],
        [(0, pb.INVALID_REQUEST, -1)],
        [(0, pb.NONE, 0)],
    ]
    assert [t.topic_id for t in response.topics] == [topic_id, b"\x00" * 16, other]
    assert log_start(broker.stub, topic_id, 0) == 10


@pytest.mark.parametrize("bad_id", list(BAD_IDS))
def test_delete_records_with_a_malformed_topic_id_is_invalid_request(broker: Broker, bad_id: str) -> None:
    result = delete_records(broker.stub, BAD_IDS[bad_id], 0, -1)
    assert (result.error_code, result.low_watermark) == (pb.INVALID_REQUEST, -1)


def test_delete_records_of_an_unknown_partition(broker: Broker) -> None:
    topic_id = topic(broker)
    for unknown_topic, partition in ((topic_id, 1), (topic_id, -1), (new_topic_id(), 0)):
        result = delete_records(broker.stub, unknown_topic, partition, -1)
        assert (result.error_code, result.low_watermark) == (pb.UNKNOWN_TOPIC_OR_PARTITION, -1)


# ---------------------------------------------------------------- ListOffsets


def _timestamps_partition(broker: Broker) -> bytes:
    """Batches 0..4 ts 100, 5..9 ts 300, 10..14 ts 200, 15..19 ts 300 (CREATE_TIME)."""
    topic_id = topic(broker)
    batches = [batch(topic_id, 0, 5, max_timestamp=ts) for ts in (100, 300, 200, 300)]
    assert all(b.error_code == pb.NONE for b in broker.commit(laid_out(batches)).batches)
    return topic_id


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (-1, (-1, 20)),
        (-2, (-1, 0)),
        (-4, (-1, 0)),
        (-5, (-1, -1)),
        (-3, (300, 5)),
        (0, (100, 0)),
        (100, (100, 0)),
        (101, (300, 5)),
        (200, (300, 5)),
        (300, (300, 5)),
        (301, (-1, -1)),
        (2**63 - 1, (-1, -1)),
    ],
)
def test_list_offsets(broker: Broker, timestamp: int, expected: tuple[int, int]) -> None:
    topic_id = _timestamps_partition(broker)
    result = list_offset(broker.stub, topic_id, 0, timestamp)
    assert offsets_of(result) == (pb.NONE, *expected)


def test_list_offsets_clamp_to_the_log_start(broker: Broker) -> None:
    topic_id = _timestamps_partition(broker)
    assert delete_records(broker.stub, topic_id, 0, 7).low_watermark == 7
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -2)) == (pb.NONE, -1, 7)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -4)) == (pb.NONE, -1, 7)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -3)) == (pb.NONE, 300, 7)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, 0)) == (pb.NONE, 300, 7)  # the batch at 0..4 is gone
    assert offsets_of(list_offset(broker.stub, topic_id, 0, 150)) == (pb.NONE, 300, 7)
    assert delete_records(broker.stub, topic_id, 0, 12).low_watermark == 12
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -3)) == (pb.NONE, 300, 15)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, 0)) == (pb.NONE, 200, 12)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -1)) == (pb.NONE, -1, 20)


def test_list_offsets_use_the_append_time_of_log_append_time_batches(broker: Broker) -> None:
    topic_id = topic(broker, 2)
    response = broker.commit(
        laid_out(
            [
                batch(topic_id, 0, 2, max_timestamp=1000),
                batch(topic_id, 0, 3, max_timestamp=1, timestamp_type=pb.LOG_APPEND_TIME),
                batch(topic_id, 0, 1, max_timestamp=2000),
            ]
        )
    )
    appended = response.batches[1].log_append_time
    assert appended > 2000
    # Effective timestamps: 1000, the append time, 2000.
    assert offsets_of(list_offset(broker.stub, topic_id, 0, 1500)) == (pb.NONE, appended, 2)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, appended)) == (pb.NONE, appended, 2)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -3)) == (pb.NONE, appended, 2)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, appended + 1)) == (pb.NONE, -1, -1)
    # A LOG_APPEND_TIME batch's own max timestamp, however large, is not its timestamp.
    response = broker.commit(
        laid_out(
            [
                batch(topic_id, 1, 2, max_timestamp=2 * FUTURE_MS, timestamp_type=pb.LOG_APPEND_TIME),
                batch(topic_id, 1, 2, max_timestamp=FUTURE_MS),
            ]
        )
    )
    appended = response.batches[0].log_append_time
    assert offsets_of(list_offset(broker.stub, topic_id, 1, -3)) == (pb.NONE, FUTURE_MS, 2)
    assert offsets_of(list_offset(broker.stub, topic_id, 1, appended)) == (pb.NONE, appended, 0)
    assert offsets_of(list_offset(broker.stub, topic_id, 1, FUTURE_MS + 1)) == (pb.NONE, -1, -1)


def test_list_offsets_skip_batches_without_timestamps(broker: Broker) -> None:
    topic_id = topic(broker)
    broker.commit(
        laid_out(
            [
                batch(topic_id, 0, 2, magic=0, timestamp_type=pb.NO_TIMESTAMP_TYPE, max_timestamp=-1),
                batch(topic_id, 0, 2, max_timestamp=50),
            ]
        )
    )
    assert offsets_of(list_offset(broker.stub, topic_id, 0, 0)) == (pb.NONE, 50, 2)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -3)) == (pb.NONE, 50, 2)


def test_list_offsets_of_an_empty_partition(broker: Broker) -> None:
    topic_id = topic(broker)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -1)) == (pb.NONE, -1, 0)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -2)) == (pb.NONE, -1, 0)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -4)) == (pb.NONE, -1, 0)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -5)) == (pb.NONE, -1, -1)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, -3)) == (pb.NONE, -1, -1)
    assert offsets_of(list_offset(broker.stub, topic_id, 0, 0)) == (pb.NONE, -1, -1)


@pytest.mark.parametrize("timestamp", [-6, -7, -100, -(2**63)])
def test_list_offsets_other_negative_timestamps_are_unsupported_version(broker: Broker, timestamp: int) -> None:
    topic_id = topic(broker)
    fill(broker, topic_id, 0, [1])
    assert offsets_of(list_offset(broker.stub, topic_id, 0, timestamp)) == (pb.UNSUPPORTED_VERSION, -1, -1)


def test_list_offsets_unknown_and_malformed_items_in_request_order(broker: Broker) -> None:
    topic_id = topic(broker, 2)
    fill(broker, topic_id, 1, [3])
    Part = pb.ListOffsetsRequest.Partition  # noqa: N806
    response = broker.stub.ListOffsets(
        pb.ListOffsetsRequest(
            topics=[
                pb.ListOffsetsRequest.Topic(
                    topic_id=topic_id,
                    partitions=[Part(partition=1, timestamp=-1), Part(partition=2, timestamp=-1), Part(partition=1)],
                ),
                pb.ListOffsetsRequest.Topic(topic_id=new_topic_id(), partitions=[Part(partition=0, timestamp=-1)]),
                *(
                    pb.ListOffsetsRequest.Topic(topic_id=bad, partitions=[Part(partition=0, timestamp=-1)])
                    for bad in BAD_IDS.values()
                ),
                pb.ListOffsetsRequest.Topic(topic_id=topic_id, partitions=[Part(partition=1, timestamp=-2)]),
            ]
        )
    )
    got = [[(p.partition, *offsets_of(p)) for p in t.partitions] for t in response.topics]
    assert got == [
        [(1, pb.NONE, -1, 3), (2, pb.UNKNOWN_TOPIC_OR_PARTITION, -1, -1), (1, pb.NONE, 1_700_000_000_000, 0)],
        [(0, pb.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)],
        *([[(0, pb.INVALID_REQUEST, -1, -1)]] * len(BAD_IDS)),
        [(1, pb.NONE, -1, 0)],
    ]


def test_list_offsets_is_strict_about_records_pending_at_its_arrival(broker: Broker) -> None:
    """Each commit below is one metadata record: a ListOffsets sent once the coordinator's log end is L must
    see every commit checked below L, whether or not it was applied yet."""
    topic_id = topic(broker)
    coordinator = coordinator_of(broker.stub, topic_id, 0)
    start = describe_coordinator(broker.stub, coordinator).log_end_offset
    futures = [broker.stub.CommitFile.future(broker_request(topic_id, coordinator)) for _ in range(300)]
    while not all(f.done() for f in futures):
        checked = describe_coordinator(broker.stub, coordinator).log_end_offset - start
        assert high_watermark(broker.stub, topic_id, 0) >= checked
    assert all(f.result().batches[0].error_code == pb.NONE for f in futures)
    assert high_watermark(broker.stub, topic_id, 0) == 300


def broker_request(topic_id: bytes, owner: int) -> pb.CommitFileRequest:
    return pb.CommitFileRequest(
        object_key=new_key(),
        object_format=1,
        file_size=100,
        uploader_broker_id=1,
        owner_ids=[owner],
        batches=[batch(topic_id, 0)],
    )


# ---------------------------------------------------------------- FindBatches: single partition


def test_find_batches_returns_batches_from_the_offset_with_every_field(broker: Broker) -> None:
    topic_id = topic(broker)
    key = new_key()
    batches = laid_out(
        [
            batch(topic_id, 0, 3, size=40, max_timestamp=111),
            batch(topic_id, 0, 2, size=60, magic=1, timestamp_type=pb.LOG_APPEND_TIME, max_timestamp=222),
            batch(topic_id, 0, 4, size=80, magic=0, timestamp_type=pb.NO_TIMESTAMP_TYPE, max_timestamp=-1),
        ]
    )
    response = broker.commit(batches, object_key=key)
    appended = response.batches[1].log_append_time
    result = fetch(broker.stub, topic_id, 0, 4)  # inside the second batch
    assert (result.error_code, result.log_start_offset, result.high_watermark) == (pb.NONE, 0, 9)
    got = [
        (
            b.object_key,
            b.magic,
            b.byte_offset,
            b.byte_size,
            b.base_offset,
            b.last_offset,
            b.log_append_timestamp,
            b.batch_max_timestamp,
            b.timestamp_type,
        )
        for b in result.batches
    ]
    assert got == [
        (key, 1, 40, 60, 3, 4, appended, 222, pb.LOG_APPEND_TIME),
        (key, 0, 100, 80, 5, 8, appended, -1, pb.NO_TIMESTAMP_TYPE),
    ]
    everything = fetch(broker.stub, topic_id, 0, 0)
    assert ranges(everything) == [(0, 2), (3, 4), (5, 8)]
    assert len({b.batch_id for b in everything.batches}) == 3
    assert everything.batches[0].log_append_timestamp == appended  # CREATE_TIME batch: the commit's time too
    assert [b.batch_id for b in result.batches] == [b.batch_id for b in everything.batches[1:]]


def test_find_batches_in_offset_order_across_files(broker: Broker) -> None:
    topic_id = topic(broker)
    keys = [new_key() for _ in range(3)]
    for key in keys:
        fill(broker, topic_id, 0, [2, 1], key=key)
    result = fetch(broker.stub, topic_id, 0, 0)
    assert ranges(result) == [(0, 1), (2, 2), (3, 4), (5, 5), (6, 7), (8, 8)]
    assert [b.object_key for b in result.batches] == [k for k in keys for _ in range(2)]


def test_find_batches_at_the_high_watermark_is_none_without_batches(broker: Broker) -> None:
    topic_id = topic(broker, 2)
    fill(broker, topic_id, 0, [3])
    at_end = fetch(broker.stub, topic_id, 0, 3)
    assert (at_end.error_code, at_end.log_start_offset, at_end.high_watermark, len(at_end.batches)) == (
        pb.NONE,
        0,
        3,
        0,
    )
    empty = fetch(broker.stub, topic_id, 1, 0)
    assert (empty.error_code, empty.log_start_offset, empty.high_watermark, len(empty.batches)) == (pb.NONE, 0, 0, 0)


@pytest.mark.parametrize("offset", [-1, -(2**63), 1, 4, 11, 2**63 - 1])
def test_find_batches_out_of_range_reports_the_real_log_start_and_high_watermark(broker: Broker, offset: int) -> None:
    topic_id = topic(broker)
    fill(broker, topic_id, 0, [5, 5])
    assert delete_records(broker.stub, topic_id, 0, 5).low_watermark == 5
    result = fetch(broker.stub, topic_id, 0, offset)
    assert (result.error_code, result.log_start_offset, result.high_watermark) == (pb.OFFSET_OUT_OF_RANGE, 5, 10)
    assert not result.batches
    assert result.error_message


def test_find_batches_unknown_and_malformed(broker: Broker) -> None:
    topic_id = topic(broker)
    for topic_key, partition, code in [
        (topic_id, 1, pb.UNKNOWN_TOPIC_OR_PARTITION),
        (topic_id, -1, pb.UNKNOWN_TOPIC_OR_PARTITION),
        (new_topic_id(), 0, pb.UNKNOWN_TOPIC_OR_PARTITION),
        *((bad, 0, pb.INVALID_REQUEST) for bad in BAD_IDS.values()),
    ]:
        result = fetch(broker.stub, topic_key, partition, 0)
        assert (result.error_code, result.log_start_offset, result.high_watermark) == (code, -1, -1)
        assert result.partition == partition and not result.batches


# ---------------------------------------------------------------- FindBatches: the byte budget


@pytest.fixture
def three(broker: Broker) -> tuple[bytes, bytes]:
    """Two topics: the first with partitions 0 (3 batches), 1 (2 batches), 2 (2 batches); the second with
    one partition of 2 batches. Every batch is 100 bytes and 1 record."""
    first, second = topic(broker, 3), topic(broker)
    fill(broker, first, 0, [1, 1, 1])
    fill(broker, first, 1, [1, 1])
    fill(broker, first, 2, [1, 1])
    fill(broker, second, 0, [1, 1])
    return first, second


def counts(results: Sequence[pb.FindBatchesResponse.PartitionResult]) -> list[int]:
    return [len(r.batches) for r in results]


@pytest.mark.parametrize(
    ("fetch_max", "partition_max", "expected"),
    [
        (BIG, BIG, [3, 2, 2, 2]),
        (250, BIG, [3, 0, 0, 0]),  # 0, 100, 200 < 250: three batches, then the budget is spent
        (300, BIG, [3, 0, 0, 0]),
        (301, BIG, [3, 1, 0, 0]),
        (500, BIG, [3, 2, 0, 0]),
        (501, BIG, [3, 2, 1, 0]),
        (BIG, 150, [2, 2, 2, 2]),  # per partition: 0, 100 < 150
        (BIG, 100, [1, 1, 1, 1]),
        (BIG, 101, [2, 2, 2, 2]),
        (BIG, 1, [1, 1, 1, 1]),
        (BIG, 0, [1, 0, 0, 0]),  # a limit <= 0 lets only the request's first batch through
        (BIG, -7, [1, 0, 0, 0]),
        (0, BIG, [1, 0, 0, 0]),
        (-1, BIG, [1, 0, 0, 0]),
        (1, 1, [1, 0, 0, 0]),
        (350, 150, [2, 2, 0, 0]),
    ],
)
def test_find_batches_byte_budget_in_request_order(
    broker: Broker, three: tuple[bytes, bytes], fetch_max: int, partition_max: int, expected: list[int]
) -> None:
    first, second = three
    items = [(first, 0, 0, partition_max), (first, 1, 0, partition_max), (first, 2, 0, partition_max)]
    results = fetch_many(broker.stub, [*items, (second, 0, 0, partition_max)], fetch_max)
    assert counts(results) == expected
    assert all(r.error_code == pb.NONE for r in results)
    # Every partition reports its watermarks, reached by the budget or not.
    assert [r.high_watermark for r in results] == [3, 2, 2, 2]
    for result in results:
        assert ranges(result) == [(i, i) for i in range(len(result.batches))]


def test_find_batches_budget_follows_request_order_not_partition_order(
    broker: Broker, three: tuple[bytes, bytes]
) -> None:
    first, second = three
    results = fetch_many(broker.stub, [(second, 0, 0, BIG), (first, 2, 0, BIG), (first, 0, 0, BIG)], 150)
    assert counts(results) == [2, 0, 0]
    results = fetch_many(broker.stub, [(first, 2, 1, BIG), (first, 0, 0, BIG)], 150)
    assert counts(results) == [1, 1]


def test_find_batches_partition_limit_is_per_partition_and_zero_only_spares_the_first_batch(
    broker: Broker, three: tuple[bytes, bytes]
) -> None:
    first, second = three
    results = fetch_many(broker.stub, [(first, 0, 0, 0), (first, 1, 0, BIG), (second, 0, 0, -1)], BIG)
    assert counts(results) == [1, 2, 0]
    results = fetch_many(broker.stub, [(first, 1, 0, BIG), (first, 0, 0, 0)], BIG)
    assert counts(results) == [2, 0]
    assert results[1].error_code == pb.NONE


def test_find_batches_first_batch_larger_than_every_limit_is_returned(broker: Broker) -> None:
    topic_id = topic(broker, 2)
    fill(broker, topic_id, 0, [1, 1], size=1000)
    fill(broker, topic_id, 1, [1], size=10)
    results = fetch_many(broker.stub, [(topic_id, 0, 0, 10), (topic_id, 1, 0, 10)], 10)
    assert counts(results) == [1, 0]
    assert results[0].batches[0].byte_size == 1000


def test_find_batches_budget_skips_partitions_with_nothing_to_read(broker: Broker, three: tuple[bytes, bytes]) -> None:
    first, second = three
    results = fetch_many(
        broker.stub,
        [(first, 0, 3, BIG), (first, 1, 9, BIG), (first, 2, 1, BIG), (second, 0, 0, BIG)],
        150,
    )
    # At the high watermark and out of range take nothing from the budget; then 0 < 150 and 100 < 150.
    assert [r.error_code for r in results] == [pb.NONE, pb.OFFSET_OUT_OF_RANGE, pb.NONE, pb.NONE]
    assert counts(results) == [0, 0, 1, 1]
    # The request's first batch may come from a later partition, whatever that partition's limit.
    results = fetch_many(broker.stub, [(first, 0, 3, BIG), (first, 1, 0, 0), (first, 2, 0, 0)], BIG)
    assert counts(results) == [0, 1, 0]


def test_find_batches_after_the_budget_unknown_and_out_of_range_keep_their_errors(
    broker: Broker, three: tuple[bytes, bytes]
) -> None:
    # DESIGN: the budget applies to partitions with batches to return; errors are reported regardless.
    first, second = three
    results = fetch_many(
        broker.stub,
        [(first, 0, 0, BIG), (first, 1, 5, BIG), (first, 7, 0, BIG), (second, 0, 2, BIG), (second, 0, 0, BIG)],
        1,
    )
    assert [r.error_code for r in results] == [
        pb.NONE,
        pb.OFFSET_OUT_OF_RANGE,
        pb.UNKNOWN_TOPIC_OR_PARTITION,
        pb.NONE,
        pb.NONE,
    ]
    assert counts(results) == [1, 0, 0, 0, 0]
    assert [(r.log_start_offset, r.high_watermark) for r in results] == [(0, 3), (0, 2), (-1, -1), (0, 2), (0, 2)]


@pytest.mark.parametrize(("max_batches", "expected"), [(1, [1, 1, 1, 1]), (2, [2, 2, 2, 2]), (0, [3, 2, 2, 2])])
def test_find_batches_max_batches_per_partition(
    broker: Broker, three: tuple[bytes, bytes], max_batches: int, expected: list[int]
) -> None:
    first, second = three
    items = [(first, 0, 0, BIG), (first, 1, 0, BIG), (first, 2, 0, BIG), (second, 0, 0, BIG)]
    assert counts(fetch_many(broker.stub, items, BIG, max_batches)) == expected
    if max_batches == 0:
        assert counts(fetch_many(broker.stub, items, BIG, -1)) == expected


def test_find_batches_max_batches_and_bytes_together(broker: Broker, three: tuple[bytes, bytes]) -> None:
    first, second = three
    items = [(first, 0, 0, BIG), (first, 1, 0, BIG), (first, 2, 0, BIG), (second, 0, 0, BIG)]
    # One batch per partition, 100 bytes each: 0, 100, 200 < 250, then spent.
    assert counts(fetch_many(broker.stub, items, 250, 1)) == [1, 1, 1, 0]


def test_find_batches_after_delete_records_serves_the_straddling_batch_first(broker: Broker) -> None:
    topic_id = topic(broker)
    fill(broker, topic_id, 0, [4, 4])
    assert delete_records(broker.stub, topic_id, 0, 6).low_watermark == 6
    result = fetch(broker.stub, topic_id, 0, 6, max_batches=1)
    assert (result.log_start_offset, ranges(result)) == (6, [(4, 7)])


# ---------------------------------------------------------------- DescribeFiles


def test_describe_files_unknown_live_bad_and_repeated_keys_in_order(broker: Broker) -> None:
    topic_id = topic(broker)
    live = new_key()
    fill(broker, topic_id, 0, [1], key=live)
    unknown = new_key()
    keys = [live, "", unknown, "k" * 1025, live, "é" * 513]
    response = broker.stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=keys))
    got = [(f.object_key, f.error_code, f.state, f.has_live_batches, list(f.coordinator_ids)) for f in response.files]
    owner = coordinator_of(broker.stub, topic_id, 0)
    assert got == [
        (live, pb.NONE, pb.FILE_STATE_LIVE, True, [owner]),
        ("", pb.INVALID_REQUEST, pb.FILE_STATE_UNKNOWN, False, []),
        (unknown, pb.NONE, pb.FILE_STATE_UNKNOWN, False, []),
        ("k" * 1025, pb.INVALID_REQUEST, pb.FILE_STATE_UNKNOWN, False, []),
        (live, pb.NONE, pb.FILE_STATE_LIVE, True, [owner]),
        ("é" * 513, pb.INVALID_REQUEST, pb.FILE_STATE_UNKNOWN, False, []),
    ]


def test_describe_files_state_is_the_most_alive_among_the_coordinators(broker: Broker) -> None:
    topic_id = topic(broker, broker.coordinators)
    placement = {p: coordinator_of(broker.stub, topic_id, p) for p in range(broker.coordinators)}
    first, last = placement[0], placement[1]
    assert first != last
    key = new_key()
    response = broker.commit(
        laid_out([batch(topic_id, 0, 2), batch(topic_id, 1, 3)]), object_key=key, owner_ids=[first, last]
    )
    assert [b.error_code for b in response.batches] == [pb.NONE, pb.NONE]
    described = describe_file(broker.stub, key)
    assert (described.state, described.has_live_batches, sorted(described.coordinator_ids)) == (
        pb.FILE_STATE_LIVE,
        True,
        sorted([first, last]),
    )
    # The first owner's batches go: it awaits hand-over, the last owner is still live: LIVE wins.
    assert delete_records(broker.stub, topic_id, 0, -1).error_code == pb.NONE
    described = describe_file(broker.stub, key)
    assert (described.state, described.has_live_batches) == (pb.FILE_STATE_LIVE, True)
    assert sorted(described.coordinator_ids) == sorted([first, last])
    # The last owner's go too: it awaits deletion; AWAITING_HANDOVER is more alive than AWAITING_DELETION.
    assert delete_records(broker.stub, topic_id, 1, -1).error_code == pb.NONE
    described = describe_file(broker.stub, key)
    assert (described.state, described.has_live_batches) == (pb.FILE_STATE_AWAITING_HANDOVER, False)


def test_describe_files_awaiting_deletion_when_the_only_owner_has_no_live_batch(broker: Broker) -> None:
    topic_id = topic(broker)
    key = new_key()
    fill(broker, topic_id, 0, [2, 2], key=key)
    assert delete_records(broker.stub, topic_id, 0, 2).error_code == pb.NONE
    assert describe_file(broker.stub, key).state == pb.FILE_STATE_LIVE
    assert delete_records(broker.stub, topic_id, 0, 4).error_code == pb.NONE
    described = describe_file(broker.stub, key)
    assert (described.state, described.has_live_batches) == (pb.FILE_STATE_AWAITING_DELETION, False)
    assert list(described.coordinator_ids) == [coordinator_of(broker.stub, topic_id, 0)]


def test_describe_files_with_no_keys(broker: Broker) -> None:
    assert not broker.stub.DescribeFiles(pb.DescribeFilesRequest()).files


# ---------------------------------------------------------------- DescribeCoordinators


def test_describe_coordinators_of_a_fresh_node_and_its_log_positions_as_exclusive_ends(
    fresh_node: InProcessNode,
) -> None:
    stub = fresh_node.start().stub
    broker = Broker(stub, fresh_node.coordinators)
    described = stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators
    assert [c.coordinator_id for c in described] == [0, 1, 2, 3]
    for c in described:
        assert (c.error_code, c.state) == (pb.NONE, "ACTIVE")
        assert (c.leader.coordinator_id, c.leader.leader_node_id, c.leader.leader_epoch) == (c.coordinator_id, 0, 1)
        assert (c.leader.host, c.leader.port) == ("127.0.0.1", fresh_node.port)
        assert (c.partition_count, c.live_file_count, c.live_batch_count) == (0, 0, 0)
        assert (c.oldest_live_file_timestamp, c.files_awaiting_deletion, c.files_awaiting_handover) == (-1, 0, 0)
        assert c.last_snapshot_end_offset == -1
        # One record written at load (the leader change, offset 0): the next offset to write is 1.
        assert (c.log_start_offset, c.log_end_offset, c.high_watermark, c.applied_offset) == (0, 1, 1, 1)

    topic_id = broker.create_topic(topic_name(), 1)
    owner = coordinator_of(stub, topic_id, 0)
    assert _positions(stub, owner) == (2, 2, 2)
    appended = broker.commit([batch(topic_id, 0, 3, timestamp_type=pb.LOG_APPEND_TIME)]).batches[0].log_append_time
    after = describe_coordinator(stub, owner)
    assert (after.log_end_offset, after.high_watermark, after.applied_offset) == (3, 3, 3)
    assert (after.partition_count, after.live_file_count, after.live_batch_count) == (1, 1, 1)
    assert after.oldest_live_file_timestamp == appended
    fresh_node.advance(5)
    broker.commit([batch(topic_id, 0, 1)])
    after = describe_coordinator(stub, owner)
    assert (after.live_file_count, after.live_batch_count, after.oldest_live_file_timestamp) == (2, 2, appended)
    assert broker.commit([batch(topic_id, 0, magic=9)]).batches[0].error_code == pb.INVALID_RECORD
    assert describe_coordinator(stub, owner).files_awaiting_deletion == 1
    assert _positions(stub, owner) == (5, 5, 5)
    assert delete_records(stub, topic_id, 0, 3).error_code == pb.NONE  # the first file's only batch goes
    after = describe_coordinator(stub, owner)
    assert (after.live_file_count, after.live_batch_count, after.files_awaiting_deletion) == (1, 1, 2)
    assert after.oldest_live_file_timestamp > appended
    assert _positions(stub, owner) == (6, 6, 6)
    # The other coordinators saw nothing.
    for other in set(range(4)) - {owner}:
        assert _positions(stub, other) == (1, 1, 1)
    # A restart starts a new leader epoch with one more record.
    fresh_node.restart()
    again = describe_coordinator(fresh_node.stub, owner)
    assert (again.leader.leader_epoch, again.log_end_offset, again.applied_offset) == (2, 7, 7)
    assert (again.live_file_count, again.files_awaiting_deletion) == (1, 2)


def _positions(stub: pb_grpc.DisklessCoordinatorStub, coordinator_id: int) -> tuple[int, int, int]:
    described = describe_coordinator(stub, coordinator_id)
    return described.log_end_offset, described.high_watermark, described.applied_offset


def test_describe_coordinators_answers_in_request_order_with_not_coordinator_for_unknown_ids(
    broker: Broker,
) -> None:
    described = broker.stub.DescribeCoordinators(
        pb.DescribeCoordinatorsRequest(coordinator_ids=[2, 4, -1, 0, 2, 1000])
    ).coordinators
    assert [(c.coordinator_id, c.error_code) for c in described] == [
        (2, pb.NONE),
        (4, pb.NOT_COORDINATOR),
        (-1, pb.NOT_COORDINATOR),
        (0, pb.NONE),
        (2, pb.NONE),
        (1000, pb.NOT_COORDINATOR),
    ]
    assert all(c.error_message for c in described if c.error_code != pb.NONE)
    assert described[0].leader.coordinator_id == 2 and described[3].leader.coordinator_id == 0


def test_describe_coordinators_positions_advance_by_one_per_operation(broker: Broker) -> None:
    topic_id = topic(broker)
    owner = coordinator_of(broker.stub, topic_id, 0)
    start = describe_coordinator(broker.stub, owner)
    assert start.log_end_offset == start.high_watermark == start.applied_offset
    assert start.log_end_offset > start.log_start_offset >= 0
    fill(broker, topic_id, 0, [1, 2, 3])
    delete_records(broker.stub, topic_id, 0, 1)
    delete_records(broker.stub, topic_id, 0, 0)  # no change, no record
    assert _positions(broker.stub, owner) == (start.log_end_offset + 2,) * 3


def test_requests_too_large_for_item_limits_are_refused_as_a_whole(broker: Broker) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        broker.stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=["k"] * 10001))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


PAST_ITEMS_MAX = 10_001  # one past diskless.coordinator.request.max.items' default


@pytest.mark.parametrize("verb", ["ListOffsets", "FindBatches", "DeleteRecords", "FindCoordinator"])
def test_partition_lists_past_the_item_bound_are_refused_as_a_whole(broker: Broker, verb: str) -> None:
    """Every call carrying a list of partitions is bounded by request.max.items, before any work. Kills
    `coordinators.limit_items(...)` removed from reads/list_offsets.py (a survivor of the mutation run,
    docs/testing.md), and the same line in the other three verbs."""
    topic_id = new_topic_id()
    requests = {
        "ListOffsets": lambda: broker.stub.ListOffsets(pb.ListOffsetsRequest(topics=[pb.ListOffsetsRequest.Topic(
            topic_id=topic_id, partitions=[pb.ListOffsetsRequest.Partition(partition=p, timestamp=-1)
                                           for p in range(PAST_ITEMS_MAX)])])),
        "FindBatches": lambda: broker.stub.FindBatches(pb.FindBatchesRequest(fetch_max_bytes=BIG, topics=[
            pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[pb.FindBatchesRequest.Partition(
                partition=p, offset=0, max_partition_fetch_bytes=BIG) for p in range(PAST_ITEMS_MAX)])])),
        "DeleteRecords": lambda: broker.stub.DeleteRecords(pb.DeleteRecordsRequest(topics=[
            pb.DeleteRecordsRequest.Topic(topic_id=topic_id, partitions=[
                pb.DeleteRecordsRequest.Partition(partition=p, offset=0) for p in range(PAST_ITEMS_MAX)])])),
        "FindCoordinator": lambda: broker.stub.FindCoordinator(pb.FindCoordinatorRequest(topics=[
            pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=list(range(PAST_ITEMS_MAX)))])),
    }  # fmt: skip
    with pytest.raises(grpc.RpcError) as caught:
        requests[verb]()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "more than diskless.coordinator.request.max.items" in (caught.value.details() or "")


def test_find_batches_repeated_partitions_each_get_their_answer(broker: Broker, three: tuple[bytes, bytes]) -> None:
    first, _ = three
    assert counts(fetch_many(broker.stub, [(first, 0, 0, BIG), (first, 0, 1, BIG)], BIG)) == [3, 2]
    assert counts(fetch_many(broker.stub, [(first, 0, 0, BIG), (first, 0, 0, BIG)], 150)) == [2, 0]


@pytest.mark.parametrize("timeout_ms", [-1, 0, 2**31 - 1])
def test_read_calls_take_any_timeout(broker: Broker, timeout_ms: int) -> None:
    # DESIGN is silent: timeout_ms <= 0 means the server's default, a huge one is capped.
    topic_id = topic(broker)
    fill(broker, topic_id, 0, [2])
    listed = broker.stub.ListOffsets(
        pb.ListOffsetsRequest(
            topics=[
                pb.ListOffsetsRequest.Topic(
                    topic_id=topic_id, partitions=[pb.ListOffsetsRequest.Partition(partition=0, timestamp=-1)]
                )
            ],
            timeout_ms=timeout_ms,
        )
    )
    assert offsets_of(listed.topics[0].partitions[0]) == (pb.NONE, -1, 2)
    deleted = broker.stub.DeleteRecords(
        pb.DeleteRecordsRequest(
            topics=[
                pb.DeleteRecordsRequest.Topic(
                    topic_id=topic_id, partitions=[pb.DeleteRecordsRequest.Partition(partition=0, offset=1)]
                )
            ],
            timeout_ms=timeout_ms,
        )
    )
    assert deleted.topics[0].partitions[0].low_watermark == 1
    found = broker.stub.FindBatches(
        pb.FindBatchesRequest(
            fetch_max_bytes=BIG,
            topics=[
                pb.FindBatchesRequest.Topic(
                    topic_id=topic_id,
                    partitions=[pb.FindBatchesRequest.Partition(partition=0, offset=1, max_partition_fetch_bytes=BIG)],
                )
            ],
            timeout_ms=timeout_ms,
        )
    )
    assert ranges(found.topics[0].partitions[0]) == [(0, 1)]
