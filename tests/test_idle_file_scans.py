"""The file workers' work lists cost the rows they return, not the coordinator's idle rows (schema 14,
schema.IDLE_FILE_INDEXES): each list is read through an index of its own, whatever else the state holds.

At the end of a 100,000-file consolidation each coordinator held ~10,000 idle file rows; every list walked all of
them (one table read each) when few matched, four lists and the loan returns per cycle, on the node's loop. Here a
state holds the same few rows of each list beside a small or a ten times larger mass of rows none of the lists
returns (live files, rows past the workers' cursors, deletions still in their grace period): the SQLite VM steps of
each list's read must not grow with that mass, and its plan must read its own index with no sort."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from coordinator.machine import records
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state import adoptions, file_reads
from coordinator.machine.state.store import StateStore

NOW = 10_000_000
EARLY = 1_000  # committed long before the probe delay
GRACE_ENDS = NOW + 3_600_000  # deletions still in their grace period
MATCHING = 3  # rows of each list


class State:
    """A coordinator 0's state: `noise` rows of each kind no list returns, then MATCHING rows of each list."""

    def __init__(self, path: Path, noise: int) -> None:
        self.store = StateStore(path, 0)
        file_records: list[records.rec.MetadataRecord] = [records.partition_created(0, b"\x01" * 16, "t", 0)]
        self._next_file_id = 0
        self._batch_id = self.store.load_view().next_batch_id
        scheduled: list[int] = []
        for _ in range(noise):
            file_records.append(self._file([0], EARLY, live=True))  # live here: in no list
            file_records.append(self._file([0, 1], EARLY))  # to hand over, but before the cursor
            file_records.append(self._file([1, 0], EARLY))  # awaiting ownership, before the cursor
            scheduled.append(self._next_file_id)
            file_records.append(self._file([0], EARLY))  # owned last, its deletion in its grace period
        self.cursor = self._next_file_id - 1
        self.lists: dict[str, set[str]] = {name: set() for name in ("hand_over", "awaiting", "schedule", "due", "loan")}
        due: list[int] = []
        for _ in range(MATCHING):
            for name, owners in (("hand_over", [0, 1]), ("awaiting", [1, 0]), ("schedule", [0]), ("loan", [1, 0])):
                self.lists[name].add(f"wal/{self._next_file_id}")
                file_records.append(self._file(owners, EARLY))
            self.lists["due"].add(f"wal/{self._next_file_id}")
            due.append(self._next_file_id)
            file_records.append(self._file([0], EARLY))
        deletions = [records.file_deletion_scheduled(f, GRACE_ENDS) for f in scheduled]
        deletions += [records.file_deletion_scheduled(f, NOW - 1) for f in due]
        self.store.apply([(self.store.applied_offset + 1, file_records)])
        self.store.apply([(self.store.applied_offset + 1, deletions)])
        self.store.close()
        # A loan row is made by a partition move's adoption (design §5a); only its columns matter to the read.
        db = apsw.Connection(str(path))
        with db:
            db.executemany(
                "UPDATE files SET lender_id = 1, loan_move_id = 7 WHERE object_key = ?",
                [(key,) for key in self.lists["loan"]],
            )
        db.close()
        self.store = StateStore(path, 0)

    def _file(self, owners: list[int], committed_at_ms: int, live: bool = False) -> records.rec.MetadataRecord:
        file_id = self._next_file_id
        self._next_file_id += 1
        batches = []
        if live:
            offset = self._batch_id
            batches = [CommittedBatch(self._batch_id, 0, 0, 10, offset, offset, 0, -1, -1, -1, -1, 2, 0)]
            self._batch_id += 1
        return records.file_committed(file_id, f"wal/{file_id}", 10, 1, owners, committed_at_ms, batches)


def _queries(cursor: int) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """(list, index, statement, bindings with the limit) of every list the workers read."""
    limit = 100
    found = [
        (name, query.index, file_reads.idle_files_statement(query), (*bindings, limit))
        for name, query, bindings in (
            ("hand_over", file_reads.IdleFilesQuery.TO_HAND_OVER, (cursor,)),
            ("awaiting", file_reads.IdleFilesQuery.AWAITING_OWNERSHIP, (NOW, cursor)),
            ("schedule", file_reads.IdleFilesQuery.TO_SCHEDULE, ()),
            ("due", file_reads.IdleFilesQuery.DUE_FOR_DELETION, (NOW,)),
        )
    ]
    found.append(("loan", "files_loan_rows_idle", adoptions.LOAN_ROWS_TO_RETURN, (limit,)))
    return found


def vm_steps(db: apsw.Connection, statement: str, bindings: tuple[int, ...]) -> tuple[int, set[str]]:
    """The SQLite VM instructions one read runs (the progress handler called on each), and the keys it returns."""
    steps = 0

    def count() -> bool:
        nonlocal steps
        steps += 1
        return False  # go on

    db.set_progress_handler(count, 1)
    try:
        keys = {str(row[1] if isinstance(row[0], int) else row[0]) for row in db.execute(statement, bindings)}
    finally:
        db.set_progress_handler(None)
    return steps, keys


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[State, State]]:
    small = State(tmp_path_factory.mktemp("small") / "state.sqlite", 50)
    large = State(tmp_path_factory.mktemp("large") / "state.sqlite", 500)
    yield small, large
    small.store.close()
    large.store.close()


@pytest.mark.parametrize("name", ["hand_over", "awaiting", "schedule", "due", "loan"])
def test_each_list_reads_its_rows_whatever_the_idle_rows_around_them(states: tuple[State, State], name: str) -> None:
    counted = []
    for state in states:
        (query,) = [q for q in _queries(state.cursor) if q[0] == name]
        _, index, statement, bindings = query
        with state.store.read_transaction() as db:
            steps, keys = vm_steps(db, statement, bindings)
            plan = "\n".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {statement}", bindings))
        assert keys == state.lists[name], (name, keys)
        assert f"USING INDEX {index}" in plan and "TEMP B-TREE" not in plan, plan
        assert "USING PRIMARY KEY" in plan, plan  # the loan test: one seek in file_loans per row of the list
        counted.append(steps)
    small, large = counted
    # Ten times the rows around them (450 more of each kind, 1,800 idle rows): the same steps, give or take a
    # B-tree level; a read that walked them would take thousands more.
    assert large - small <= 40, (name, counted)


def test_the_count_catches_a_walk_over_the_idle_rows(states: tuple[State, State]) -> None:
    """The measure itself: the same list read through the index of all idle rows (schema 13's shape) grows with
    them, so the bound above fails if a list's read walks them again."""
    counted = []
    for state in states:
        (_, index, statement, bindings) = _queries(state.cursor)[3]  # due for deletion
        walk = statement.replace(f"INDEXED BY {index}", "INDEXED BY files_idle").replace(
            "ORDER BY delete_after_ms, file_id", "ORDER BY file_id"
        )
        with state.store.read_transaction() as db:
            steps, keys = vm_steps(db, walk, bindings)
        assert keys == state.lists["due"]
        counted.append(steps)
    small, large = counted
    assert large - small > 1_000, counted
