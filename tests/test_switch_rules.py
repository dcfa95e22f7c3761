"""The classic -> diskless switch without a server (design §4d): InitDisklessLog's and RepairDisklessLog's rules, and
what a switched partition answers (commits of carried-over producers, reads below the seal, retention, DeleteRecords),
each on the view and on SQLite alike."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.base.errors import ErrorCode
from coordinator.commits import rules as commit_rules
from coordinator.machine.producers import SEQUENCE_MODULUS
from coordinator.machine.state import integrity, reads
from coordinator.machine.state.store import StateStore
from coordinator.reads import offset_lookup
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from coordinator.topics.retention import retention_allowed_below
from coordinator.topics.switch import rules
from coordinator.topics.topic_configs import ConfigDefaults, effective_configs
from protos import coordinator_pb2 as pb
from snapshot import page_checksums
from tests.harness import batch, laid_out
from tests.lanes import sized
from tests.test_core import commit_part
from tests.test_producer_expiry_core import TOPIC, Coordinator, _coordinator
from tests.test_transactions_core import data, find, marker

NOW = 10_000
CLASSIC_START = 40
SEAL = 100
EPOCH = 5  # the sealing classic leader's
CLASSIC_MAX_TIMESTAMP = 9_000
PRODUCER = 7
LAST_CLASSIC = rules.ClassicBatch(10, 14, 95, 99, 8_500, pb.LOG_APPEND_TIME)  # sequences 10..14 at offsets 95..99


def producer(
    producer_id: int = PRODUCER, epoch: int = 2, batches: tuple[rules.ClassicBatch, ...] = (LAST_CLASSIC,), **kw: Any
) -> rules.ClassicProducer:
    fields = {"last_timestamp": 8_500, "coordinator_epoch": -1, "txn_first_offset": -1} | kw
    return rules.ClassicProducer(producer_id, epoch, batches, **fields)


def item(
    partition: int = 0,
    start: int = CLASSIC_START,
    seal: int = SEAL,
    epoch: int = EPOCH,
    producers: tuple[rules.ClassicProducer, ...] = (producer(),),
    max_timestamp: int = CLASSIC_MAX_TIMESTAMP,
) -> rules.SwitchItem:
    return rules.SwitchItem(TOPIC, partition, start, seal, epoch, max_timestamp, producers)


def init(coordinator: Coordinator, *items: rules.SwitchItem, apply: bool = True) -> list[rules.SwitchOutcome]:
    result = rules.check_init_diskless_logs(coordinator.view, rules.InitDisklessLogs(tuple(items), 100), NOW)
    assert len(result.records) <= 1  # one record per coordinator per call
    coordinator.append(result)
    if apply:
        coordinator.apply()
    return result.response


def repair(coordinator: Coordinator, *items: tuple[int, int]) -> tuple[list[rules.SwitchOutcome], int]:
    request = rules.RepairDisklessLogs(tuple((TOPIC, partition, seal) for partition, seal in items))
    result = rules.check_repair_diskless_logs(coordinator.view, request, NOW)
    coordinator.append(result)
    coordinator.apply()
    return result.response, len(result.records)


def commit(coordinator: Coordinator, batches: list[Any], key: str) -> list[Any]:
    result = commit_rules.check_commit_part(coordinator.view, commit_part(laid_out(batches), key), NOW)
    coordinator.append(result)
    coordinator.apply()
    return list(result.response)


def offsets(coordinator: Coordinator, partition: int = 0) -> reads.PartitionOffsets:
    with coordinator.store.read_transaction() as db:
        found = reads.partition_offsets(db, TOPIC, partition)
    assert found is not None
    return found


def list_offset(coordinator: Coordinator, timestamp: int, partition: int = 0) -> tuple[int, int, int]:
    with coordinator.store.read_transaction() as db:
        found = reads.partition_offsets(db, TOPIC, partition)
        assert found is not None
        return offset_lookup.list_offset(db, found, timestamp)


def idempotent(records: int, sequence: int, epoch: int = 2, **kw: Any) -> pb.CommitFileRequest.Batch:
    return batch(TOPIC, 0, records, producer_id=PRODUCER, epoch=epoch, sequence=sequence, **kw)


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    with tempfile.TemporaryDirectory() as directory:
        made = _coordinator(directory)
        yield made
        made.store.close()


# ---------------------------------------------------------------- the switch's positions


def test_the_seal_sets_the_classic_start_and_the_seal_as_high_watermark_and_local_start(
    coordinator: Coordinator,
) -> None:
    assert init(coordinator, item()) == [rules.SwitchOutcome(ErrorCode.NONE, "", CLASSIC_START, SEAL, SEAL)]
    view = coordinator.view.partition(TOPIC, 0)
    assert view is not None
    assert (view.log_start_offset, view.high_watermark, view.local_log_start_offset) == (CLASSIC_START, SEAL, SEAL)
    assert (view.seal_offset, view.switch_leader_epoch, view.classic_log_start_offset) == (SEAL, EPOCH, CLASSIC_START)
    stored = offsets(coordinator)
    assert (stored.log_start_offset, stored.high_watermark, stored.local_log_start_offset) == (
        CLASSIC_START,
        SEAL,
        SEAL,
    )
    assert stored.remote_max_timestamp == CLASSIC_MAX_TIMESTAMP
    loaded = coordinator.store.load_view().partition(TOPIC, 0)  # the state reloaded answers as the view did
    assert loaded == view
    assert integrity.switch_problems(coordinator.store.reader) == []


def test_a_diskless_commit_after_the_switch_continues_at_the_seal(coordinator: Coordinator) -> None:
    init(coordinator, item(producers=()))
    [outcome] = commit(coordinator, [batch(TOPIC, 0, 3)], "wal/1")
    assert (outcome.error_code, outcome.assigned_base_offset, outcome.log_start_offset) == (0, SEAL, CLASSIC_START)
    assert offsets(coordinator).high_watermark == SEAL + 3


# ---------------------------------------------------------------- producers carried over


def test_an_idempotent_producer_goes_on_with_its_next_sequence(coordinator: Coordinator) -> None:
    init(coordinator, item())
    [next_batch] = commit(coordinator, [idempotent(2, 15)], "wal/1")
    assert (next_batch.error_code, next_batch.assigned_base_offset, next_batch.is_duplicate) == (0, SEAL, False)
    [gap] = commit(coordinator, [idempotent(1, 20)], "wal/2")
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    [fenced] = commit(coordinator, [idempotent(1, 17, epoch=1)], "wal/3")
    assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_resend_of_the_last_classic_batch_is_a_duplicate_answering_its_classic_offset(
    coordinator: Coordinator,
) -> None:
    init(coordinator, item())
    [resent] = commit(coordinator, [idempotent(5, 10, timestamp_type=pb.LOG_APPEND_TIME)], "wal/1")
    assert resent.error_code == ErrorCode.NONE and resent.is_duplicate
    assert (resent.assigned_base_offset, resent.log_append_time) == (95, LAST_CLASSIC.timestamp)
    assert offsets(coordinator).high_watermark == SEAL  # nothing written
    # As a retried diskless batch is: once the producer wrote on, an earlier batch of the window still is.
    commit(coordinator, [idempotent(1, 15)], "wal/2")
    [again] = commit(coordinator, [idempotent(5, 10)], "wal/3")
    assert again.is_duplicate and again.assigned_base_offset == 95


def test_an_unknown_producer_and_a_producer_state_without_batches_follow_kafkas_rules(
    coordinator: Coordinator,
) -> None:
    bumped = producer(producer_id=8, epoch=3, batches=())  # a marker bumped its epoch: it starts at sequence 0
    init(coordinator, item(producers=(bumped,)))
    [wrong] = commit(coordinator, [batch(TOPIC, 0, 1, producer_id=8, epoch=3, sequence=4)], "wal/1")
    assert wrong.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    [first] = commit(coordinator, [batch(TOPIC, 0, 1, producer_id=8, epoch=3, sequence=0)], "wal/2")
    [unknown] = commit(coordinator, [batch(TOPIC, 0, 1, producer_id=9, epoch=0, sequence=33)], "wal/3")
    assert (first.error_code, unknown.error_code) == (ErrorCode.NONE, ErrorCode.NONE)


def test_an_open_transaction_is_carried_over_and_ended_by_a_diskless_marker(coordinator: Coordinator) -> None:
    open_txn = producer(txn_first_offset=90, coordinator_epoch=4)
    init(coordinator, item(producers=(open_txn,)))
    assert coordinator.view.last_stable_offset(coordinator.view.partition(TOPIC, 0)) == 90  # type: ignore[arg-type]
    assert find(coordinator, 0, SEAL).last_stable_offset == 90
    [plain] = commit(coordinator, [data(0, 1, PRODUCER, 2, 15, transactional=False)], "wal/1")
    assert plain.error_code == ErrorCode.INVALID_TXN_STATE
    [more] = commit(coordinator, [data(0, 2, PRODUCER, 2, 15)], "wal/2")
    assert more.error_code == ErrorCode.NONE
    [fenced] = commit(coordinator, [marker(0, PRODUCER, 2, False, coordinator_epoch=3)], "wal/3")
    assert fenced.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED  # the carried marker epoch holds
    [aborted] = commit(coordinator, [marker(0, PRODUCER, 2, False, coordinator_epoch=4)], "wal/4")
    assert aborted.error_code == ErrorCode.NONE
    answer = find(coordinator, 0, SEAL)
    assert answer.last_stable_offset == SEAL + 3  # past the marker
    assert answer.aborted == [(PRODUCER, 90)]  # the classic start of the aborted range, for read_committed


# ---------------------------------------------------------------- reads, retention and DeleteRecords across the seal


def test_reads_below_the_seal_go_to_the_classic_log(coordinator: Coordinator) -> None:
    init(coordinator, item())
    commit(coordinator, [batch(TOPIC, 0, 2, max_timestamp=CLASSIC_MAX_TIMESTAMP + 500)], "wal/1")
    below = find(coordinator, 0, SEAL - 1)
    assert below.error_code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and below.batches == []
    assert find(coordinator, 0, CLASSIC_START).error_code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    assert find(coordinator, 0, CLASSIC_START - 1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert find(coordinator, 0, SEAL).batches[0][:2] == (SEAL, SEAL + 1)
    assert list_offset(coordinator, offset_lookup.EARLIEST) == (ErrorCode.NONE, -1, CLASSIC_START)
    assert list_offset(coordinator, offset_lookup.EARLIEST_LOCAL) == (ErrorCode.NONE, -1, SEAL)
    # A timestamp the classic log may hold sends the broker there; a later one is diskless's to answer.
    assert list_offset(coordinator, CLASSIC_MAX_TIMESTAMP)[0] == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    assert list_offset(coordinator, CLASSIC_MAX_TIMESTAMP + 1) == (ErrorCode.NONE, CLASSIC_MAX_TIMESTAMP + 500, SEAL)


def test_delete_records_moves_the_log_start_across_the_seal(coordinator: Coordinator) -> None:
    init(coordinator, item())
    commit(coordinator, [batch(TOPIC, 0, 2), batch(TOPIC, 0, 2)], "wal/1")  # offsets 100..101, 102..103

    def delete(offset: int) -> None:
        request = partition_checks.DeleteRecords(((TOPIC, 0, offset),))
        result = partition_checks.check_delete_records(coordinator.view, request, NOW)
        assert result.response[0].error_code == ErrorCode.NONE
        coordinator.append(result)
        coordinator.apply()

    delete(70)  # in the classic log: the log start alone moves, the diskless batches stay
    stored = offsets(coordinator)
    assert (stored.log_start_offset, stored.local_log_start_offset, stored.remote_max_timestamp) == (
        70,
        SEAL,
        CLASSIC_MAX_TIMESTAMP,
    )
    assert find(coordinator, 0, SEAL).batches[0][:2] == (SEAL, SEAL + 1)
    delete(102)  # past the seal: the classic log is gone and so is the first diskless batch
    stored = offsets(coordinator)
    assert (stored.log_start_offset, stored.local_log_start_offset, stored.remote_max_timestamp) == (102, 102, -1)
    assert [b[:2] for b in find(coordinator, 0, 102).batches] == [(102, 103)]
    assert integrity.switch_problems(coordinator.store.reader) == []


def test_retention_removes_diskless_batches_only_once_the_classic_log_below_them_is_gone(
    coordinator: Coordinator,
) -> None:
    init(coordinator, item())
    commit(coordinator, [batch(TOPIC, 0, 2)], "wal/1")
    configs = effective_configs({"retention.ms": "1"}, ConfigDefaults())
    partition = coordinator.view.partition(TOPIC, 0)
    assert partition is not None
    assert retention_allowed_below(configs, partition) is None  # Kafka's order: the classic segments expire first
    request = partition_checks.DeleteRecords(((TOPIC, 0, SEAL),))  # the broker: the classic log expired
    coordinator.append(partition_checks.check_delete_records(coordinator.view, request, NOW))
    coordinator.apply()
    assert retention_allowed_below(configs, partition) == SEAL + 2


# ---------------------------------------------------------------- the same call again, conflicts, a later leader


def test_the_same_switch_again_is_success_and_writes_nothing(coordinator: Coordinator) -> None:
    init(coordinator, item())
    result = rules.check_init_diskless_logs(coordinator.view, rules.InitDisklessLogs((item(), item()), 100), NOW)
    assert result.records == []
    assert result.response == [rules.SwitchOutcome(ErrorCode.NONE, "", CLASSIC_START, SEAL, SEAL)] * 2
    commit(coordinator, [idempotent(1, 15)], "wal/1")
    # Once diskless commits exist, the recorded seal asked again (by a later leader too) is still success.
    after = rules.check_init_diskless_logs(coordinator.view, rules.InitDisklessLogs((item(epoch=EPOCH + 1),), 100), NOW)
    assert after.records == [] and after.response == [rules.SwitchOutcome(ErrorCode.NONE, "", CLASSIC_START, SEAL, 101)]


def test_a_different_seal_once_diskless_commits_exist_is_refused(coordinator: Coordinator) -> None:
    init(coordinator, item())
    commit(coordinator, [batch(TOPIC, 0, 1)], "wal/1")
    [refused] = init(coordinator, item(seal=SEAL + 10, epoch=EPOCH + 1))
    assert refused.error_code == ErrorCode.INVALID_REQUEST and "diskless commits up to 101" in refused.message
    # A partition born diskless that has commits cannot be switched at all.
    commit(coordinator, [batch(TOPIC, 1, 1)], "wal/2")
    [born] = init(coordinator, item(partition=1))
    assert born.error_code == ErrorCode.INVALID_REQUEST and "born diskless" in born.message
    assert offsets(coordinator, 1).high_watermark == 1


def test_a_stale_leader_is_fenced_and_a_later_one_seals_again_before_any_commit(coordinator: Coordinator) -> None:
    init(coordinator, item())
    [stale] = init(coordinator, item(epoch=EPOCH - 1, seal=SEAL + 1))
    assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
    [same_epoch] = init(coordinator, item(seal=SEAL + 5))
    assert same_epoch.error_code == ErrorCode.INVALID_REQUEST
    other = producer(producer_id=11, batches=(rules.ClassicBatch(0, 0, 104, 104, 1, pb.CREATE_TIME),))
    [resealed] = init(coordinator, item(epoch=EPOCH + 1, seal=SEAL + 5, producers=(other,)))
    assert (resealed.error_code, resealed.seal_offset, resealed.high_watermark) == (0, SEAL + 5, SEAL + 5)
    assert set(coordinator.view.producer_windows[0]) == {11}  # the later leader's producers replace the earlier
    assert set(coordinator.store.load_view().producer_windows[0]) == {11}
    assert offsets(coordinator).high_watermark == SEAL + 5


def test_a_repair_moves_the_seal_only_while_nothing_diskless_is_above_it(coordinator: Coordinator) -> None:
    init(coordinator, item())
    assert repair(coordinator, (0, SEAL)) == ([rules.SwitchOutcome(ErrorCode.NONE, "", CLASSIC_START, SEAL, SEAL)], 0)
    [below_start], _ = repair(coordinator, (0, CLASSIC_START - 1))
    assert below_start.error_code == ErrorCode.INVALID_REQUEST
    [moved], written = repair(coordinator, (0, SEAL - 3))
    assert (moved.error_code, moved.seal_offset, moved.high_watermark, written) == (0, SEAL - 3, SEAL - 3, 1)
    stored = offsets(coordinator)
    assert (stored.log_start_offset, stored.high_watermark, stored.local_log_start_offset) == (
        CLASSIC_START,
        SEAL - 3,
        SEAL - 3,
    )
    assert set(coordinator.store.load_view().producer_windows[0]) == {PRODUCER}  # the producers stay
    [never], _ = repair(coordinator, (1, 5))
    assert never.error_code == ErrorCode.INVALID_REQUEST and "never switched" in never.message
    commit(coordinator, [batch(TOPIC, 0, 1)], "wal/1")
    [late], written = repair(coordinator, (0, SEAL))
    assert late.error_code == ErrorCode.INVALID_REQUEST and written == 0


# ---------------------------------------------------------------- malformed items


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (item(start=-1), "log start"),
        (item(seal=CLASSIC_START - 1), "log start"),
        (item(epoch=-1), "leader epoch"),
        (item(producers=(producer(), producer())), "given twice"),
        (item(producers=(producer(batches=(LAST_CLASSIC,) * 6),)), "more than the 5"),
        (item(producers=(producer(batches=(rules.ClassicBatch(0, 3, 95, 99, 1, 1),)),)), "do not span"),
        (item(producers=(producer(batches=(rules.ClassicBatch(0, 0, SEAL, SEAL, 1, 1),)),)), "below the seal"),
        (item(producers=(producer(txn_first_offset=SEAL),)), "open transaction"),
        (item(producers=(producer(epoch=40_000),)), "epoch"),
        (item(producers=tuple(producer(producer_id=n) for n in range(101))), "switch.producers.max"),
    ],
)
def test_a_malformed_item_is_refused_with_what_is_wrong_and_nothing_changes(
    coordinator: Coordinator, bad: rules.SwitchItem, says: str
) -> None:
    result = rules.check_init_diskless_logs(
        coordinator.view, rules.InitDisklessLogs((bad, item(partition=1)), 100), NOW
    )
    assert result.response[0].error_code == ErrorCode.INVALID_REQUEST and says in result.response[0].message
    assert result.response[1].error_code == ErrorCode.NONE  # the other item goes on
    unknown = rules.check_init_diskless_logs(coordinator.view, rules.InitDisklessLogs((item(partition=9),), 100), NOW)
    assert unknown.response[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and unknown.records == []


# ---------------------------------------------------------------- replay and the state check


def test_the_state_rebuilt_from_the_records_equals_the_live_one_and_the_state_check_sees_a_bad_seal(
    coordinator: Coordinator,
) -> None:
    written: list[tuple[int, list[Any]]] = []
    original_append = coordinator.append

    def keep(result: Any) -> None:
        original_append(result)
        if result.records:
            written.append(coordinator.pending[-1])

    coordinator.append = keep  # type: ignore[method-assign]
    init(coordinator, item(producers=(producer(txn_first_offset=97, coordinator_epoch=1),)), item(partition=1))
    commit(coordinator, [idempotent(1, 15)], "wal/1")
    repair(coordinator, (1, SEAL + 1))
    with tempfile.TemporaryDirectory() as directory:
        rebuilt = StateStore(Path(directory) / "state.sqlite", 0)
        created = partition_checks.check_create_partitions(
            rebuilt.load_view(), partition_checks.CreatePartitions(TOPIC, "orders", (0, 1)), 0
        )
        rebuilt.apply([(1, list(created.records)), *[(end + 1, records) for end, records in written]])
        live = logical_dump(coordinator.store.path)
        replayed = logical_dump(rebuilt.path)
        assert {k: v for k, v in replayed.items() if k != "meta"} == {k: v for k, v in live.items() if k != "meta"}
        rebuilt.close()
    assert integrity.switch_problems(coordinator.store.reader) == []
    broken = page_checksums.connect(coordinator.store.path, apsw.SQLITE_OPEN_READWRITE)
    broken.execute("UPDATE partitions SET local_log_start_offset = 3 WHERE partition = 1")
    assert len(integrity.switch_problems(broken)) == 1
    assert integrity.check_integrity(coordinator.store.path).problem is not None  # the state check reports it
    broken.close()


# ---------------------------------------------------------------- a classic producer's history, generated


@settings(max_examples=sized(20, 8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(st.integers(1, 4), min_size=1, max_size=9),  # each classic batch's record count
    first_sequence=st.sampled_from([0, 17, SEQUENCE_MODULUS - 6]),  # near the wrap from 2^31-1 to 0 too
    resend=st.integers(0, 8),
)
def test_a_generated_classic_history_sealed_and_switched_lets_its_producer_go_on(
    records: list[int], first_sequence: int, resend: int
) -> None:
    """Kafka's producer state of a classic log (the last 5 batches of the history) carried by the switch: each of them
    resent is a duplicate at its classic offset, an older one is out of order, the next sequence goes on at the
    seal, wrapping past 2^31-1 as Kafka's sequences do."""
    history: list[rules.ClassicBatch] = []
    offset, sequence = SEAL - sum(records), first_sequence
    for count in records:  # the classic log's batches of this producer, ending at the seal
        last = (sequence + count - 1) % SEQUENCE_MODULUS
        history.append(rules.ClassicBatch(sequence, last, offset, offset + count - 1, 1_000, pb.CREATE_TIME))
        offset, sequence = offset + count, (last + 1) % SEQUENCE_MODULUS
    kept = tuple(history[-5:])  # what the classic leader's ProducerStateEntry holds
    with tempfile.TemporaryDirectory() as directory:
        coordinator = _coordinator(directory)
        try:
            start = min(CLASSIC_START, SEAL - sum(records))
            assert init(coordinator, item(start=start, producers=(producer(batches=kept),)))[0].error_code == 0
            chosen = history[resend % len(history)]
            count = chosen.last_offset - chosen.base_offset + 1
            [answer] = commit(coordinator, [idempotent(count, chosen.base_sequence)], "wal/resend")
            if chosen in kept:
                assert (answer.error_code, answer.is_duplicate, answer.assigned_base_offset) == (
                    ErrorCode.NONE,
                    True,
                    chosen.base_offset,
                )
            else:  # older than the window: Kafka cannot tell it from a gap
                assert answer.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            [following] = commit(coordinator, [idempotent(2, sequence)], "wal/next")
            assert (following.error_code, following.assigned_base_offset, following.is_duplicate) == (0, SEAL, False)
        finally:
            coordinator.store.close()
