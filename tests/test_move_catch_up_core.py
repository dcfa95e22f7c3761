"""A partition move's catch-up at its source without a server (design §5a): PartitionMoveStarted with catch_up lets
commits go on (they only add batches above the copied ones) while what would change copied batches' positions or
the log start is refused retriably (ReplaceBatches, DeleteRecords) or passed by (retention); PartitionMoveFrozen
then refuses the commits, once, for the current move only; the view and SQLite agree, across a reopen and a rebuild
from the records; the worker's pure steps (freeze at the tail, freeze when the copy stalls, never adopt while
catching up)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.invariants import InvariantViolation
from coordinator.commits import rules as commit_rules
from coordinator.consolidation import rules as replace_rules
from coordinator.consolidation.rules import Extent, ReplacePart
from coordinator.machine import kinds, records
from coordinator.machine.state import integrity
from coordinator.machine.state.store import StateStore
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from coordinator.topics.move_freeze import (
    MoveCancel,
    MoveFreeze,
    MoveStart,
    check_cancel_move,
    check_freeze_move,
    check_start_move,
)
from coordinator.topics.move_protocol import Next, TargetState, TargetStep, catch_up_step, fewest_left
from tests.harness import batch, laid_out
from tests.test_core import commit_part
from tests.test_move_freeze import MOVE, NOW, TARGET, commit, idempotent, recording_coordinator
from tests.test_producer_expiry_core import TOPIC, Coordinator


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    with recording_coordinator() as made:
        yield made


def start(coordinator: Coordinator, move_id: int = MOVE) -> Any:
    result = check_start_move(coordinator.view, MoveStart(TOPIC, 0, TARGET, move_id, catch_up=True), NOW)
    coordinator.append(result)
    return result


def freeze(coordinator: Coordinator, move_id: int = MOVE) -> Any:
    result = check_freeze_move(coordinator.view, MoveFreeze(TOPIC, 0, move_id), NOW)
    coordinator.append(result)
    return result


def moving(coordinator: Coordinator) -> tuple[int, int, bool]:
    partition = coordinator.view.partition(TOPIC, 0)
    assert partition is not None
    return (partition.moving_to, partition.move_id, partition.catching_up)


def stored_move(coordinator: Coordinator) -> list[tuple[Any, ...]]:
    with coordinator.store.read_transaction() as db:
        return [tuple(row) for row in db.execute("SELECT to_coordinator, move_id, catching_up FROM partition_moves")]


def high_watermark(coordinator: Coordinator) -> int:
    """Partition 0's, as SQLite holds it."""
    (row,) = coordinator.store.reader.execute(
        "SELECT high_watermark FROM partitions WHERE topic_id = ? AND partition = 0", (TOPIC,)
    )
    return int(row[0])


def delete_records(coordinator: Coordinator, offset: int) -> ErrorCode:
    request = partition_checks.DeleteRecords(((TOPIC, 0, offset),))
    result = partition_checks.check_delete_records(coordinator.view, request, NOW)
    coordinator.append(result)
    return result.response[0].error_code


def test_commits_go_on_during_the_catch_up_at_the_next_offsets_and_the_freeze_refuses_them(
    coordinator: Coordinator,
) -> None:
    assert commit(coordinator, [idempotent(0)], "wal/1")[0].error_code == ErrorCode.NONE
    assert len(start(coordinator).records) == 1
    assert moving(coordinator) == (TARGET, MOVE, True)  # speculative: a commit queued behind the record sees it
    during = commit(coordinator, [idempotent(2), idempotent(4)], "wal/2", apply=False)
    assert [(o.error_code, o.assigned_base_offset) for o in during] == [(ErrorCode.NONE, 2), (ErrorCode.NONE, 4)]
    coordinator.apply()
    assert stored_move(coordinator) == [(TARGET, MOVE, 1)] and high_watermark(coordinator) == 6
    # A log start moved during the catch-up would drop batches the target staged: refused retriably.
    assert delete_records(coordinator, 2) == ErrorCode.NOT_COORDINATOR

    assert len(freeze(coordinator).records) == 1
    assert freeze(coordinator).records == []  # a resumed worker freezes again: nothing written
    assert moving(coordinator) == (TARGET, MOVE, False)
    frozen = commit(coordinator, [idempotent(6), batch(TOPIC, 1, 2)], "wal/3")
    assert [o.error_code for o in frozen] == [ErrorCode.NOT_COORDINATOR, ErrorCode.NONE]
    assert stored_move(coordinator) == [(TARGET, MOVE, 0)] and high_watermark(coordinator) == 6


def test_the_freeze_names_the_current_move_and_a_cancel_during_the_catch_up_lifts_it(
    coordinator: Coordinator,
) -> None:
    refused = freeze(coordinator)  # nothing moving
    assert refused.records == [] and refused.response.error_code == ErrorCode.INVALID_REQUEST
    start(coordinator)
    other = freeze(coordinator, MOVE + 1)
    assert other.records == [] and other.response.error_code == ErrorCode.INVALID_REQUEST
    assert len(check_cancel_move(coordinator.view, MoveCancel(TOPIC, 0, MOVE), NOW).records) == 1
    coordinator.append(check_cancel_move(coordinator.view, MoveCancel(TOPIC, 0, MOVE), NOW))
    coordinator.apply()
    assert moving(coordinator) == (-1, -1, False) and stored_move(coordinator) == []
    # A freeze record contradicting the state is an invariant violation on the view and in SQLite alike.
    record = records.partition_move_frozen(coordinator.view.partition(TOPIC, 0).key, MOVE)  # type: ignore[union-attr]
    with pytest.raises(InvariantViolation):
        kinds.replay(coordinator.view, record, 99)
    with pytest.raises(InvariantViolation):
        coordinator.store.apply([(coordinator.end_offset + 1, [record])])


