"""The per-partition time index (coordinator/machine/state/time_index.py; DESIGN §4's ListOffsets row) without a
server: its answers against a brute-force scan of a model's batches under generated commits, DeleteRecords and
retention; I1 through replay and a snapshot; the state check finding a damaged entry; a schema-6 state migrated."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import apsw
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.base.errors import ErrorCode
from coordinator.base.invariants import InvariantViolation
from coordinator.base.result import Result
from coordinator.commits import rules
from coordinator.machine import records
from coordinator.machine.state import reads, time_index
from coordinator.machine.state.integrity import check_integrity
from coordinator.machine.state.store import StateStore
from coordinator.reads import offset_lookup
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec
from snapshot.snapshots import restore_snapshot, take_snapshot
from tests.harness import batch, laid_out
from tests.lanes import sized
from tests.test_core import commit_part
from tests.test_producer_expiry_core import PARTITIONS, TOPIC, Coordinator, _commit

BASE_MS = 1_000_000
Held = tuple[int, int, int]  # (base offset, last offset, effective timestamp)


@dataclass
class PartitionModel:
    """One partition as ListOffsets sees it: its log start and the batches held, oldest first."""

    log_start: int = 0
    high_watermark: int = 0
    held: list[Held] = field(default_factory=list)

    def move_log_start(self, offset: int) -> None:
        self.log_start = offset
        self.held = [b for b in self.held if b[1] >= offset]  # a straddling batch stays

    def list_offset(self, timestamp: int) -> tuple[ErrorCode, int, int]:
        """DESIGN §4 by brute force: every held batch looked at, in offset order."""
        if timestamp == offset_lookup.MAX_TIMESTAMP:
            if not self.held:
                return ErrorCode.NONE, -1, -1
            highest = max(b[2] for b in self.held)
            first = next(b for b in self.held if b[2] == highest)
            return ErrorCode.NONE, highest, max(first[0], self.log_start)
        found = next((b for b in self.held if b[2] >= timestamp), None)
        return (ErrorCode.NONE, -1, -1) if found is None else (ErrorCode.NONE, found[2], max(found[0], self.log_start))

    def entries(self, partition_key: int) -> list[time_index.Entry]:
        """The time index of the held batches: where the max timestamp grows, once per interval at most."""
        found: list[time_index.Entry] = []
        highest = -2
        for base, last, timestamp in self.held:
            if timestamp > highest:
                highest = timestamp
                if not found or found[-1][2] // time_index.INTERVAL_OFFSETS != last // time_index.INTERVAL_OFFSETS:
                    found.append((partition_key, timestamp, last, base))
        return found


# A commit: its batches, each (partition, records, timestamp type, max timestamp relative to BASE_MS or -1), and ms
# the clock moves first (LOG_APPEND_TIME batches take the append time). Timestamps go up and down.
a_batch = st.tuples(
    st.integers(0, PARTITIONS - 1),
    st.integers(1, 3),
    st.sampled_from([pb.CREATE_TIME, pb.CREATE_TIME, pb.LOG_APPEND_TIME, pb.NO_TIMESTAMP_TYPE]),
    st.one_of(st.just(-1), st.integers(-20, 40)),
)
commit = st.tuples(st.just("commit"), st.lists(a_batch, min_size=1, max_size=4), st.integers(0, 15))
# DeleteRecords or a retention step: (partition, how far past the log start, as a fraction of what is held).
delete = st.tuples(st.just("delete"), st.integers(0, PARTITIONS - 1), st.floats(0, 1))
retention = st.tuples(st.just("retention"), st.integers(0, PARTITIONS - 1), st.floats(0, 1))


def _written(partition: int, count: int, timestamp_type: int, relative: int) -> pb.CommitFileRequest.Batch:
    if timestamp_type == pb.NO_TIMESTAMP_TYPE:  # magic 0: no timestamps at all
        return batch(TOPIC, partition, count, magic=0, timestamp_type=timestamp_type, max_timestamp=-1)
    timestamp = -1 if relative == -1 else BASE_MS + relative
    return batch(TOPIC, partition, count, timestamp_type=timestamp_type, max_timestamp=timestamp)


def _check(coordinator: Coordinator, models: list[PartitionModel], probes: list[int]) -> None:
    with coordinator.store.read_transaction() as db:
        for partition, model in enumerate(models):
            offsets = reads.partition_offsets(db, TOPIC, partition)
            assert offsets is not None
            assert (offsets.log_start_offset, offsets.high_watermark) == (model.log_start, model.high_watermark)
            stored = db.execute(
                "SELECT partition_key, timestamp, last_offset, base_offset FROM time_index WHERE partition_key = ? "
                "ORDER BY timestamp",
                (offsets.partition_key,),
            ).fetchall()
            assert [tuple(row) for row in stored] == model.entries(offsets.partition_key)
            timestamps = {t for b in model.held for t in (b[2] - 1, b[2], b[2] + 1) if t >= 0} | set(probes)
            for timestamp in sorted(timestamps | {offset_lookup.MAX_TIMESTAMP}):
                found = offset_lookup.list_offset(db, offsets, timestamp)
                assert found == model.list_offset(timestamp), (partition, timestamp, model)
        assert time_index.index_problems(db) == []


class Run:
    """A coordinator's core driven by generated operations beside one model per partition; every frame applied is
    kept, for replaying it elsewhere."""

    def __init__(self, path: Path, on_event: Callable[[str], None] = lambda _: None) -> None:
        self.on_event = on_event  # hypothesis' `event` inside a generated test
        path.parent.mkdir(parents=True, exist_ok=True)
        store = StateStore(path, 0)
        self.coordinator = Coordinator(store, store.load_view(), store.applied_offset)
        self.models = [PartitionModel() for _ in range(PARTITIONS)]
        self.frames: list[tuple[int, list[rec.MetadataRecord]]] = []
        self.now = BASE_MS
        self.files = 0
        request = partition_checks.CreatePartitions(TOPIC, "orders", tuple(range(PARTITIONS)))
        self.coordinator.append(partition_checks.check_create_partitions(self.coordinator.view, request, 0))
        self.apply()

    def apply(self) -> None:
        self.frames.extend(self.coordinator.pending)
        self.coordinator.apply()

    def step(self, operation: Any) -> None:
        coordinator = self.coordinator
        if operation[0] == "commit":
            _, batches, advance_ms = operation
            self.now += advance_ms
            self.files += 1
            written = [_written(*b) for b in batches]
            assert _commit(coordinator, written, f"wal/{self.files}", self.now) == [pb.NONE] * len(written)
            for (partition, count, timestamp_type, _), sent in zip(batches, written, strict=True):
                model = self.models[partition]
                timestamp = self.now if timestamp_type == pb.LOG_APPEND_TIME else sent.batch_max_timestamp
                model.held.append((model.high_watermark, model.high_watermark + count - 1, timestamp))
                model.high_watermark += count
            return
        _, partition, fraction = operation
        model = self.models[partition]
        target = model.log_start + round(fraction * (model.high_watermark - model.log_start))
        if target <= model.log_start:
            return
        self.on_event(f"{operation[0]} moves the log start")
        if operation[0] == "delete":
            request = partition_checks.DeleteRecords(((TOPIC, partition, target),))
            result = partition_checks.check_delete_records(coordinator.view, request, self.now)
            assert result.response[0].error_code == ErrorCode.NONE
            coordinator.append(result)
        else:  # what a retention step writes (which batches expired is the retention tests' business)
            partition_view = coordinator.view.partition(TOPIC, partition)
            assert partition_view is not None
            coordinator.append(Result([records.retention_applied([(partition_view.key, target)])], None))
        model.move_log_start(target)

    def run(self, operations: list[Any], probes: list[int]) -> None:
        for number, operation in enumerate(operations):
            self.step(operation)
            if number % 3 == 2 or number == len(operations) - 1:
                self.apply()
                _check(self.coordinator, self.models, probes)


@settings(max_examples=sized(100, 30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(commit, commit, commit, delete, retention), min_size=1, max_size=40),
    st.lists(st.integers(BASE_MS - 25, BASE_MS + 300), max_size=4),
    st.sampled_from([1, 2, 5, 16, time_index.INTERVAL_OFFSETS]),
)
def test_the_indexed_answers_are_a_brute_force_scans(operations: list[Any], probes: list[int], offsets: int) -> None:
    """Every ListOffsets answer by timestamp (each held timestamp, one either side of it, random ones) and
    MAX_TIMESTAMP equals the first held batch's that a scan of the model finds, clamped to the log start; the stored
    index is exactly Kafka's for the held batches, after commits (LOG_APPEND_TIME, CreateTime, -1, magic 0) and
    log starts moved by DeleteRecords and retention (straddling batches kept). Intervals of a few offsets make
    many entries of a short run; the real one makes one, the rest found by reading its interval."""
    with tempfile.TemporaryDirectory() as directory, mock.patch.object(time_index, "INTERVAL_OFFSETS", offsets):
        run = Run(Path(directory) / "state.sqlite", event)
        try:
            run.run(operations, probes)
        finally:
            run.coordinator.store.close()


# The head holds a timestamp far above what follows: when it leaves, every batch after it becomes an entry.
FAR_AHEAD: list[Any] = [
    ("commit", [(0, 1, pb.CREATE_TIME, 40)], 1),
    *[("commit", [(0, 1, pb.CREATE_TIME, i), (1, 1, pb.LOG_APPEND_TIME, 0)], 1) for i in range(10)],
    ("delete", 0, 0.05),
    ("retention", 1, 0.5),
    ("commit", [(0, 2, pb.CREATE_TIME, 5), (0, 1, pb.CREATE_TIME, -1)], 3),
    ("delete", 0, 0.5),
    ("retention", 0, 1.0),
    ("commit", [(0, 1, pb.CREATE_TIME, -1), (0, 1, pb.CREATE_TIME, 3)], 0),
]


@mock.patch.object(time_index, "INTERVAL_OFFSETS", 1)
def test_a_head_far_ahead_leaving_lets_the_batches_after_it_be_found(tmp_path: Path) -> None:
    run = Run(tmp_path / "state.sqlite")
    run.run(FAR_AHEAD[:2], [])
    with run.coordinator.store.read_transaction() as db:  # before: one entry, the head's
        assert db.execute("SELECT count(*) FROM time_index WHERE partition_key = 0").fetchone()[0] == 1
    run.run(FAR_AHEAD[2:], [BASE_MS + 4])
    run.coordinator.store.close()


@mock.patch.object(time_index, "INTERVAL_OFFSETS", 2)
def test_replay_and_a_snapshot_give_the_same_index(tmp_path: Path) -> None:
    """I1: the live state (applied as it went), a state replayed from the whole log in one transaction, and a
    snapshot taken midway with the rest of the log applied are equal, the time index included."""
    run = Run(tmp_path / "live" / "state.sqlite")
    half = len(FAR_AHEAD) // 2
    run.run(FAR_AHEAD[:half], [])
    snapshot = take_snapshot(run.coordinator.store.path, tmp_path / "snapshots", 100, 0)
    run.run(FAR_AHEAD[half:], [])
    run.coordinator.store.close()

    replayed = StateStore(tmp_path / "replayed.sqlite", 0)
    replayed.apply(run.frames)
    replayed.close()
    restored_path = tmp_path / "restored" / "state.sqlite"
    restored_path.parent.mkdir()
    restore_snapshot(snapshot, restored_path)
    restored = StateStore(restored_path, 0)
    restored.apply([frame for frame in run.frames if frame[0] > restored.applied_offset])
    restored.close()

    expected = logical_dump(tmp_path / "live" / "state.sqlite")
    assert len(expected["time_index"]) > PARTITIONS, "the run left too few entries to compare"
    assert logical_dump(tmp_path / "replayed.sqlite") == expected
    assert logical_dump(restored_path) == expected


def _filled(path: Path) -> None:
    run = Run(path)
    run.run(FAR_AHEAD, [])
    run.coordinator.store.close()


def _damage(path: Path, statement: str) -> str | None:
    connection = apsw.Connection(str(path))  # plain SQLite: the page checksums are rewritten with the pages
    try:
        connection.execute(statement)
        assert connection.changes() == 1, statement
    finally:
        connection.close()
    return check_integrity(path).problem


@mock.patch.object(time_index, "INTERVAL_OFFSETS", 2)
def test_the_state_check_finds_a_damaged_time_index_entry(tmp_path: Path) -> None:
    """A sound file (every page, every key in order) with a wrong entry, a missing one or one too many: the
    state check says which, so the coordinator rebuilds; the undamaged state passes."""
    pristine = tmp_path / "pristine.sqlite"
    _filled(pristine)
    assert check_integrity(pristine).problem is None
    damages = {
        "UPDATE time_index SET timestamp = timestamp + 1 WHERE partition_key = 0 AND last_offset = "
        "(SELECT max(last_offset) FROM time_index WHERE partition_key = 0)": "time index entry wrong",
        "DELETE FROM time_index WHERE partition_key = 1 AND last_offset = "
        "(SELECT min(last_offset) FROM time_index WHERE partition_key = 1)": "time index entry missing",
        f"INSERT INTO time_index VALUES (0, {2 * BASE_MS}, 999, 999)": "time index entry extra",
    }
    for number, (statement, expected) in enumerate(damages.items()):
        damaged = tmp_path / f"damaged-{number}.sqlite"
        shutil.copyfile(pristine, damaged)
        problem = _damage(damaged, statement)
        assert problem is not None and expected in problem, (statement, problem)


@mock.patch.object(time_index, "INTERVAL_OFFSETS", 2)
def test_a_schema_6_state_gets_its_time_index_at_open(tmp_path: Path) -> None:
    """A state of before the index (no table, schema 6) is migrated in place: the index is built from the held
    batches at open, equal to the one a state kept from the start."""
    path = tmp_path / "state.sqlite"
    _filled(path)
    expected = logical_dump(path)
    connection = apsw.Connection(str(path))
    try:
        connection.execute("DROP TABLE time_index")
        connection.execute("UPDATE meta SET value = 6 WHERE name = 'schema_version'")
    finally:
        connection.close()
    assert check_integrity(path).problem is None  # nothing to compare before the migration
    StateStore(path, 0).close()
    assert logical_dump(path) == expected
    assert check_integrity(path).problem is None


def test_a_deleted_topic_keeps_no_entries_while_its_batches_await_purge(tmp_path: Path) -> None:
    run = Run(tmp_path / "state.sqlite")
    run.run(FAR_AHEAD[:4], [])
    run.coordinator.append(
        partition_checks.check_delete_topic(run.coordinator.view, partition_checks.DeleteTopic(TOPIC), 0)
    )
    run.apply()
    with run.coordinator.store.read_transaction() as db:
        assert db.execute("SELECT count(*) FROM batches").fetchone()[0] > 0  # awaiting purge
        assert db.execute("SELECT count(*) FROM time_index").fetchone()[0] == 0
        keys = reads.partitions_awaiting_purge(db, 10)
    run.coordinator.append(Result([records.batches_purged([(keys[0], 2)])], None))
    run.apply()
    with run.coordinator.store.read_transaction() as db:
        assert db.execute("SELECT count(*) FROM time_index").fetchone()[0] == 0
        assert time_index.index_problems(db) == []
    run.coordinator.store.close()


@mock.patch.object(time_index, "INTERVAL_OFFSETS", 4)
def test_an_entry_that_stays_gives_its_interval_to_a_raise_before_it(tmp_path: Path) -> None:
    """Offsets 0..5 at timestamps 50, 10, 20, 25, 30, 60 (one record each): entries at 0 and 5 (30 raised
    nothing under 50). Once 0 leaves, 30 at offset 4 raises the max first in the interval 4..7: it is the entry
    there, not 60 at 5, which stays as a raise that the interval's read finds."""
    run = Run(tmp_path / "state.sqlite")
    run.run([("commit", [(0, 1, pb.CREATE_TIME, relative)], 1) for relative in (50, 10, 20, 25, 30, 60)], [])
    with run.coordinator.store.read_transaction() as db:
        assert db.execute("SELECT last_offset FROM time_index WHERE partition_key = 0").fetchall() == [(0,), (5,)]
    run.run([("delete", 0, 1 / 6)], [BASE_MS + 29, BASE_MS + 31, BASE_MS + 60])
    with run.coordinator.store.read_transaction() as db:
        assert db.execute("SELECT last_offset FROM time_index WHERE partition_key = 0").fetchall() == [(1,), (4,)]
    run.coordinator.store.close()


@mock.patch.object(time_index, "INTERVAL_OFFSETS", 1)
def test_a_transaction_rolled_back_leaves_no_tail_behind(tmp_path: Path) -> None:
    """The partitions' tails the state keeps in memory change in place as a transaction goes; one that fails
    (here a commit far ahead, then a record the state refuses) is rolled back, and the next commits are indexed
    from what SQLite holds, not from the commit that never was."""
    run = Run(tmp_path / "state.sqlite")
    run.run([("commit", [(0, 1, pb.CREATE_TIME, 5)], 1)], [])
    coordinator = run.coordinator
    far_ahead = rules.check_commit_part(
        coordinator.view, commit_part(laid_out([_written(0, 1, pb.CREATE_TIME, 500)]), "wal/never"), run.now
    )
    refused = records.retention_applied([(99, 1)])  # no partition 99 here: an invariant the apply checks
    with pytest.raises(InvariantViolation):
        coordinator.store.apply([(coordinator.end_offset + 1, [*far_ahead.records, refused])])
    run.run([("commit", [(0, 1, pb.CREATE_TIME, 10)], 1), ("commit", [(0, 1, pb.CREATE_TIME, 20)], 1)], [])
    coordinator.store.close()
