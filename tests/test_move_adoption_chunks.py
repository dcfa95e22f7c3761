"""A moved partition's batches staged at the move's target, a chunk at a time, without a server (design §5a).

The source (coordinator 0) freezes a partition with plain, idempotent and transactional batches in four WAL files,
one of them shared with the target (coordinator 1, which has a row for it); the chunks read from the source's state
are checked and recorded at the target. Afterwards the staged batches are the source's (offsets, positions, producer,
timestamps, transaction flags; ids the target's), no read or partition of the target sees them, the shared file's
row takes its batches while the others become loan rows lent by the source; a repeated chunk changes nothing, a gap,
a chunk too large or off the staged offsets is refused, a file on its way out makes the chunk wait; view and SQLite
agree, through a reopen, a rebuild from the records and the state check."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import apsw
import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.invariants import InvariantViolation
from coordinator.commits import parts
from coordinator.commits import rules as commit_rules
from coordinator.files.move_chunks import AdoptionChunk, check_adoption_chunk
from coordinator.machine import kinds
from coordinator.machine.state import adoptions, file_reads, integrity
from coordinator.machine.state.store import StateStore
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from coordinator.topics.move_freeze import MoveStart, check_start_move
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec
from snapshot import page_checksums
from tests.harness import batch, laid_out
from tests.test_producer_expiry_core import Coordinator

TOPIC = bytes(range(1, 17))
OTHER = bytes(range(2, 18))  # a topic of the target's
MOVE = 41
NOW = 10_000
CHUNK = 2  # batches per chunk in these tests


def _coordinator(directory: str, coordinator_id: int, topic: bytes, name: str) -> Coordinator:
    store = StateStore(Path(directory) / f"state-{coordinator_id}.sqlite", coordinator_id)
    made = Coordinator(store, store.load_view(), store.applied_offset)
    made.written = []  # type: ignore[attr-defined]
    made.append(
        partition_checks.check_create_partitions(made.view, partition_checks.CreatePartitions(topic, name, (0, 1)), 0)
    )
    made.apply()
    original_append, original_apply = made.append, made.apply

    def keep(result: Any) -> None:  # every record written after the topic's creation, for the rebuild below
        original_append(result)
        if result.records:
            made.written.append(made.pending[-1])  # type: ignore[attr-defined]

    def apply() -> None:  # and the view forgets the files SQLite now holds, as the shard's pipeline has it do
        original_apply()
        made.view.forget_applied_files(made.store.applied_offset)

    made.append = keep  # type: ignore[method-assign]
    made.apply = apply  # type: ignore[method-assign]
    return made


@pytest.fixture
def pair() -> Iterator[tuple[Coordinator, Coordinator]]:
    with tempfile.TemporaryDirectory() as directory:
        source = _coordinator(directory, 0, TOPIC, "orders")
        target = _coordinator(directory, 1, OTHER, "audit")
        yield source, target
        source.store.close()
        target.store.close()


def commit(coordinator: Coordinator, batches: list[pb.CommitFileRequest.Batch], key: str, apply: bool = True) -> None:
    """A WAL file of coordinators 0 and 1 (its owner chain), committed here with these batches."""
    laid = laid_out(batches)
    read = parts.request_batches(laid)
    size = sum(b.size for b in laid)
    part = parts.CommitPart(key, size, 1, (0, 1), tuple(read), tuple(commit_rules.batch_structure_problems(read, size)))
    result = commit_rules.check_commit_part(coordinator.view, part, NOW)
    assert {o.error_code for o in result.response} == {ErrorCode.NONE}
    coordinator.append(result)
    if apply:
        coordinator.apply()


def frozen_source(source: Coordinator, target: Coordinator, open_transaction: bool = False) -> int:
    """The source's partition 0: 8 batches in wal/1, wal/2 (shared with the target), wal/3 to wal/5; frozen. Its key."""
    producer = {"producer_id": 7, "epoch": 1}
    commit(source, [batch(TOPIC, 0, 3), batch(TOPIC, 0, 2, sequence=0, **producer)], "wal/1")
    commit(source, [batch(TOPIC, 0, 1, sequence=2, **producer), batch(TOPIC, 1, 4)], "wal/2")
    commit(target, [batch(OTHER, 0, 5)], "wal/2")  # the target's own part of the shared file
    commit(source, [batch(TOPIC, 0, 2, sequence=3, **producer), batch(TOPIC, 0, 1)], "wal/3")
    transactional = batch(TOPIC, 0, 2, producer_id=9, epoch=0, sequence=0)
    transactional.is_transactional = True
    commit(source, [transactional, batch(TOPIC, 0, 1)], "wal/4")
    abort = pb.CommitFileRequest.Batch(
        magic=2, topic_id=TOPIC, partition=0, size=70, batch_max_timestamp=NOW, timestamp_type=pb.CREATE_TIME,
        producer_id=9, producer_epoch=0, base_sequence=-1, last_sequence=-1, is_transactional=True, is_control=True,
        control_type=pb.CONTROL_ABORT,
    )  # fmt: skip
    commit(source, [abort], "wal/5")  # the transaction aborted: read_committed reads skip offsets 9..10
    if open_transaction:  # producer 11's transaction, left open: the partition's last stable offset stays at 13
        opened = batch(TOPIC, 0, 1, producer_id=11, epoch=0, sequence=0)
        opened.is_transactional = True
        commit(source, [opened], "wal/6")
    source.append(check_start_move(source.view, MoveStart(TOPIC, 0, 1, MOVE), NOW))
    source.apply()
    found = source.view.partition(TOPIC, 0)
    assert found is not None and found.moving_to == 1
    return found.key


