"""A partition move's drop at its source without a server (design §5a): PartitionMovedOut, once the target adopted.

The source (coordinator 0) freezes partition 0 of its topic, the target (coordinator 1) stages and adopts it, and the
source drops it. Afterwards the partition, its producers and time index are gone at the source (its batches await the
purge's passes), the topic's configurations stay while another partition of it is here and go with the last, and each
WAL file the target holds as a loan row lent by the source is lent on the source's row, which the file workers then
neither hand over nor delete. A repeated drop changes nothing, a drop of a move not frozen here or naming a file of
no moved batch is refused; view and SQLite agree through a reopen, a rebuild from the records and the state check,
and the catalog rebuilt from both places the partition at the target only."""

from __future__ import annotations

import tempfile
from pathlib import Path

import apsw

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.commits import parts
from coordinator.commits import rules as commit_rules
from coordinator.files import ownership
from coordinator.files.move_chunks import AdoptionChunk, check_adoption_chunk
from coordinator.machine import records
from coordinator.machine.catalog import PlacedPartition, TopicCatalog
from coordinator.machine.state import adoptions, file_reads, integrity, reads
from coordinator.machine.state.store import StateStore
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from coordinator.topics.move_adoption import AdoptRequest, check_adopt_partition
from coordinator.topics.move_drop import MoveOut, check_moved_out, moves_in_progress, source_step
from coordinator.topics.move_freeze import MoveStart, check_start_move
from coordinator.topics.move_protocol import SourceStep
from tests.harness import batch, laid_out
from tests.test_move_adoption import CONFIGS, adopt, moved
from tests.test_move_adoption_chunks import MOVE, NOW, OTHER, TOPIC, Coordinator, commit, pair

__all__ = ["pair"]  # the fixture

SHARED = "wal/9"  # a file of the moved partition and of one that stays, which the target has no row for
LOANED = {"wal/1", "wal/3", "wal/4", "wal/5", "wal/6", SHARED}  # wal/2: the target's own row takes its batches


def commit_shared(source: Coordinator) -> None:
    """wal/9, a batch of partitions 0 and 1 each, whose owner chain is the source alone: the target is in no chain of
    it, so only its loan holds the source's row back (the source is the file's last owner, which deletes it)."""
    laid = laid_out([batch(TOPIC, 0, 1), batch(TOPIC, 1, 2)])
    read = parts.request_batches(laid)
    size = sum(b.size for b in laid)
    part = parts.CommitPart(
        SHARED, size, 1, (0,), tuple(read), tuple(commit_rules.batch_structure_problems(read, size))
    )
    result = commit_rules.check_commit_part(source.view, part, NOW)
    assert {o.error_code for o in result.response} == {ErrorCode.NONE}
    source.append(result)
    source.apply()


def adopted(pair: tuple[Coordinator, Coordinator]) -> int:
    """Partition 0 moved and adopted (applied at the target), a batch of partition 1 sharing wal/9 with it: the
    source's key."""
    source, target = pair
    commit_shared(source)
    key, chunks = moved(pair)
    assert adopt(source, target, key, chunks) == (ErrorCode.NONE, 1)
    target.apply()
    return key


def lent(target: Coordinator, partition: int = 0, move: int = MOVE) -> frozenset[str]:
    with target.store.read_transaction() as db:
        found = adoptions.lent_for(db, TOPIC, partition, 0, move)
    assert found is not None
    return frozenset(found)


def drop(source: Coordinator, target: Coordinator, partition: int = 0, move: int = MOVE) -> tuple[ErrorCode, int]:
    result = check_moved_out(source.view, MoveOut(TOPIC, partition, move, lent(target, partition, move)), NOW)
    source.append(result)
    return result.response.error_code, len(result.records)