def test_a_consolidation_of_a_moving_partition_is_refused_retriably_and_its_batches_stay(
    coordinator: Coordinator,
) -> None:
    commit(coordinator, [batch(TOPIC, 0, 2, size=100), batch(TOPIC, 1, 2, size=100)], "wal/a")
    commit(coordinator, [batch(TOPIC, 0, 2, size=100), batch(TOPIC, 1, 2, size=100)], "wal/b")
    start(coordinator)
    coordinator.apply()
    extents = (Extent(TOPIC, 0, 0, 3, 0, 200), Extent(TOPIC, 1, 0, 3, 200, 200))
    part = ReplacePart(
        "wal/merged", 400, 7, (0,), extents, tuple(replace_rules.extent_structure_problems(extents, 400)), 1000
    )
    result = replace_rules.check_replace_part(coordinator.view, part, NOW)
    assert [o.error_code for o in result.response] == [ErrorCode.NOT_COORDINATOR, ErrorCode.NONE]
    coordinator.append(result)
    coordinator.apply()
    with coordinator.store.read_transaction() as db:
        where = sorted(
            db.execute(
                "SELECT p.partition, f.object_key FROM batches AS b JOIN files AS f ON f.file_id = b.file_id "
                "JOIN partitions AS p ON p.partition_key = b.partition_key"
            )
        )
    # The moving partition's batches stay in the files the target's chunks name; the other partition's moved.
    assert where == [(0, "wal/a"), (0, "wal/b"), (1, "wal/merged"), (1, "wal/merged")]


def test_the_catch_up_and_the_freeze_survive_a_reopen_and_a_rebuild_from_the_records(coordinator: Coordinator) -> None:
    commit(coordinator, [idempotent(0)], "wal/1")
    start(coordinator)
    commit(coordinator, [idempotent(2)], "wal/2")
    coordinator.apply()
    path = coordinator.store.path
    coordinator.store.close()
    coordinator.store = StateStore(path, 0)
    assert [p.catching_up for p in coordinator.store.load_view().partitions() if p.partition == 0] == [True]
    freeze(coordinator)
    coordinator.apply()
    assert [p.catching_up for p in coordinator.store.load_view().partitions() if p.partition == 0] == [False]
    with tempfile.TemporaryDirectory() as directory:
        rebuilt = StateStore(Path(directory) / "state.sqlite", 0)
        created = partition_checks.check_create_partitions(
            rebuilt.load_view(), partition_checks.CreatePartitions(TOPIC, "orders", (0, 1)), 0
        )
        written = [(end + 1, r) for end, r in coordinator.written]  # type: ignore[attr-defined]
        rebuilt.apply([(1, list(created.records)), *written])
        live, replayed = logical_dump(path), logical_dump(rebuilt.path)
        assert {k: v for k, v in replayed.items() if k != "meta"} == {k: v for k, v in live.items() if k != "meta"}
        rebuilt.close()
    assert integrity.move_problems(coordinator.store.reader) == []


def test_the_worker_copies_while_the_tail_is_long_freezes_at_the_tail_or_a_stall_and_never_adopts_catching_up() -> None:
    staging = TargetState(TargetStep.STAGING, 3)
    assert catch_up_step(staging, 5000, 1000, False, False) is Next.SEND_CHUNK
    assert catch_up_step(staging, 1000, 1000, False, False) is Next.FREEZE
    assert catch_up_step(TargetState(TargetStep.NONE, 0), 0, 0, False, False) is Next.FREEZE  # an empty partition
    assert catch_up_step(staging, 5000, 1000, True, False) is Next.FREEZE  # stalled: the rest is copied frozen
    assert catch_up_step(staging, 5000, 1000, False, True) is Next.ABANDON  # timed out: as from a frozen source
    assert catch_up_step(TargetState(TargetStep.ABANDONED, 0), 0, 1000, False, True) is Next.CANCEL
    # Never ADOPT while commits go on here: whatever the target says, the catch-up ends with the freeze first.
    assert all(
        catch_up_step(TargetState(step, 1), left, 10, stalled, False) is not Next.ADOPT
        for step in TargetStep
        for left in (0, 10, 11)
        for stalled in (False, True)
    )
    # The stall count: chunks since the fewest batches left were seen; a new fewest starts it again.
    counted = None
    for left in (50, 40, 40, 45, 41):
        counted = fewest_left(counted, left)
    assert counted == (40, 3)
    assert fewest_left(counted, 39) == (39, 0)


def test_a_file_not_naming_this_coordinator_stays_invalid_for_partitions_that_never_moved_here(
    coordinator: Coordinator,
) -> None:
    """Only a partition adopted here answers NOT_COORDINATOR to a file naming other owners (test_move_catch_up.py):
    one that never moved, like a partition not here, is a broker's mistake, INVALID_REQUEST; nothing written."""
    other_topic = bytes(range(3, 19))
    part = dataclasses.replace(
        commit_part(laid_out([batch(TOPIC, 0, 2), batch(other_topic, 0, 2)]), "wal/elsewhere"), owner_ids=(TARGET,)
    )
    result = commit_rules.check_commit_part(coordinator.view, part, NOW)
    assert result.records == []
    assert [o.error_code for o in result.response] == [ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
