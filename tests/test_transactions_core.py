"""Transactions without a server (DESIGN §4b): CommitFile's rules, the LSO, aborted ranges and read_committed reads,
each against the view and SQLite alike, the model-based test is test_transactions_model.py."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

import pytest

from coordinator.base.errors import ErrorCode
from coordinator.commits import rules
from coordinator.commits.producer_expiry import ExpiryRequest, check_expire_producers
from coordinator.machine import batch_entries
from coordinator.machine.state import reads
from coordinator.reads import offset_lookup
from coordinator.reads.byte_budget import FetchBudget, fetch_partition, header_offsets
from coordinator.topics import partition_checks
from coordinator.topics.config_checks import TopicConfigsChange, check_topic_configs
from coordinator.topics.remote_segments import RemoteSegments, check_commit_remote_log_segments
from coordinator.topics.topic_configs import ConfigDefaults
from protos import coordinator_pb2 as pb
from tests.harness import batch, laid_out
from tests.test_core import commit_part
from tests.test_producer_expiry_core import TOPIC, Coordinator, _commit, _coordinator

NOW = 10_000
PARTITIONS = 2  # as _coordinator creates them: partition n has key n


def data(partition: int, records: int, producer: int, epoch: int, sequence: int, transactional: bool = True) -> Any:
    produced = batch(TOPIC, partition, records, producer_id=producer, epoch=epoch, sequence=sequence)
    produced.is_transactional = transactional
    return produced


def marker(partition: int, producer: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> Any:
    """A control batch as the broker writes it for WriteTxnMarkers: one record, transactional, no sequence."""
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=TOPIC, partition=partition, size=70, base_offset=0, last_offset=0,
        batch_max_timestamp=NOW, timestamp_type=pb.CREATE_TIME, producer_id=producer, producer_epoch=epoch,
        base_sequence=-1, last_sequence=-1, is_transactional=True, is_control=True,
        control_type=pb.CONTROL_COMMIT if commit else pb.CONTROL_ABORT, coordinator_epoch=coordinator_epoch,
    )  # fmt: skip


@dataclass
class Answer:
    batches: list[tuple[int, int, int, bool, bool]]  # (base, last, producer id, transactional, control)
    last_stable_offset: int
    aborted: list[tuple[int, int]]  # (producer id, first offset)
    error_code: int = 0


def find(coordinator: Coordinator, partition: int, offset: int, committed: bool = True) -> Answer:
    """FindBatches on the committed state (the same code the node and the reader processes run)."""
    with coordinator.store.read_transaction() as db:
        found = reads.partition_offsets(db, TOPIC, partition)
        assert found is not None
        entries: list[bytes] = []
        code, message = fetch_partition(db, found, offset, 2**30, FetchBudget(2**30, 0, 100_000), entries, committed)
    # The answer as a node frames it: the header's fields, then the entries (batches, then aborted transactions).
    header = batch_entries.partition_header(partition, code, message, header_offsets(found))
    whole = pb.FindBatchesResponse.PartitionResult.FromString(header + b"".join(entries))
    return Answer(
        [(b.base_offset, b.last_offset, b.producer_id, b.is_transactional, b.is_control) for b in whole.batches],
        whole.last_stable_offset,
        [(a.producer_id, a.first_offset) for a in whole.aborted_transactions],
        whole.error_code,
    )


def commit(coordinator: Coordinator, batches: list[Any], key: str, *, apply: bool = True) -> list[int]:
    codes = _commit(coordinator, batches, key, NOW)
    if apply:
        coordinator.apply()
    return codes


def offsets_of(coordinator: Coordinator, batches: list[Any], key: str) -> list[tuple[int, int]]:
    result = rules.check_commit_part(coordinator.view, commit_part(laid_out(batches), key), NOW)
    coordinator.append(result)
    coordinator.apply()
    return [(outcome.error_code, outcome.assigned_base_offset) for outcome in result.response]


@pytest.fixture
def coordinator() -> Any:
    with tempfile.TemporaryDirectory() as directory:
        made = _coordinator(directory)
        yield made
        made.store.close()


# ---------------------------------------------------------------- structure


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"is_control": False, "producer_id": -1, "producer_epoch": -1}, "transactional batch needs a producer"),
        ({"is_transactional": False}, "must be transactional"),
        ({"last_offset": 1}, "holds one record"),
        ({"base_sequence": 0, "last_sequence": 0}, "carries no sequence"),
        ({"control_type": 5}, "control_type"),
        ({"producer_id": -1}, "needs a producer"),
        ({"magic": 1, "timestamp_type": pb.CREATE_TIME}, "needs magic 2"),
    ],
)
def test_malformed_transactional_batches_and_markers_are_invalid_records(
    coordinator: Coordinator, change: dict[str, Any], problem: str
) -> None:
    bad = marker(0, 1, 0, commit=True)
    for name, value in change.items():
        setattr(bad, name, value)
    result = rules.check_commit_part(coordinator.view, commit_part([bad], "wal/bad"), NOW)
    (outcome,) = result.response
    assert outcome.error_code == ErrorCode.INVALID_RECORD
    assert problem in outcome.message
    assert find(coordinator, 0, 0).batches == []


# ---------------------------------------------------------------- the rules


def test_a_transaction_opens_at_its_first_batch_and_holds_the_lso_until_its_commit_marker(
    coordinator: Coordinator,
) -> None:
    assert commit(coordinator, [batch(TOPIC, 0, 3)], "wal/1") == [ErrorCode.NONE]
    assert offsets_of(coordinator, [data(0, 2, 7, 0, 0)], "wal/2") == [(ErrorCode.NONE, 3)]
    assert coordinator.view.open_transaction(0, 7) == 3
    assert offsets_of(coordinator, [data(0, 2, 7, 0, 2), batch(TOPIC, 0, 1)], "wal/3") == [
        (ErrorCode.NONE, 5),
        (ErrorCode.NONE, 7),
    ]
    assert coordinator.view.open_transaction(0, 7) == 3  # a later batch of the same transaction changes nothing
    committed = find(coordinator, 0, 0)
    assert committed.last_stable_offset == 3 and [b[0] for b in committed.batches] == [0]
    assert [b[0] for b in find(coordinator, 0, 0, committed=False).batches] == [0, 3, 5, 7]
    assert find(coordinator, 0, 3).batches == []  # at the LSO: nothing yet for read_committed
    assert offsets_of(coordinator, [marker(0, 7, 0, commit=True)], "wal/4") == [(ErrorCode.NONE, 8)]
    after = find(coordinator, 0, 0)
    assert after.last_stable_offset == 9 and after.aborted == []
    assert after.batches[-1] == (8, 8, 7, True, True)  # the marker is returned; the consumer skips it
    assert after.batches[1] == (3, 4, 7, True, False)
    assert coordinator.view.open_transaction(0, 7) == -1
    assert coordinator.store.load_view().open_transactions == coordinator.view.open_transactions == {}


def test_a_plain_batch_while_the_producers_transaction_is_open_is_invalid_txn_state(coordinator: Coordinator) -> None:
    assert commit(coordinator, [data(0, 1, 7, 0, 0)], "wal/1") == [ErrorCode.NONE]
    codes = commit(coordinator, [data(0, 1, 7, 0, 1, transactional=False), data(1, 1, 7, 0, 0, False)], "wal/2")
    # Refused on the partition with the open transaction; the other partition has none.
    assert codes == [ErrorCode.INVALID_TXN_STATE, ErrorCode.NONE]
    assert find(coordinator, 0, 0, committed=False).batches == [(0, 0, 7, True, False)]
    # The refused batch left the sequence where it was: its retry as transactional is accepted at sequence 1.
    assert commit(coordinator, [data(0, 1, 7, 0, 1)], "wal/3") == [ErrorCode.NONE]


def test_an_abort_lists_the_aborted_transaction_for_reads_that_overlap_it(coordinator: Coordinator) -> None:
    commit(coordinator, [data(0, 2, 7, 0, 0), data(0, 1, 8, 0, 0)], "wal/1")  # 7: 0..1, 8: 2
    commit(coordinator, [marker(0, 7, 0, commit=False, coordinator_epoch=3)], "wal/2")  # 3
    still_open = find(coordinator, 0, 0)
    assert still_open.last_stable_offset == 2 and [b[0] for b in still_open.batches] == [0]
    assert still_open.aborted == [(7, 0)]
    commit(coordinator, [marker(0, 8, 0, commit=True)], "wal/3")  # 4
    answer = find(coordinator, 0, 0)
    assert answer.last_stable_offset == 5 and [b[0] for b in answer.batches] == [0, 2, 3, 4]
    assert answer.aborted == [(7, 0)]
    assert find(coordinator, 0, 4).aborted == []  # after the abort's marker
    assert find(coordinator, 0, 3).aborted == [(7, 0)]  # the marker itself is in the range
    assert find(coordinator, 0, 0, committed=False).aborted == []  # only read_committed lists them
    assert coordinator.view.coordinator_epoch(0, 7) == 3


def test_stale_markers_are_refused_as_kafka_refuses_them(coordinator: Coordinator) -> None:
    commit(coordinator, [data(0, 1, 7, 2, 0)], "wal/1")
    assert commit(coordinator, [marker(0, 7, 1, commit=True)], "wal/2") == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert commit(coordinator, [marker(0, 7, 2, commit=False, coordinator_epoch=5)], "wal/3") == [ErrorCode.NONE]
    commit(coordinator, [data(0, 1, 7, 2, 1)], "wal/4")
    assert commit(coordinator, [marker(0, 7, 2, True, coordinator_epoch=4)], "wal/5") == [
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    ]
    assert coordinator.view.open_transaction(0, 7) == 2
    assert commit(coordinator, [marker(0, 7, 2, True, coordinator_epoch=5)], "wal/6") == [ErrorCode.NONE]
    assert coordinator.view.open_transaction(0, 7) == -1


def test_a_marker_without_an_open_transaction_is_written_and_ends_nothing(coordinator: Coordinator) -> None:
    assert offsets_of(coordinator, [marker(0, 9, 0, commit=False)], "wal/1") == [(ErrorCode.NONE, 0)]
    answer = find(coordinator, 0, 0)
    assert answer.batches == [(0, 0, 9, True, True)] and answer.aborted == [] and answer.last_stable_offset == 1
    # The marker made the producer known at epoch 0 without a batch: its next batch there starts at sequence 0.
    assert commit(coordinator, [data(0, 1, 9, 0, 5)], "wal/2") == [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
    assert commit(coordinator, [data(0, 1, 9, 0, 0)], "wal/3") == [ErrorCode.NONE]


def test_a_markers_higher_epoch_becomes_the_producers_and_never_touches_sequences_otherwise(
    coordinator: Coordinator,
) -> None:
    commit(coordinator, [data(0, 3, 7, 0, 0)], "wal/1")
    commit(coordinator, [marker(0, 7, 0, commit=True)], "wal/2")
    window = coordinator.view.producer_window(0, 7)
    assert window is not None and window.epoch == 0 and [e.base_sequence for e in window.entries] == [0]
    commit(coordinator, [marker(0, 7, 1, commit=False)], "wal/3")  # the coordinator's abort after a bump
    assert commit(coordinator, [data(0, 1, 7, 0, 3)], "wal/4") == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert commit(coordinator, [data(0, 1, 7, 1, 1)], "wal/5") == [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
    assert commit(coordinator, [data(0, 1, 7, 1, 0)], "wal/6") == [ErrorCode.NONE]
    assert coordinator.store.load_view().producer_windows == coordinator.view.producer_windows


def test_a_producer_with_an_open_transaction_is_never_expired(coordinator: Coordinator) -> None:
    commit(coordinator, [data(0, 1, 7, 0, 0), data(1, 1, 7, 0, 0, transactional=False)], "wal/1")
    result = check_expire_producers(coordinator.view, ExpiryRequest(((0, 7), (1, 7)), 1), 2 * 10**12)
    assert result.response == 1
    assert [(p.partition_key, p.producer_id) for p in result.records[0].producers_expired.producers] == [(1, 7)]


def test_offload_never_goes_past_the_lso_and_drops_the_aborted_ranges_it_passes(coordinator: Coordinator) -> None:
    commit(coordinator, [data(0, 1, 7, 0, 0)], "wal/1")  # 0
    commit(coordinator, [marker(0, 7, 0, commit=False)], "wal/2")  # 1
    commit(coordinator, [batch(TOPIC, 0, 1)], "wal/3")  # 2
    commit(coordinator, [data(0, 1, 8, 0, 0)], "wal/4")  # 3: open
    result = check_topic_configs(coordinator.view, TopicConfigsChange(TOPIC, (("remote.storage.enable", "true"),)), 0)
    coordinator.append(result)
    coordinator.apply()
    segments = RemoteSegments(((TOPIC, 0, 0, 4),), ConfigDefaults(), 100)
    (refused,) = check_commit_remote_log_segments(coordinator.view, segments, NOW).response
    assert refused.error_code == ErrorCode.INVALID_REQUEST and "last stable offset 3" in refused.message
    offload = check_commit_remote_log_segments(
        coordinator.view, RemoteSegments(((TOPIC, 0, 0, 2),), ConfigDefaults(), 100), NOW
    )
    assert [o.error_code for o in offload.response] == [ErrorCode.NONE]
    with coordinator.store.read_transaction() as db:
        assert reads.aborted_transactions(db, 0, 0, 100) == [(7, 0)]
    coordinator.append(offload)
    coordinator.apply()
    with coordinator.store.read_transaction() as db:
        assert reads.aborted_transactions(db, 0, 0, 100) == []


def test_delete_records_drops_aborted_ranges_below_the_log_start_and_topic_deletion_drops_all(
    coordinator: Coordinator,
) -> None:
    commit(coordinator, [data(0, 1, 7, 0, 0)], "wal/1")  # 0
    commit(coordinator, [marker(0, 7, 0, commit=False)], "wal/2")  # 1
    commit(coordinator, [data(0, 1, 8, 0, 0)], "wal/3")  # 2
    commit(coordinator, [marker(0, 8, 0, commit=False)], "wal/4")  # 3
    request = partition_checks.DeleteRecords(((TOPIC, 0, 1),))
    coordinator.append(partition_checks.check_delete_records(coordinator.view, request, NOW))
    coordinator.apply()
    assert find(coordinator, 0, 1).aborted == [(7, 0), (8, 2)]  # the first's range reaches the log start
    request = partition_checks.DeleteRecords(((TOPIC, 0, 2),))
    coordinator.append(partition_checks.check_delete_records(coordinator.view, request, NOW))
    coordinator.apply()
    assert find(coordinator, 0, 2).aborted == [(8, 2)]
    coordinator.append(partition_checks.check_delete_topic(coordinator.view, partition_checks.DeleteTopic(TOPIC), NOW))
    coordinator.apply()
    with coordinator.store.read_transaction() as db:
        assert db.execute("SELECT count(*) FROM aborted_transactions").fetchall() == [(0,)]
        assert db.execute("SELECT count(*) FROM producer_transactions").fetchall() == [(0,)]


def test_list_offsets_read_committed_answers_the_lso_and_only_offsets_below_it(coordinator: Coordinator) -> None:
    commit(coordinator, [batch(TOPIC, 0, 1, max_timestamp=100)], "wal/1")  # 0
    commit(coordinator, [data(0, 1, 7, 0, 0)], "wal/2")  # 1, open; timestamp 1_700_000_000_000
    with coordinator.store.read_transaction() as db:
        found = reads.partition_offsets(db, TOPIC, 0)
        assert found is not None
        assert offset_lookup.list_offset_committed(db, found, offset_lookup.LATEST) == (ErrorCode.NONE, -1, 1)
        assert offset_lookup.list_offset(db, found, offset_lookup.LATEST) == (ErrorCode.NONE, -1, 2)
        assert offset_lookup.list_offset_committed(db, found, 50) == (ErrorCode.NONE, 100, 0)
        assert offset_lookup.list_offset_committed(db, found, 200) == (ErrorCode.NONE, -1, -1)
        assert offset_lookup.list_offset(db, found, 200)[2] == 1
        assert offset_lookup.list_offset_committed(db, found, offset_lookup.EARLIEST) == (ErrorCode.NONE, -1, 0)


def test_finding_aborted_ranges_reads_by_marker_offset_and_stops_at_the_recorded_lso(coordinator: Coordinator) -> None:
    """Kafka's TransactionIndex search: O(result), never the partition's aborted transactions."""
    for number in range(200):
        commit(coordinator, [data(0, 1, 1000 + number, 0, 0), marker(0, 1000 + number, 0, commit=False)], f"w/{number}")
    with coordinator.store.read_transaction() as db:
        plan = " ".join(str(row) for row in db.execute(
            "EXPLAIN QUERY PLAN SELECT producer_id, first_offset, last_stable_offset FROM aborted_transactions "
            "WHERE partition_key = ? AND last_offset >= ? ORDER BY last_offset", (0, 10)))  # fmt: skip
        assert "PRIMARY KEY" in plan and "SCAN" not in plan
        assert reads.aborted_transactions(db, 0, 10, 14) == [(1005, 10), (1006, 12)]
        rows = 0

        def count(cursor: Any, row: Any) -> Any:
            nonlocal rows
            rows += 1
            return row

        db.row_trace = count
        try:
            assert reads.aborted_transactions(db, 0, 10, 14) == [(1005, 10), (1006, 12)]
        finally:
            db.row_trace = None
        assert rows <= 3  # the two found and the one that stops the search
