"""Older state files brought to today's schema at open (coordinator/machine/state/schema.py MIGRATIONS)."""

from __future__ import annotations

from pathlib import Path

import apsw

from coordinator.machine import records
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state import file_reads
from coordinator.machine.state.schema import IDLE_FILE_INDEXES, SCHEMA_VERSION
from coordinator.machine.state.store import StateStore
from protos import coordinator_pb2 as pb

TOPIC = b"\x07" * 16
_IDLE_FILE_INDEX_NAMES = tuple(statement.split()[5] for statement in IDLE_FILE_INDEXES)
PRODUCERS = (-1, 0, 5, 2**40)  # not idempotent, producer 0 (its entry reads the same either way), two others


def _entry_info(entry: bytes) -> pb.BatchInfo:
    (info,) = pb.FindBatchesResponse.PartitionResult.FromString(entry).batches
    return info


def test_a_schema_7_entry_that_does_not_name_its_producer_is_rebuilt_with_it(tmp_path: Path) -> None:
    """Schema 8: an entry names its batch's producer (BatchInfo.producer_id, -1 when not idempotent). A schema 7
    entry said nothing, which a reader takes for producer 0: every such entry is rebuilt from its row's columns."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0)
    store.apply([(store.applied_offset + 1, [records.partition_created(p, TOPIC, "t", p) for p in range(4)])])
    for n in range(3):
        batch_id = store.load_view().next_batch_id
        batches = [
            CommittedBatch(batch_id + p, p, 0, 10, n, n, 0, producer, 0 if producer >= 0 else -1,
                           n if producer >= 0 else -1, n if producer >= 0 else -1, 2, 0)
            for p, producer in enumerate(PRODUCERS)
        ]  # fmt: skip
        store.apply([(store.applied_offset + 1, [records.file_committed(n, f"wal/{n}", 10, 1, [0], 1000, batches)])])
    store.close()
    db = apsw.Connection(str(path))
    with db:  # as schema 7 wrote them: no producer in the entry
        for key, last_offset, entry in db.execute("SELECT partition_key, last_offset, entry FROM batches").fetchall():
            info = _entry_info(entry)
            info.ClearField("producer_id")
            old = pb.FindBatchesResponse.PartitionResult(batches=[info]).SerializeToString()
            db.execute(
                "UPDATE batches SET entry = ? WHERE partition_key = ? AND last_offset = ?", (old, key, last_offset)
            )
        db.execute("UPDATE meta SET value = 7 WHERE name = 'schema_version'")
    assert {_entry_info(e).producer_id for (e,) in db.execute("SELECT entry FROM batches")} == {0}
    db.close()

    StateStore(path, 0).close()

    db = apsw.Connection(str(path))
    rows = db.execute("SELECT producer_id, entry FROM batches").fetchall()
    assert sorted({producer for producer, _ in rows}) == sorted(PRODUCERS) and len(rows) == 3 * len(PRODUCERS)
    assert all(_entry_info(entry).producer_id == producer for producer, entry in rows), rows
    assert db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchall() == [(SCHEMA_VERSION,)]
    db.close()


def _one_file_state_as_of(tmp_path: Path, version: int, *statements: str) -> Path:
    """A state holding one committed file, rewritten by `statements` as schema `version` had it."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0)
    store.apply([(store.applied_offset + 1, [records.file_committed(0, "wal/0", 10, 1, [0], 1000, [])])])
    store.close()
    db = apsw.Connection(str(path))
    with db:
        for statement in statements:
            db.execute(statement)
        db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (version,))
    db.close()
    return path


def test_a_schema_10_file_row_is_of_its_owner_chain_at_schema_11(tmp_path: Path) -> None:
    """Schema 11 (partition moves, design §5a): `files.lender_id` is added, -1 (a chain row, no loan) for every row
    an older state holds; its new tables are made empty."""
    path = _one_file_state_as_of(
        tmp_path,
        10,
        # schema 14's indexes first: they name the column
        *(f"DROP INDEX {name}" for name in _IDLE_FILE_INDEX_NAMES),
        "ALTER TABLE files DROP COLUMN lender_id",
        "DROP TABLE partition_adoptions",
    )

    StateStore(path, 0).close()

    db = apsw.Connection(str(path))
    assert db.execute("SELECT object_key, lender_id FROM files").fetchall() == [("wal/0", -1)]
    assert db.execute("SELECT count(*) FROM partition_adoptions").fetchall() == [(0,)]
    assert db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchall() == [(SCHEMA_VERSION,)]
    db.close()


def test_a_schema_11_state_gains_empty_drops_loans_and_abandons_at_schema_12(tmp_path: Path) -> None:
    """Schema 12 (the moves' drop, WAL-file loans and abandons, design §5a): the tables are made empty, every file row
    an older state holds has no loan out, and a chain row names no loan's move."""
    path = _one_file_state_as_of(
        tmp_path,
        11,
        *(f"DROP TABLE {table}" for table in ("partition_moves_out", "file_loans", "abandoned_adoptions")),
        "ALTER TABLE files DROP COLUMN loan_move_id",
    )

    store = StateStore(path, 0)
    facts = store.committed_file("wal/0")
    assert facts is not None and facts.borrowers == () and facts.loans_out == 0 and facts.loan_move_id == -1
    store.close()

    db = apsw.Connection(str(path))
    for table in ("partition_moves_out", "file_loans", "abandoned_adoptions"):
        assert db.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]
    assert db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchall() == [(SCHEMA_VERSION,)]
    db.close()


def test_a_schema_13_state_gains_the_file_workers_indexes_at_schema_14(tmp_path: Path) -> None:
    """Schema 14: each file-worker list has an index of its own (schema.IDLE_FILE_INDEXES), built from the rows an
    older state holds, so its idle files are found through it at once."""
    path = _one_file_state_as_of(tmp_path, 13, *(f"DROP INDEX {name}" for name in _IDLE_FILE_INDEX_NAMES))

    store = StateStore(path, 0)
    with store.read_transaction() as reader:
        names = {row[0] for row in reader.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
        assert set(_IDLE_FILE_INDEX_NAMES) <= names
        scheduled = file_reads.idle_files(reader, file_reads.IdleFilesQuery.TO_SCHEDULE, (), 10)
        assert [f.object_key for f in scheduled] == ["wal/0"]  # a file with no batch, owned by its only owner
        (version,) = reader.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        assert version == SCHEMA_VERSION == 14
    store.close()
