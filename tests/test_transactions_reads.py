"""A read_committed answer's aborted transactions joined in SQL (coordinator/machine/state/reads.py): the same
bytes as the rows sorted in Python, found through the primary key only (O(result))."""

from __future__ import annotations

from coordinator.machine.state import reads
from tests.test_producer_expiry_core import Coordinator
from tests.test_transactions_core import commit, coordinator, data, find, marker

__all__ = ["coordinator"]  # the fixture


def test_the_joined_answer_is_found_through_the_primary_key(coordinator: Coordinator) -> None:
    with coordinator.store.read_transaction() as db:
        plan = [str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + reads._ABORTED_ENTRIES, (0, 10, 14))]
    searches = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert searches == ["SEARCH aborted_transactions USING PRIMARY KEY (partition_key=? AND last_offset>? AND "
                        "last_offset<?)", "SEARCH aborted_transactions USING PRIMARY KEY (partition_key=? AND "
                        "last_offset>?)"], plan  # fmt: skip


def test_aborted_transactions_are_listed_by_first_offset_when_they_ended_out_of_order(coordinator: Coordinator) -> None:
    """Producer 1 opens at 0, producer 2 at 1 and aborts first: marker order (2, 1) is not first-offset order (1, 2).
    The answer joined in SQL is in marker order only when no row of it was aborted under an older open transaction
    (its recorded LSO below its own first offset); here one was, and the answer is sorted as Kafka's readers expect.
    """
    commit(coordinator, [data(0, 1, 1, 0, 0), data(0, 1, 2, 0, 0)], "w/open")
    commit(coordinator, [marker(0, 2, 0, commit=False)], "w/abort-2")  # offset 2, LSO 0 (producer 1's)
    commit(coordinator, [data(0, 1, 3, 0, 0), marker(0, 3, 0, commit=False)], "w/3")  # 3..4, while 1 is open
    commit(coordinator, [marker(0, 1, 0, commit=False)], "w/abort-1")  # offset 5
    commit(coordinator, [data(0, 1, 4, 0, 0), marker(0, 4, 0, commit=False)], "w/4")  # 6..7, nothing else open
    expected = [(1, 0), (2, 1), (3, 3), (4, 6)]
    assert find(coordinator, 0, 0).aborted == expected
    with coordinator.store.read_transaction() as db:
        for low in range(9):
            for high in range(low + 1, 9):
                joined = b"".join(entry for _, _, entry in reads._aborted_rows(db, 0, low, high))
                assert reads.aborted_entries(db, 0, low, high) == joined, (low, high)
        ((_, unordered),) = db.execute(reads._ABORTED_ENTRIES, (0, 0, 8)).fetchall()
        assert unordered == 1  # the sorted path answered
        ((_, unordered),) = db.execute(reads._ABORTED_ENTRIES, (0, 6, 8)).fetchall()
        assert unordered == 0  # only producer 4's: joined in SQL as it is
