"""A partition move's freeze at its source without a server (design §5a): PartitionMoveStarted refuses every write to
the partition with NOT_COORDINATOR from the record on (in the view, so for commits queued behind it too), leaves
reads and the other partitions alone, and PartitionMoveCancelled lifts it; the view and SQLite agree, the freeze is
in the state across a reopen and a rebuild from the records, and the state check sees a contradicting row."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import apsw
import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.invariants import InvariantViolation
from coordinator.commits import rules as commit_rules
from coordinator.commits.producer_expiry import ExpiryRequest, check_expire_producers
from coordinator.machine import kinds
from coordinator.machine.state import integrity, reads
from coordinator.machine.state.store import StateStore
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from coordinator.topics.move_freeze import MoveCancel, MoveStart, check_cancel_move, check_start_move
from coordinator.topics.remote_segments import RemoteSegments, check_commit_remote_log_segments
from coordinator.topics.retention import LogStartMove, RetentionStep, check_retention, select_retention
from coordinator.topics.retention_worker import _stored_batches
from coordinator.topics.topic_configs import ConfigDefaults, effective_configs
from protos import records_pb2 as rec
from snapshot import page_checksums
from tests.harness import batch, laid_out
from tests.test_core import commit_part
from tests.test_producer_expiry_core import TOPIC, Coordinator, _coordinator

NOW = 10_000
TARGET = 3  # another coordinator (this one is 0)
PRODUCER = 7
MOVE = 41
LATER = 1_800_000_000_000  # past the batches' timestamps (the harness's 1.7e12): their producers expire


@contextlib.contextmanager
def recording_coordinator() -> Iterator[Coordinator]:
    """A coordinator on a temporary directory that keeps every record written, for the rebuilds of the tests."""
    with tempfile.TemporaryDirectory() as directory:
        made = _coordinator(directory)
        made.written = []  # type: ignore[attr-defined]
        original_append = made.append

        def keep(result: Any) -> None:
            original_append(result)
            if result.records:
                made.written.append(made.pending[-1])  # type: ignore[attr-defined]

        made.append = keep  # type: ignore[method-assign]
        try:
            yield made
        finally:
            made.store.close()


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    with recording_coordinator() as made:
        yield made


def commit(coordinator: Coordinator, batches: list[Any], key: str, apply: bool = True) -> list[Any]:
    result = commit_rules.check_commit_part(coordinator.view, commit_part(laid_out(batches), key), NOW)
    coordinator.append(result)
    if apply:
        coordinator.apply()
    return list(result.response)


def start(coordinator: Coordinator, partition: int = 0, move_id: int = MOVE, to: int = TARGET) -> Any:
    result = check_start_move(coordinator.view, MoveStart(TOPIC, partition, to, move_id), NOW)
    coordinator.append(result)
    return result


def cancel(coordinator: Coordinator, partition: int = 0, move_id: int = MOVE) -> Any:
    result = check_cancel_move(coordinator.view, MoveCancel(TOPIC, partition, move_id), NOW)
    coordinator.append(result)
    return result


def idempotent(sequence: int, partition: int = 0) -> Any:
    return batch(TOPIC, partition, 2, producer_id=PRODUCER, epoch=1, sequence=sequence)


def high_watermarks(coordinator: Coordinator) -> list[int]:
    return [row[0] for row in coordinator.store.reader.execute("SELECT high_watermark FROM partitions ORDER BY 1")]


def test_a_frozen_partition_refuses_commits_with_not_coordinator_and_the_other_partition_goes_on(
    coordinator: Coordinator,
) -> None:
    assert [o.error_code for o in commit(coordinator, [idempotent(0)], "wal/1")] == [ErrorCode.NONE]
    start(coordinator)  # not applied yet: the commit queued behind it is refused all the same
    outcomes = commit(coordinator, [idempotent(2), batch(TOPIC, 1, 3)], "wal/2", apply=False)
    assert [o.error_code for o in outcomes] == [ErrorCode.NOT_COORDINATOR, ErrorCode.NONE]
    assert f"coordinator {TARGET}" in outcomes[0].message
    coordinator.apply()
    assert sorted(high_watermarks(coordinator)) == [2, 3]  # nothing was written to the frozen partition
    # Every batch of a commit on the frozen partition only: nothing recorded, the file unknown (a retry goes on).
    assert [o.error_code for o in commit(coordinator, [idempotent(2)], "wal/3")] == [ErrorCode.NOT_COORDINATOR]
    assert not coordinator.view.file_known("wal/3")


def test_a_resend_of_an_acknowledged_batch_is_refused_while_frozen_and_a_duplicate_after_the_cancel(
    coordinator: Coordinator,
) -> None:
    commit(coordinator, [idempotent(0)], "wal/1")
    start(coordinator)
    coordinator.apply()
    assert [o.error_code for o in commit(coordinator, [idempotent(0)], "wal/2")] == [ErrorCode.NOT_COORDINATOR]
    assert [o.error_code for o in commit(coordinator, [idempotent(0)], "wal/1")] == [ErrorCode.NONE]  # the same file
    cancel(coordinator)
    coordinator.apply()
    (resent,) = commit(coordinator, [idempotent(0)], "wal/3")
    assert (resent.error_code, resent.assigned_base_offset, resent.is_duplicate) == (ErrorCode.NONE, 0, True)
    (next_one,) = commit(coordinator, [idempotent(2)], "wal/4")
    assert (next_one.error_code, next_one.assigned_base_offset) == (ErrorCode.NONE, 2)


def test_other_writes_leave_a_frozen_partition_alone(coordinator: Coordinator) -> None:
    commit(coordinator, [idempotent(0), batch(TOPIC, 1, 2)], "wal/1")
    start(coordinator)
    coordinator.apply()
    deleted = partition_checks.check_delete_records(
        coordinator.view, partition_checks.DeleteRecords(((TOPIC, 0, 1), (TOPIC, 1, 1))), NOW
    )
    assert [o.error_code for o in deleted.response] == [ErrorCode.NOT_COORDINATOR, ErrorCode.NONE]
    topic = partition_checks.check_delete_topic(coordinator.view, partition_checks.DeleteTopic(TOPIC), NOW)
    assert topic.records == [] and getattr(topic.response, "error_code", None) == ErrorCode.REQUEST_TIMED_OUT
    segments = RemoteSegments(((TOPIC, 0, 0, 1),), ConfigDefaults(), 100)
    offloaded = check_commit_remote_log_segments(coordinator.view, segments, NOW)
    assert [o.error_code for o in offloaded.response] == [ErrorCode.NOT_COORDINATOR] and offloaded.records == []
    configs = effective_configs({}, ConfigDefaults())
    key = coordinator.view.partition(TOPIC, 0).key  # type: ignore[union-attr]
    step = RetentionStep((LogStartMove(key, TOPIC, 2, 1, 10, configs),), ConfigDefaults(), None, None)
    assert check_retention(coordinator.view, step, NOW).records == []
    expiry = ExpiryRequest(((key, PRODUCER),), 1)
    assert check_expire_producers(coordinator.view, expiry, LATER).records == []
    cancel(coordinator)  # the same writes, unfrozen, are taken
    assert len(check_retention(coordinator.view, step, NOW).records) == 1
    assert len(check_expire_producers(coordinator.view, expiry, LATER).records) == 1
    topic = partition_checks.check_delete_topic(coordinator.view, partition_checks.DeleteTopic(TOPIC), NOW)
    assert topic.response is True and len(topic.records) == 1


def test_the_freeze_and_the_cancel_are_idempotent_per_move_and_a_second_move_is_refused(
    coordinator: Coordinator,
) -> None:
    assert len(start(coordinator).records) == 1
    again = start(coordinator)
    assert again.records == [] and again.response.error_code == ErrorCode.NONE
    other = start(coordinator, move_id=MOVE + 1)
    assert other.records == [] and other.response.error_code == ErrorCode.INVALID_REQUEST
    assert start(coordinator, partition=1, to=0).response.error_code == ErrorCode.INVALID_REQUEST  # to itself
    assert start(coordinator, partition=9).response.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    stale = cancel(coordinator, move_id=MOVE - 1)  # a stale cancel never lifts a later freeze
    assert stale.records == [] and coordinator.view.partition(TOPIC, 0).moving_to == TARGET  # type: ignore[union-attr]
    assert len(cancel(coordinator).records) == 1 and cancel(coordinator).records == []
    coordinator.apply()


def test_records_contradicting_the_state_are_invariant_violations_on_the_view_and_in_sqlite(
    coordinator: Coordinator,
) -> None:
    key = coordinator.view.partition(TOPIC, 0).key  # type: ignore[union-attr]
    cancelled = rec.MetadataRecord(partition_move_cancelled=rec.PartitionMoveCancelled(partition_key=key, move_id=1))
    with pytest.raises(InvariantViolation):
        kinds.replay(coordinator.view, cancelled, 99)
    with pytest.raises(InvariantViolation):
        coordinator.store.apply([(coordinator.end_offset + 1, [cancelled])])
    to_itself = rec.PartitionMoveStarted(partition_key=key, to_coordinator=0, move_id=1)
    with pytest.raises(InvariantViolation):
        kinds.replay(coordinator.view, rec.MetadataRecord(partition_move_started=to_itself), 99)


def test_the_freeze_survives_a_reopen_and_a_rebuild_from_the_records_and_the_state_check_sees_a_bad_row(
    coordinator: Coordinator,
) -> None:
    commit(coordinator, [idempotent(0)], "wal/1")
    start(coordinator)
    start(coordinator, partition=1, move_id=MOVE + 1)
    cancel(coordinator, partition=1, move_id=MOVE + 1)
    coordinator.apply()
    path = coordinator.store.path
    coordinator.store.close()
    reopened = StateStore(path, 0)
    view = reopened.load_view()
    assert [(p.partition, p.moving_to, p.move_id) for p in sorted(view.partitions(), key=lambda p: p.partition)] == [
        (0, TARGET, MOVE),
        (1, -1, -1),
    ]
    coordinator.store = reopened
    with tempfile.TemporaryDirectory() as directory:
        rebuilt = StateStore(Path(directory) / "state.sqlite", 0)
        created = partition_checks.check_create_partitions(
            rebuilt.load_view(), partition_checks.CreatePartitions(TOPIC, "orders", (0, 1)), 0
        )
        rebuilt.apply([(1, list(created.records)), *[(end + 1, r) for end, r in coordinator.written]])  # type: ignore[attr-defined]
        live, replayed = logical_dump(path), logical_dump(rebuilt.path)
        assert live["partition_moves"] == [(0, TARGET, MOVE, 0)]  # frozen from the start: no catch-up
        assert {k: v for k, v in replayed.items() if k != "meta"} == {k: v for k, v in live.items() if k != "meta"}
        rebuilt.close()
    assert integrity.move_problems(reopened.reader) == []
    broken = page_checksums.connect(path, apsw.SQLITE_OPEN_READWRITE)
    broken.execute("UPDATE partition_moves SET to_coordinator = 0")  # a move to itself
    assert len(integrity.move_problems(broken)) == 1
    assert integrity.check_integrity(path).problem is not None  # the state check reports it
    broken.close()


def test_a_retention_pass_reads_no_batch_of_a_frozen_partition(coordinator: Coordinator) -> None:
    commit(coordinator, [idempotent(0), batch(TOPIC, 1, 2)], "wal/1")
    start(coordinator)
    coordinator.apply()

    def select() -> list[int]:
        db = coordinator.store.reader
        step = select_retention(
            reads.partitions_from(db, 0, 10),
            {TOPIC: {"retention.ms": "1"}},  # every batch expired
            ConfigDefaults(),
            partial(_stored_batches, db),
            partial(reads.partition_bytes, db),
            LATER,
            100,
        )
        return [coordinator.view.partitions_by_key[move.partition_key].partition for move in step.moves]

    assert select() == [1]
    cancel(coordinator)
    coordinator.apply()
    assert select() == [0, 1]
