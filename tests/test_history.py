"""The history checker of the fault tests (tests/history.py) finds what it is there to find: a lost batch, a batch
stored twice, a hole in the offsets; and it measures failovers and gaps from the acknowledgements' times."""

from __future__ import annotations

import pytest

from protos import coordinator_pb2 as pb
from tests.history import (
    AcknowledgedBatch,
    History,
    HistoryReport,
    attempt_object_key,
    batch_of_object_key,
    check_partition,
    first_acknowledged_after,
    longest_gap_s,
)

TOPIC = b"t" * 16


def _acknowledged(sequence: int, offset: int, key: str, duplicate: bool = False, at: float = 0.0) -> AcknowledgedBatch:
    return AcknowledgedBatch(7, sequence, TOPIC, 0, 1, offset, key, duplicate, at, at + 0.01)


def _stored(keys: list[str], first_offset: int = 0) -> list[pb.BatchInfo]:
    return [pb.BatchInfo(object_key=k, base_offset=first_offset + i, last_offset=first_offset + i) for i, k in
            enumerate(keys)]  # fmt: skip


def test_an_attempts_object_key_names_its_batch() -> None:
    assert batch_of_object_key(attempt_object_key(7, 42, 3)) == (7, 42)
    assert batch_of_object_key("wal/0a/0a1b2c.wal") is None


def test_a_clean_partition_counts_nothing() -> None:
    keys = [attempt_object_key(7, s, 0) for s in range(3)]
    report = HistoryReport()
    check_partition(report, _stored(keys), 3, [_acknowledged(s, s, keys[s]) for s in range(3)])
    assert report.clean and report.acknowledged == 3 and report.stored == 3


def test_a_missing_batch_or_another_batch_at_its_offset_is_lost() -> None:
    keys = [attempt_object_key(7, s, 0) for s in range(3)]
    report = HistoryReport()
    stored = _stored([keys[0], keys[2]])  # sequence 1's batch is gone, sequence 2's sits at offset 1
    check_partition(report, stored, 2, [_acknowledged(s, s, keys[s]) for s in range(3)])
    assert report.lost == 2 and not report.clean, report.problems


def test_a_duplicate_answer_may_point_at_an_earlier_attempts_file() -> None:
    first, retried = attempt_object_key(7, 0, 0), attempt_object_key(7, 0, 2)
    report = HistoryReport()
    check_partition(report, _stored([first]), 1, [_acknowledged(0, 0, retried, duplicate=True)])
    assert report.clean, report.problems
    report = HistoryReport()
    check_partition(report, _stored([first]), 1, [_acknowledged(0, 0, retried, duplicate=False)])
    assert report.lost == 1  # answered as newly stored, yet another file holds it


def test_a_batch_stored_twice_is_duplicated() -> None:
    first, again = attempt_object_key(7, 0, 0), attempt_object_key(7, 0, 2)
    report = HistoryReport()
    check_partition(report, _stored([first, again]), 2, [_acknowledged(0, 0, first)])
    assert report.duplicated == 1 and report.lost == 0


def test_a_hole_in_the_offsets_or_a_wrong_high_watermark_is_a_gap() -> None:
    keys = [attempt_object_key(7, s, 0) for s in range(2)]
    report = HistoryReport()
    stored = [*_stored(keys[:1]), *_stored(keys[1:], first_offset=2)]
    check_partition(report, stored, 3, [_acknowledged(0, 0, keys[0]), _acknowledged(1, 2, keys[1])])
    assert report.gaps == 1 and report.lost == 0
    report = HistoryReport()
    check_partition(report, _stored(keys), 5, [])
    assert report.gaps == 1


def test_failover_and_longest_gap_come_from_the_acknowledgements_times() -> None:
    history = History()
    for sequence, sent_at in enumerate([1.0, 1.1, 1.2, 4.0, 4.1]):
        history.record(_acknowledged(sequence, sequence, attempt_object_key(7, sequence, 0), at=sent_at))
    assert first_acknowledged_after(history, 2.0, coordinator_id=1) == pytest.approx(2.01)
    assert first_acknowledged_after(history, 2.0, coordinator_id=2) is None
    assert longest_gap_s(history, [1], 1.0, 5.0) == pytest.approx(4.01 - 1.21)
    assert longest_gap_s(history, [1], 4.5, 6.0) == pytest.approx(1.5)  # nothing after 4.11: up to the end
