"""A partition move given up at its target before the adoption, without a server (design §5a):
PartitionAdoptionAbandoned.

The source (coordinator 0) freezes partition 0 and the target (coordinator 1) stages it. The abandon drops the staged
batches (set aside for the purge's passes) and remembers the move: a repeat writes nothing, a late chunk or an
adoption is refused, an abandon after the adoption is refused; the worker's reads of both logs say what comes next
(the source cancels), and once the source cancelled and the purge ran, the target's loan rows go back to the source.
View and SQLite agree through a reopen, a rebuild from the records and the state check."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import apsw

from coordinator.base.errors import ErrorCode
from coordinator.files.move_chunks import check_adoption_chunk
from coordinator.files.move_returns import ReturnedLoan, check_file_returned, check_loan_returned
from coordinator.machine.state import file_reads, integrity
from coordinator.machine.state.store import StateStore
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from coordinator.topics.move_abandon import adoption_state, check_adoption_abandoned
from coordinator.topics.move_drop import source_step
from coordinator.topics.move_freeze import MoveCancel, MoveStart, check_cancel_move, check_start_move
from coordinator.topics.move_protocol import Next, TargetState, TargetStep, next_step
from tests.test_move_adoption import adopt
from tests.test_move_adoption_chunks import (
    MOVE,
    NOW,
    OTHER,
    TOPIC,
    Coordinator,
    chunk_at,
    frozen_source,
    move_all,
    pair,
)
from tests.test_move_loan_returns import QUERIES, file_workers, lose_partition, purge, run, settle, to_return

__all__ = ["pair"]  # the fixture

BORROWED = {"wal/1", "wal/3", "wal/4", "wal/5"}  # the staged batches' files the target had no row for


def staged(pair: tuple[Coordinator, Coordinator]) -> tuple[int, int]:
    """Partition 0 frozen at the source and staged at the target, not adopted: (the source's key, chunks)."""
    source, target = pair
    key = frozen_source(source, target)
    return key, move_all(source, target, key)


def abandon(target: Coordinator, move: int = MOVE) -> tuple[ErrorCode, int]:
    result = check_adoption_abandoned(target.view, 0, move, NOW)
    target.append(result)
    return result.response.error_code, len(result.records)


def test_the_abandon_drops_the_staged_batches_once_and_refuses_what_comes_late(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    assert adoption_state(target.view, 0, MOVE) == TargetState(TargetStep.NONE, 0)
    key, chunks = staged(pair)
    assert adoption_state(target.view, 0, MOVE) == TargetState(TargetStep.STAGING, chunks)
    staged_key = target.view.staged_moves[(0, MOVE)].partition_key
    assert abandon(target) == (ErrorCode.NONE, 1)
    assert abandon(target) == (ErrorCode.NONE, 0)  # not applied yet: answered as the first
    target.apply()
    assert abandon(target) == (ErrorCode.NONE, 0)
    assert adoption_state(target.view, 0, MOVE) == TargetState(TargetStep.ABANDONED, 0)
    db = target.store.reader
    assert db.execute("SELECT count(*) FROM partition_adoptions").fetchall() == [(0,)]
    assert db.execute("SELECT partition_key FROM partitions_awaiting_purge").fetchall() == [(staged_key,)]
    assert db.execute("SELECT count(*) FROM time_index WHERE partition_key = ?", (staged_key,)).fetchall() == [(0,)]
    late = check_adoption_chunk(target.view, chunk_at(source, key, 0, 0), 2, NOW)
    assert late.response.error.error_code == ErrorCode.INVALID_REQUEST and not late.records
    assert adopt(source, target, key, chunks) == (ErrorCode.INVALID_REQUEST, 0)
    # The worker's next step: the source cancels its freeze, then the move is over.
    assert next_step(source_step(source.view, MOVE), adoption_state(target.view, 0, MOVE), chunks, False) is Next.CANCEL
    assert integrity.check_integrity(target.store.path).problem is None


def test_an_abandon_of_nothing_staged_is_recorded_and_one_after_the_adoption_is_refused(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = frozen_source(source, target)
    assert abandon(target, MOVE + 1) == (ErrorCode.NONE, 1)  # nothing staged: the chunks it may still get are refused
    target.apply()
    assert abandon(target, MOVE + 1) == (ErrorCode.NONE, 0)
    chunks = move_all(source, target, key)
    assert adopt(source, target, key, chunks) == (ErrorCode.NONE, 1)
    target.apply()
    assert abandon(target) == (ErrorCode.INVALID_REQUEST, 0)
    assert check_adoption_abandoned(target.view, 1, MOVE, NOW).response.error_code == ErrorCode.INVALID_REQUEST
    assert integrity.check_integrity(target.store.path).problem is None


def test_the_loan_rows_of_an_abandoned_move_go_back_once_the_source_cancelled(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    staged(pair)
    abandon(target)
    target.apply()
    assert to_return(target) == []  # the staged batches still count until the purge
    purge(target)
    assert {row.object_key for row in to_return(target)} == BORROWED
    waits = check_loan_returned(source.view, ReturnedLoan("wal/1", 1, MOVE), NOW)  # the source is still frozen
    assert waits.response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    run(source, check_cancel_move(source.view, MoveCancel(TOPIC, 0, MOVE), NOW))
    for object_key, _, move in to_return(target):
        answer = check_loan_returned(source.view, ReturnedLoan(object_key, 1, move), NOW)
        assert answer.response.error_code == ErrorCode.NONE and not answer.records  # no loan was ever recorded
        assert run(target, check_file_returned(target.view, object_key, NOW)) == 1
    assert to_return(target) == [] and all(target.store.committed_file(k) is None for k in BORROWED)
    assert target.store.committed_file("wal/2") is not None  # the target's own row of the shared file stays
    for coordinator in pair:
        assert integrity.check_integrity(coordinator.store.path).problem is None


def test_view_and_sqlite_agree_through_a_reopen_a_rebuild_and_the_state_check(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    _, target = pair
    staged(pair)
    abandon(target)
    target.apply()
    path = target.store.path
    target.store.close()
    target.store = StateStore(path, 1)
    view = target.store.load_view()
    assert view.abandoned_moves == {(0, MOVE)} and view.staged_moves == {}
    with tempfile.TemporaryDirectory() as directory:
        rebuilt = StateStore(Path(directory) / "state.sqlite", 1)
        created = partition_checks.check_create_partitions(
            rebuilt.load_view(), partition_checks.CreatePartitions(OTHER, "audit", (0, 1)), 0
        )
        rebuilt.apply([(1, list(created.records)), *[(end + 1, r) for end, r in target.written]])  # type: ignore[attr-defined]
        live, replayed = logical_dump(path), logical_dump(rebuilt.path)
        assert {k: v for k, v in replayed.items() if k != "meta"} == {k: v for k, v in live.items() if k != "meta"}
        rebuilt.close()
    assert integrity.check_integrity(path).problem is None


def test_the_state_check_reports_an_abandoned_move_still_staged(pair: tuple[Coordinator, Coordinator]) -> None:
    _, target = pair
    staged(pair)
    target.store.close()
    db = apsw.Connection(str(target.store.path))
    with db:
        db.execute("INSERT INTO abandoned_adoptions (from_coordinator, move_id) VALUES (0, ?)", (MOVE,))
    db.close()
    problem = integrity.check_integrity(target.store.path).problem
    assert problem is not None and "abandoned and staged" in problem
    target.store = StateStore(target.store.path, 1)


def test_a_loan_row_an_abandoned_move_left_goes_back_while_another_move_to_the_target_waits_for_it(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    """The next move of the partition to the same target finds the abandoned move's idle loan rows and waits for them
    to go; their return waits only for the move that made them, so neither waits for the other for ever."""
    source, target = pair
    key, _ = staged(pair)
    abandon(target)
    target.apply()
    purge(target)
    run(source, check_cancel_move(source.view, MoveCancel(TOPIC, 0, MOVE), NOW))
    again = MOVE + 1
    run(source, check_start_move(source.view, MoveStart(TOPIC, 0, 1, again), NOW))
    first = replace(chunk_at(source, key, 0, 0), move_id=again)
    assert check_adoption_chunk(target.view, first, 2, NOW).response.error.error_code == (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )  # wal/1 is an idle loan row of the abandoned move: on its way back
    for object_key, _, move in to_return(target):
        assert move == MOVE
        answer = check_loan_returned(source.view, ReturnedLoan(object_key, 1, move), NOW)
        assert answer.response.error_code == ErrorCode.NONE  # not held back by the other move to coordinator 1
        run(target, check_file_returned(target.view, object_key, NOW))
    assert to_return(target) == []
    chunk = check_adoption_chunk(target.view, first, 2, NOW)
    assert chunk.response.error.error_code == ErrorCode.NONE and len(chunk.records) == 1  # borrows anew
    run(target, chunk)
    assert target.store.committed_file("wal/1") is not None
    assert target.store.committed_file("wal/1").loan_move_id == again  # type: ignore[union-attr]


def test_a_loan_row_the_chains_token_reaches_returns_first_then_deletes_as_the_last_owner(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    """An abandoned move's loan row not yet returned when the source, its lender and the file's owner before the
    target, hands the file over: the row returns its loan first (never handed on or deleted as a loan row), then is
    the last owner's chain row and deletes the file."""
    source, target = pair
    coordinators = {0: source, 1: target}
    staged(pair)
    abandon(target)
    target.apply()
    purge(target)
    run(source, check_cancel_move(source.view, MoveCancel(TOPIC, 0, MOVE), NOW))
    lose_partition(source, 0)
    file_workers(coordinators, set(), only=0)  # the source hands wal/1 over to the target, next and last owner
    facts = target.store.committed_file("wal/1")
    assert facts is not None and facts.owned and facts.lender_id == 0  # the token reached the loan row
    with target.store.read_transaction() as db:
        for query, bindings in QUERIES:
            assert "wal/1" not in {f.object_key for f in file_reads.idle_files(db, query, bindings, 100)}
    assert ("wal/1", 0, MOVE) in to_return(target)
    deleted: set[str] = set()
    settle(coordinators, deleted)
    assert "wal/1" in deleted and target.store.committed_file("wal/1") is None
    for coordinator in pair:
        assert integrity.check_integrity(coordinator.store.path).problem is None