def test_the_target_names_the_loan_rows_the_move_made_once_the_adoption_is_applied(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    commit_shared(source)
    key, chunks = moved(pair)
    adopt(source, target, key, chunks)
    with target.store.read_transaction() as db:
        assert adoptions.lent_for(db, TOPIC, 0, 0, MOVE) is None  # the adoption not applied yet: ask again
    target.apply()
    assert lent(target) == LOANED


def test_the_drop_removes_the_partition_and_lends_the_target_its_loan_rows(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = adopted(pair)
    assert [m.move_id for m in moves_in_progress(source.view)] == [MOVE] and source_step(
        source.view, MOVE
    ) is SourceStep.FROZEN
    assert drop(source, target) == (ErrorCode.NONE, 1)
    assert source.view.partition(TOPIC, 0) is None and source.view.moved_out == {MOVE: 1}
    assert moves_in_progress(source.view) == [] and source_step(source.view, MOVE) is SourceStep.MOVED_OUT
    assert dict(source.view.topic_configs(TOPIC)) == CONFIGS  # partition 1 of the topic is still here
    assert drop(source, target) == (ErrorCode.NONE, 0)  # not applied yet: answered as the first
    source.apply()
    assert drop(source, target) == (ErrorCode.NONE, 0)
    db = source.store.reader
    assert db.execute("SELECT count(*) FROM partitions WHERE partition_key = ?", (key,)).fetchall() == [(0,)]
    for table in ("producers", "producer_transactions", "time_index", "partition_moves"):
        assert db.execute(f"SELECT count(*) FROM {table} WHERE partition_key = ?", (key,)).fetchall() == [(0,)]
    assert db.execute("SELECT partition_key FROM partitions_awaiting_purge").fetchall() == [(key,)]
    loans = db.execute(
        "SELECT f.object_key, l.borrower FROM file_loans AS l JOIN files AS f ON f.file_id = l.file_id"
    ).fetchall()
    assert sorted(loans) == sorted((k, 1) for k in LOANED)
    assert dict(reads.topic_configs(db)) == {TOPIC: CONFIGS}
    assert integrity.check_integrity(source.store.path).problem is None


def test_a_drop_of_a_move_not_frozen_here_or_of_a_file_of_no_moved_batch_is_refused(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source = pair[0]
    adopted(pair)
    stale = check_moved_out(source.view, MoveOut(TOPIC, 0, MOVE + 1, frozenset()), NOW)
    assert stale.response.error_code == ErrorCode.INVALID_REQUEST and not stale.records
    commit(source, [batch(TOPIC, 1, 1)], "wal/10")  # a file of partition 1 only
    unrelated = check_moved_out(source.view, MoveOut(TOPIC, 0, MOVE, frozenset({"wal/10"})), NOW)
    assert unrelated.response.error_code == ErrorCode.INVALID_REQUEST and not unrelated.records
    missing = check_moved_out(source.view, MoveOut(TOPIC, 0, MOVE, frozenset({"wal/404"})), NOW)
    assert missing.response.error_code == ErrorCode.INVALID_REQUEST


def test_a_lent_file_row_is_neither_handed_over_nor_deleted(pair: tuple[Coordinator, Coordinator]) -> None:
    source, target = pair
    key = adopted(pair)
    drop(source, target)
    source.append(Result([records.batches_purged([(key, 2**62)])], None))  # the purge's passes
    source.apply()
    facts = {k: source.store.committed_file(k) for k in LOANED}
    idle = [k for k, f in facts.items() if f is not None and f.live_batches == 0]
    assert idle and all(f is not None and f.borrowers == (1,) for f in facts.values())
    with source.store.read_transaction() as db:
        for query, bindings in (
            (file_reads.IdleFilesQuery.TO_HAND_OVER, (-1,)),
            (file_reads.IdleFilesQuery.TO_SCHEDULE, ()),
            (file_reads.IdleFilesQuery.DUE_FOR_DELETION, (NOW * 10,)),
        ):
            assert {f.object_key for f in file_reads.idle_files(db, query, bindings, 100)} & LOANED == set()
    refs = [ownership.FileRef(f.file_id, f.object_key) for f in facts.values() if f is not None]
    assert not ownership.check_handed_over(source.view, refs, NOW).records
    assert integrity.check_integrity(source.store.path).problem is None


def test_the_topics_configurations_go_with_its_last_partition_here(pair: tuple[Coordinator, Coordinator]) -> None:
    source, target = pair
    adopted(pair)
    drop(source, target)
    source.apply()
    second = MOVE + 1
    source.append(check_start_move(source.view, MoveStart(TOPIC, 1, 1, second), NOW))
    source.apply()
    one = source.view.partition(TOPIC, 1)
    assert one is not None
    chunks = _move_partition_one(source, target, one.key, second)
    assert chunks >= 1
    assert drop(source, target, 1, second) == (ErrorCode.NONE, 1)
    assert source.view.topic_configs(TOPIC) == {}
    source.apply()
    assert dict(reads.topic_configs(source.store.reader)) == {}
    assert integrity.check_integrity(source.store.path).problem is None


def _move_partition_one(source: Coordinator, target: Coordinator, key: int, move: int) -> int:
    """Partition 1 moved by `move` (every chunk, then the adoption, applied at the target): the chunks sent."""
    index, offset = 0, 0
    while True:
        with source.store.read_transaction() as db:
            batches, files, aborted = adoptions.chunk_from(db, key, offset, 2)
        if index > 0 and not batches:
            break
        chunk = AdoptionChunk(0, move, index, TOPIC, 1, tuple(batches), tuple(files), tuple(aborted))
        result = check_adoption_chunk(target.view, chunk, 2, NOW)
        assert result.response.error.error_code == ErrorCode.NONE, result.response
        target.append(result)
        index += 1
        if not batches:
            break
        offset = batches[-1].last_offset + 1
    with source.store.read_transaction() as db:
        carried = adoptions.adopted_partition(db, key)
    assert carried is not None
    result = check_adopt_partition(target.view, AdoptRequest(0, move, index, carried), NOW)
    assert result.response.error_code == ErrorCode.NONE and len(result.records) == 1
    target.append(result)
    target.apply()
    return index


def test_view_and_sqlite_agree_through_a_reopen_a_rebuild_and_the_state_check(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = adopted(pair)
    drop(source, target)
    source.apply()
    path = source.store.path
    source.store.close()
    source.store = StateStore(path, 0)
    view = source.store.load_view()
    assert view.moved_out == {MOVE: 1} and view.partition(TOPIC, 0) is None and key not in view.partitions_by_key
    facts = view.committed_file(SHARED)
    assert facts is not None and facts.borrowers == (1,)
    with tempfile.TemporaryDirectory() as directory:
        rebuilt = StateStore(Path(directory) / "state.sqlite", 0)
        created = partition_checks.check_create_partitions(
            rebuilt.load_view(), partition_checks.CreatePartitions(TOPIC, "orders", (0, 1)), 0
        )
        rebuilt.apply([(1, list(created.records)), *[(end + 1, r) for end, r in source.written]])  # type: ignore[attr-defined]
        live, replayed = logical_dump(path), logical_dump(rebuilt.path)
        assert {k: v for k, v in replayed.items() if k != "meta"} == {k: v for k, v in live.items() if k != "meta"}
        rebuilt.close()
    assert integrity.check_integrity(path).problem is None


def test_a_catalog_rebuilt_after_the_drop_places_the_partition_at_the_target_only(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    adopted(pair)
    drop(source, target)
    source.apply()
    placed = [
        PlacedPartition(coordinator.store.coordinator_id, p.topic_id, p.topic_name, p.partition, p.moving_to >= 0)
        for coordinator in pair
        for p in coordinator.store.load_view().partitions()
    ]
    assert [(p.coordinator_id, p.partition) for p in placed if p.topic_id == TOPIC] == [(0, 1), (1, 0)]
    catalog = TopicCatalog()
    catalog.rebuild(placed)
    assert catalog.coordinator_of(TOPIC, 0) == 1 and catalog.coordinator_of(TOPIC, 1) == 0
    assert catalog.coordinator_of(OTHER, 0) == 1


def test_the_state_check_reports_a_loan_on_no_file_or_to_no_coordinator(pair: tuple[Coordinator, Coordinator]) -> None:
    source, target = pair
    adopted(pair)
    drop(source, target)
    source.apply()
    path = source.store.path
    source.store.close()
    for statement in (
        "INSERT INTO file_loans (file_id, borrower) VALUES (999, 1)",
        "INSERT INTO file_loans (file_id, borrower) SELECT file_id, -3 FROM files LIMIT 1",
        "INSERT INTO file_loans (file_id, borrower) SELECT file_id, 0 FROM files LIMIT 1",
    ):
        db = apsw.Connection(str(path))
        with db:
            db.execute(statement)
        db.close()
        problem = integrity.check_integrity(path).problem
        assert problem is not None and "loan of file" in problem
        db = apsw.Connection(str(path))
        with db:
            db.execute("DELETE FROM file_loans WHERE borrower != 1 OR file_id = 999")
        db.close()
        assert integrity.check_integrity(path).problem is None
    source.store = StateStore(path, 0)
