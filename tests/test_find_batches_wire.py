"""FindBatches' answer built as bytes (coordinator/machine/batch_entries.py) and its per-call checks
(coordinator/reads/find_batches.py): the same bytes as the messages, one check and one snapshot per coordinator."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import apsw
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.transactions import TOPIC, Core, _batch
from coordinator.base.errors import CoordinatorUnavailable
from coordinator.config.settings import Settings
from coordinator.machine import batch_entries
from coordinator.machine.state import reads
from coordinator.reads.find_batches import find_batches
from coordinator.runtime.node_coordinators import Route, damaged_error
from protos import coordinator_pb2 as pb

PartitionResult = pb.FindBatchesResponse.PartitionResult
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Each varint length's bounds (1, 2, 3 and 4 bytes), then any.
OFFSET = st.one_of(st.sampled_from([-1, 0, 1, 127, 128, 16383, 16384, 2097151, 2097152]), st.integers(0, 2**29), INT64)


@given(
    partition=INT32,
    error_code=st.sampled_from(sorted(pb.ErrorCode.values())),
    error_message=st.text(max_size=300),
    offsets=st.tuples(OFFSET, OFFSET, OFFSET, OFFSET),
)
def test_a_partition_header_is_its_message_serialized(
    partition: int, error_code: int, error_message: str, offsets: tuple[int, int, int, int]
) -> None:
    message = PartitionResult(
        partition=partition,
        error_code=error_code,  # type: ignore[arg-type]  # an enum's number
        error_message=error_message,
        log_start_offset=offsets[0],
        high_watermark=offsets[1],
        local_log_start_offset=offsets[2],
        last_stable_offset=offsets[3],
    )
    assert batch_entries.partition_header(partition, error_code, error_message, offsets) == message.SerializeToString()


@given(partition=INT32, high_watermark=OFFSET, keys=st.lists(st.text(max_size=300), max_size=200), stable=st.booleans())
def test_a_partition_result_frames_its_header_and_entries_as_the_message_would(
    partition: int, high_watermark: int, keys: list[str], stable: bool
) -> None:
    """Lengths of every varint size: the frame's length is read back by protobuf itself."""
    last_stable = high_watermark if stable else -1
    infos = [pb.BatchInfo(batch_id=i, object_key=key) for i, key in enumerate(keys)]
    header = batch_entries.partition_header(partition, 0, "", (0, high_watermark, 0, last_stable))
    entries = [batch_entries.batch_entry(i, key, 0, 0, 0, 0, 0, 0, 0, 0, 0) for i, key in enumerate(keys)]
    expected = PartitionResult(
        partition=partition, high_watermark=high_watermark, last_stable_offset=last_stable, batches=infos
    )
    read = pb.FindBatchesResponse.TopicResult.FromString(batch_entries.partition_result(header, entries))
    assert list(read.partitions) == [expected]  # the header's fields come before the batches: compared as messages


BATCH_FIELDS = st.tuples(
    INT64, st.integers(0, 2), INT64, INT32, INT64, INT64, INT64, st.sampled_from([-1, 0, 1]), INT64,
    st.sampled_from([0, batch_entries.TRANSACTIONAL, batch_entries.TRANSACTIONAL | batch_entries.CONTROL]),
)  # fmt: skip


@given(key=st.text(max_size=200), append_time=INT64, batches=st.lists(BATCH_FIELDS, max_size=8))
def test_a_files_entries_from_one_message_are_each_batchs_own(
    key: str, append_time: int, batches: list[tuple[int, int, int, int, int, int, int, int, int, int]]
) -> None:
    """FileEntries reuses one BatchInfo for a file's batches: each entry is still the batch's alone, flags too."""
    entries = batch_entries.FileEntries(key, append_time)
    for batch_id, magic, byte_offset, size, base, last, max_timestamp, timestamp_type, producer_id, flags in batches:
        alone = batch_entries.batch_entry(
            batch_id, key, magic, byte_offset, size, base, last, append_time, max_timestamp, timestamp_type,
            producer_id, flags,
        )  # fmt: skip
        made = entries.entry(batch_id, magic, byte_offset, size, base, last, max_timestamp, timestamp_type,
                             producer_id, flags)  # fmt: skip
        assert made == alone


class CountingShard:
    """One coordinator's state, counting its checks and the read transactions opened on it."""

    coordinator_id = 0

    def __init__(self, connection: apsw.Connection) -> None:
        self.connection = connection
        self.checks = 0
        self.transactions = 0

    def require_active(self) -> None:
        self.checks += 1

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[apsw.Connection]:
        self.transactions += 1
        self.connection.execute("BEGIN")
        try:
            yield self.connection
        finally:
            self.connection.execute("COMMIT")

    def read_transaction(self) -> contextlib.AbstractContextManager[apsw.Connection]:
        return self._transaction()


class OneCoordinator:
    """Every partition on the one coordinator (`ReadingCoordinators`)."""

    settings = Settings()

    def __init__(self, shard: CountingShard) -> None:
        self._shard = shard

    def limit_items(self, count: int, what: str) -> None:
        pass

    def route(self, topic_id: bytes, partitions: Sequence[int]) -> list[Route]:
        return [0 for _ in partitions]

    def route_missed(self, topic_id: bytes) -> None:
        pass

    def shard(self, coordinator_id: int) -> CountingShard:
        return self._shard

    def damaged(self, shard: CountingShard, error: Exception) -> CoordinatorUnavailable:
        return damaged_error(shard.coordinator_id, error)


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[CountingShard]:
    core = Core(tmp_path, 4)
    for number in range(3):  # three batches of 10 records in each partition
        assert not any(core.commit([_batch(p, 1000 + p, number * 10, False) for p in range(4)], f"k{number}", 0))
    connection = apsw.Connection(str(core.store.path), flags=apsw.SQLITE_OPEN_READONLY)
    yield CountingShard(connection)
    connection.close()
    core.store.close()


