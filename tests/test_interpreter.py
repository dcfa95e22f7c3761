"""Each record kind's two effects (view and SQLite) refuse the same broken records with the same invariant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.base.invariants import InvariantViolation
from coordinator.machine import kinds, records
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state.store import StateStore
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

TOPIC = b"\x01" * 16


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    store = StateStore(tmp_path / "state.sqlite", 0)
    store.apply([(1, [records.partition_created(0, TOPIC, "t", 0)])])
    yield store
    store.close()


def _batch(batch_id: int, base_offset: int, last_offset: int) -> CommittedBatch:
    return CommittedBatch(batch_id, 0, 0, 10, base_offset, last_offset, 0, -1, -1, -1, -1, 2, 0)


def _refusals(store: StateStore, record: rec.MetadataRecord) -> tuple[str, str]:
    """The invariant messages of replaying `record` into the view and of applying it to SQLite."""
    view: CoordinatorView = store.load_view()
    with pytest.raises(InvariantViolation) as in_view:
        kinds.replay(view, record, store.applied_offset + 1)
    with pytest.raises(InvariantViolation) as in_state:
        store.apply([(store.applied_offset + 1, [record])])
    return str(in_view.value), str(in_state.value)


def test_a_file_id_out_of_order_is_refused_by_both_effects_alike(store: StateStore) -> None:
    record = records.file_committed(5, "wal/a", 100, 1, [0], 1000, [])
    in_view, in_state = _refusals(store, record)
    assert in_view == in_state == "file id 5 != next 0"


def test_a_batch_that_does_not_continue_its_partition_is_refused_by_both_effects(store: StateStore) -> None:
    first_batch_id = store.load_view().next_batch_id
    record = records.file_committed(
        0, "wal/a", 100, 1, [0], 1000, [_batch(first_batch_id, 0, 4), _batch(first_batch_id + 1, 6, 7)]
    )
    in_view, in_state = _refusals(store, record)
    assert in_view == in_state
    assert "at 6..7 does not continue partition 0 at 5" in in_view


def test_a_log_start_moving_back_is_refused_by_both_effects(store: StateStore) -> None:
    first_batch_id = store.load_view().next_batch_id
    store.apply([(2, [records.file_committed(0, "wal/a", 100, 1, [0], 1000, [_batch(first_batch_id, 0, 9)])])])
    store.apply([(3, [records.records_deleted(0, 5)])])
    in_view, in_state = _refusals(store, records.records_deleted(0, 3))
    assert in_view == in_state == "log start of partition 0 moves from 5 to 3 (high watermark 10)"


def test_a_leader_epoch_going_back_is_refused_by_both_effects(store: StateStore) -> None:
    store.apply([(2, [records.leader_change(4, 1)])])
    in_view, in_state = _refusals(store, records.leader_change(4, 2))
    assert in_view == in_state == "leader epoch goes from 4 to 4"


def test_a_refused_record_leaves_the_state_as_it_was(store: StateStore) -> None:
    before = store.applied_offset
    with pytest.raises(InvariantViolation):
        store.apply([(before + 1, [records.partition_created(0, TOPIC, "t", 1)])])  # key 0 is taken
    assert store.applied_offset == before
    assert [p.partition for p in store.load_view().partitions()] == [0]