def chunk_at(source: Coordinator, key: int, index: int, from_offset: int, limit: int = CHUNK) -> AdoptionChunk:
    with source.store.read_transaction() as db:
        batches, files, aborted = adoptions.chunk_from(db, key, from_offset, limit)
    return AdoptionChunk(0, MOVE, index, TOPIC, 0, tuple(batches), tuple(files), tuple(aborted))


def send(target: Coordinator, chunk: AdoptionChunk, max_batches: int = CHUNK) -> tuple[int, int, int]:
    """(error code, staged chunks after, records written)."""
    result = check_adoption_chunk(target.view, chunk, max_batches, NOW)
    target.append(result)
    return result.response.error.error_code, result.response.staged_chunks, len(result.records)


def move_all(source: Coordinator, target: Coordinator, key: int, apply_each: bool = False, limit: int = CHUNK) -> int:
    """Every chunk of the move sent in order (applied at the end, or after each); the chunks sent."""
    index, offset = 0, 0
    while True:
        chunk = chunk_at(source, key, index, offset, limit)
        if index > 0 and not chunk.batches:
            break
        assert send(target, chunk, limit)[:2] == (ErrorCode.NONE, index + 1)
        if apply_each:
            target.apply()
        index += 1
        if not chunk.batches:
            break
        offset = chunk.batches[-1].last_offset + 1
    target.apply()
    return index


def _infos(db: apsw.Connection, key: int) -> list[pb.BatchInfo]:
    infos = []
    for (entry,) in db.execute("SELECT entry FROM batches WHERE partition_key = ? ORDER BY last_offset", (key,)):
        infos.append(pb.FindBatchesResponse.PartitionResult.FromString(entry).batches[0])
    return infos


def _staged_key(target: Coordinator) -> int:
    return target.view.staged_moves[(0, MOVE)].partition_key