def request(partitions: Sequence[int], offset: int = 0) -> pb.FindBatchesRequest:
    return pb.FindBatchesRequest(
        fetch_max_bytes=2**20,
        topics=[pb.FindBatchesRequest.Topic(topic_id=TOPIC, partitions=[
            pb.FindBatchesRequest.Partition(partition=p, offset=offset, max_partition_fetch_bytes=2**20)
            for p in partitions])],
    )  # fmt: skip


def test_a_call_checks_each_coordinator_once_and_reads_one_snapshot_of_it(
    shard: CountingShard, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = reads.partitions_offsets
    offsets_read: list[list[int]] = []

    def counted(db: apsw.Connection, topic_id: bytes, partitions: Sequence[int]) -> dict[int, reads.PartitionOffsets]:
        offsets_read.append(list(partitions))
        return read(db, topic_id, partitions)

    monkeypatch.setattr(reads, "partitions_offsets", counted)
    answer = pb.FindBatchesResponse.FromString(find_batches(OneCoordinator(shard), request([0, 1, 2, 3, 9])))
    results = answer.topics[0].partitions
    assert [(r.partition, r.error_code, len(r.batches), r.high_watermark) for r in results] == [
        (0, pb.NONE, 3, 30), (1, pb.NONE, 3, 30), (2, pb.NONE, 3, 30), (3, pb.NONE, 3, 30),
        (9, pb.UNKNOWN_TOPIC_OR_PARTITION, 0, -1),
    ]  # fmt: skip
    assert (shard.checks, shard.transactions) == (1, 1)
    assert offsets_read == [[0, 1, 2, 3, 9]]  # one offsets statement for the coordinator's partitions of the topic


def test_the_offsets_of_several_partitions_are_each_partitions_own(shard: CountingShard) -> None:
    with shard.read_transaction() as db:
        alone = {p: reads.partition_offsets(db, TOPIC, p) for p in (0, 1, 2, 3, 9)}
        together = reads.partitions_offsets(db, TOPIC, [3, 0, 9, 1, 2, 1])
    assert together == {p: found for p, found in alone.items() if found is not None}
    assert set(together) == {0, 1, 2, 3}


@pytest.mark.parametrize("offset", [0, 10, 20, 30])
def test_a_partition_at_its_high_watermark_answers_as_one_read_below_it_would(
    shard: CountingShard, offset: int
) -> None:
    """The tail's shortcut (no batch read at the high watermark) gives the header the full read gives."""
    answer = pb.FindBatchesResponse.FromString(find_batches(OneCoordinator(shard), request([0, 1], offset=offset)))
    results = answer.topics[0].partitions
    assert [(r.error_code, r.log_start_offset, r.high_watermark, r.local_log_start_offset, r.last_stable_offset)
            for r in results] == [(pb.NONE, 0, 30, 0, 30)] * 2  # fmt: skip
    assert [len(r.batches) for r in results] == [(30 - offset) // 10] * 2


def test_after_damage_the_coordinator_is_checked_again_and_the_partition_answers_unknown_offsets(
    shard: CountingShard, monkeypatch: pytest.MonkeyPatch
) -> None:
    with shard.read_transaction() as db:
        damaged_key = reads.partition_offsets(db, TOPIC, 1).partition_key  # type: ignore[union-attr]
    shard.transactions = 0
    read = reads.batches_from
    read_offsets = reads.partitions_offsets
    offsets_reads: list[list[int]] = []

    def damaged_at_one(db: apsw.Connection, partition_key: int, offset: int, limit: int) -> apsw.Cursor:
        if partition_key == damaged_key:
            raise reads.StateDamaged("partition 1's rows are gone")
        return read(db, partition_key, offset, limit)

    def counted(db: apsw.Connection, topic_id: bytes, partitions: Sequence[int]) -> dict[int, reads.PartitionOffsets]:
        offsets_reads.append(list(partitions))
        return read_offsets(db, topic_id, partitions)

    monkeypatch.setattr(reads, "batches_from", damaged_at_one)
    monkeypatch.setattr(reads, "partitions_offsets", counted)
    answer = pb.FindBatchesResponse.FromString(find_batches(OneCoordinator(shard), request([0, 1, 2], offset=10)))
    results = answer.topics[0].partitions
    assert [(r.error_code, len(r.batches)) for r in results] == [
        (pb.NONE, 2),
        (pb.COORDINATOR_NOT_AVAILABLE, 0),
        (pb.NONE, 2),
    ]
    damaged = results[1]
    assert "partition 1's rows are gone" in damaged.error_message
    assert (damaged.log_start_offset, damaged.high_watermark, damaged.last_stable_offset) == (-1, -1, -1)
    assert (shard.checks, shard.transactions) == (2, 1)  # checked again after the damage, the snapshot kept
    assert offsets_reads == [[0, 1, 2], [0, 1, 2]]  # read again after the damage, as a partition alone would be