def test_the_staged_batches_are_the_sources_with_the_targets_ids_and_no_read_finds_them(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = frozen_source(source, target)
    served_before = sorted((p.topic_id, p.partition) for p in target.view.partitions())
    assert move_all(source, target, key) == 4  # 8 batches, 2 a chunk
    staged = _staged_key(target)
    moved, kept = _infos(source.store.reader, key), _infos(target.store.reader, staged)
    assert [info.batch_id for info in kept] == list(range(kept[0].batch_id, kept[0].batch_id + 8))
    assert kept[0].batch_id > max(info.batch_id for info in _infos(target.store.reader, 0))  # the target's next ids
    for info in [*moved, *kept]:
        info.batch_id = 0
    assert kept == moved  # offsets, object keys, positions, timestamps, producers and transaction flags alike
    assert [(info.is_transactional, info.is_control) for info in kept].count((True, False)) == 1
    assert kept[-1].is_control
    aborted = "SELECT last_offset, producer_id, first_offset, last_stable_offset, entry FROM aborted_transactions "
    assert target.store.reader.execute(aborted + "WHERE partition_key = ?", (staged,)).fetchall() == (
        source.store.reader.execute(aborted + "WHERE partition_key = ?", (key,)).fetchall()
    )
    assert len(source.store.reader.execute(aborted).fetchall()) == 1
    # Staged under a key no partition row names: the target serves the same partitions as before.
    assert sorted((p.topic_id, p.partition) for p in target.view.partitions()) == served_before
    assert target.store.reader.execute("SELECT 1 FROM partitions WHERE partition_key = ?", (staged,)).fetchall() == []
    rows = {
        row[0]: row[1:]
        for row in target.store.reader.execute("SELECT object_key, live_batches, owned, lender_id FROM files")
    }
    # wal/2 was the target's (its own batch and now the moved one); the others are loan rows lent by the source.
    assert rows == {"wal/1": (2, 0, 0), "wal/2": (2, 0, -1), "wal/3": (2, 0, 0), "wal/4": (2, 0, 0), "wal/5": (1, 0, 0)}
    assert integrity.check_integrity(target.store.path).problem is None  # time index and live counts agree


def test_a_repeated_chunk_changes_nothing_and_a_gap_an_oversized_or_discontinuous_chunk_is_refused(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = frozen_source(source, target)
    first = chunk_at(source, key, 0, 0)
    assert send(target, first) == (ErrorCode.NONE, 1, 1)
    assert send(target, first) == (ErrorCode.NONE, 1, 0)  # a resumed worker sends it again: recorded already
    later = chunk_at(source, key, 2, 0)
    assert send(target, later)[:3] == (ErrorCode.INVALID_REQUEST, 1, 0)  # chunk 2 after 1 staged
    wide = chunk_at(source, key, 1, first.batches[-1].last_offset + 1, limit=CHUNK + 1)
    assert send(target, wide) == (ErrorCode.INVALID_REQUEST, 1, 0)  # more than a chunk holds
    skipping = chunk_at(source, key, 1, first.batches[-1].last_offset + 2)  # skips a batch
    assert send(target, skipping) == (ErrorCode.INVALID_REQUEST, 1, 0)
    second = chunk_at(source, key, 1, first.batches[-1].last_offset + 1)
    # An aborted transaction whose marker is not among the chunk's batches.
    assert send(target, replace(second, aborted=((second.batches[-1].last_offset, 9, 0, 1),))) == (
        ErrorCode.INVALID_REQUEST, 1, 0,
    )  # fmt: skip
    assert send(target, second) == (ErrorCode.NONE, 2, 1)
    # Another move of a partition the target serves is refused; so is a move from the target itself.
    served = AdoptionChunk(0, MOVE + 1, 0, OTHER, 0, (), ())
    assert send(target, served)[0] == ErrorCode.INVALID_REQUEST
    assert send(target, AdoptionChunk(1, MOVE, 0, TOPIC, 0, (), ()))[0] == ErrorCode.INVALID_REQUEST


def test_a_file_the_target_may_be_passing_on_or_has_not_applied_makes_the_chunk_wait(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = frozen_source(source, target)
    # The target's own row for wal/2, made idle and owned (its hand-over may be under way): the loan rule's RETRY.
    writer = page_checksums.connect(target.store.path, apsw.SQLITE_OPEN_READWRITE)
    writer.execute("UPDATE files SET live_batches = 0, owned = 1 WHERE object_key = 'wal/2'")
    writer.execute("DELETE FROM batches WHERE partition_key = 0")
    writer.close()
    assert send(target, chunk_at(source, key, 0, 0))[:2] == (ErrorCode.NONE, 1)  # wal/1 only: borrowed
    target.apply()
    code, staged, written = send(target, chunk_at(source, key, 1, 5))  # offsets 5 (wal/2) and 6 (wal/3)
    assert (code, staged, written) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 1, 0)
    # A file whose commit here is not applied yet waits too (its row is not there to add to or borrow beside).
    commit(target, [batch(OTHER, 1)], "wal/9", apply=False)
    waiting = chunk_at(source, key, 1, 5)
    pending = AdoptionChunk(
        0, MOVE, 1, TOPIC, 0, (waiting.batches[0]._replace(object_key="wal/9"),),
        (waiting.files[0]._replace(object_key="wal/9"),),
    )  # fmt: skip
    assert send(target, pending)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_view_and_sqlite_agree_through_a_reopen_a_rebuild_and_the_state_check(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = frozen_source(source, target)
    move_all(source, target, key, apply_each=True)
    staged = target.view.staged_moves[(0, MOVE)]
    path = target.store.path
    target.store.close()
    reopened = StateStore(path, 1)
    target.store = reopened
    assert reopened.load_view().staged_moves == {(0, MOVE): staged}
    with tempfile.TemporaryDirectory() as directory:
        rebuilt = StateStore(Path(directory) / "state.sqlite", 1)
        created = partition_checks.check_create_partitions(
            rebuilt.load_view(), partition_checks.CreatePartitions(OTHER, "audit", (0, 1)), 0
        )
        rebuilt.apply([(1, list(created.records)), *[(end + 1, r) for end, r in target.written]])  # type: ignore[attr-defined]
        live, replayed = logical_dump(path), logical_dump(rebuilt.path)
        assert len(live["partition_adoptions"]) == 1
        assert {k: v for k, v in replayed.items() if k != "meta"} == {k: v for k, v in live.items() if k != "meta"}
        rebuilt.close()
    assert integrity.move_problems(reopened.reader) == []
    broken = page_checksums.connect(path, apsw.SQLITE_OPEN_READWRITE)
    broken.execute("UPDATE partition_adoptions SET from_coordinator = 1")  # a move from the target itself
    assert len(integrity.move_problems(broken)) == 1
    assert integrity.check_integrity(path).problem is not None
    broken.close()


def test_a_chunk_contradicting_the_staged_ones_is_an_invariant_violation_in_the_view_and_in_sqlite(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key = frozen_source(source, target)
    result = check_adoption_chunk(target.view, chunk_at(source, key, 0, 0), CHUNK, NOW)
    (record,) = result.records
    target.append(result)
    target.apply()
    repeated = rec.MetadataRecord()
    repeated.CopyFrom(record)  # chunk 0 again, as if recorded twice
    with pytest.raises(InvariantViolation):
        kinds.replay(target.view, repeated, target.end_offset + 1)
    with pytest.raises(InvariantViolation):
        target.store.apply([(target.end_offset + 1, [repeated])])
    assert target.store.reader.execute("SELECT chunks FROM partition_adoptions").fetchall() == [(1,)]


def test_a_loan_row_never_waits_for_the_owner_chains_token() -> None:
    """The file workers' list of files awaiting ownership leaves loan rows out: a loan row is returned, never
    taken (design §5a); a chain row not owned yet is listed."""
    with tempfile.TemporaryDirectory() as directory:
        store = StateStore(Path(directory) / "state.sqlite", 1)
        store.close()
        db = page_checksums.connect(store.path, apsw.SQLITE_OPEN_READWRITE)
        insert = (
            "INSERT INTO files (file_id, object_key, file_size, uploader_broker_id, owner_ids, committed_at_ms, "
            "live_batches, is_last_owner, owned, delete_after_ms, part_batches, lender_id) "
            "VALUES (?, ?, 10, 1, '0,1', 0, 0, 0, 0, -1, 0, ?)"
        )
        db.execute(insert, (1, "wal/chain", -1))
        db.execute(insert, (2, "wal/loan", 0))
        found = file_reads.idle_files(db, file_reads.IdleFilesQuery.AWAITING_OWNERSHIP, (NOW, -1), 10)
        assert [facts.object_key for facts in found] == ["wal/chain"]
        db.close()


@pytest.mark.parametrize(("limit", "apply_each"), [(1, True), (1, False), (3, True), (3, False), (8, False)])
def test_any_chunk_size_and_apply_timing_stage_the_same_batches_and_state(
    pair: tuple[Coordinator, Coordinator], limit: int, apply_each: bool
) -> None:
    """Chunks of 1, 3 or all 8 batches, each applied before the next is checked or all applied at the end: the same
    staged batches (but for ids), the same file rows and a sound state; the view's staged move matches a reload."""
    source, target = pair
    key = frozen_source(source, target)
    assert move_all(source, target, key, apply_each, limit) == -(-8 // limit)
    staged = _staged_key(target)
    moved, kept = _infos(source.store.reader, key), _infos(target.store.reader, staged)
    for info in [*moved, *kept]:
        info.batch_id = 0
    assert kept == moved
    rows = dict(target.store.reader.execute("SELECT object_key, live_batches FROM files"))
    assert rows == {"wal/1": 2, "wal/2": 2, "wal/3": 2, "wal/4": 2, "wal/5": 1}
    assert target.store.load_view().staged_moves == target.view.staged_moves
    assert integrity.check_integrity(target.store.path).problem is None
