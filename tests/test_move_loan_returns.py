"""WAL-file loans returned after a partition move, without a server (design §5a): FileLoanReturned at the lender (the
source), FileReturned at the borrower (the target), and the §5 file workers of both coordinators driven alongside.

The source (coordinator 0) moves partition 0 to the target (coordinator 1); the owner chain of every file is (0, 1).
A return asked before the drop waits; after it, the loan leaves the source's row (a repeat changes nothing) and the
target forgets its loan row; the rows to return are a bounded selection. The file shared by the moved partition and
one that stayed (wal/9) is deleted only once neither coordinator holds a live batch in it, whichever side lets go
first, and then it is deleted."""

from __future__ import annotations

import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.files import ownership
from coordinator.files.move_returns import ReturnedLoan, check_file_returned, check_loan_returned
from coordinator.machine import records
from coordinator.machine.state import adoptions, file_reads, integrity, reads
from protos import internal_pb2 as internal
from tests.test_move_adoption_chunks import MOVE, NOW, TOPIC, Coordinator, pair
from tests.test_move_drop import LOANED, SHARED, adopted, drop

__all__ = ["pair"]  # the fixture

QUERIES = (
    (file_reads.IdleFilesQuery.TO_HAND_OVER, (-1,)),
    (file_reads.IdleFilesQuery.TO_SCHEDULE, ()),
    (file_reads.IdleFilesQuery.DUE_FOR_DELETION, (NOW,)),
)


def run(coordinator: Coordinator, result: Result[object]) -> int:
    """Records the check's records and applies them: how many."""
    coordinator.append(result)
    coordinator.apply()
    return len(result.records)


def lose_partition(coordinator: Coordinator, partition: int) -> None:
    """Every batch of the topic's partition here goes (DeleteRecords up to its high watermark)."""
    found = coordinator.view.partition(TOPIC, partition)
    assert found is not None
    run(coordinator, Result([records.records_deleted(found.key, found.high_watermark)], None))


def purge(source: Coordinator) -> None:
    """The purge's passes over the partitions set aside (the moved one's batches)."""
    with source.store.read_transaction() as db:
        awaiting = reads.partitions_awaiting_purge(db, 100)
    if awaiting:
        run(source, Result([records.batches_purged([(key, 2**62) for key in awaiting])], None))


def to_return(coordinator: Coordinator, limit: int = 100) -> list[adoptions.LoanRow]:
    with coordinator.store.read_transaction() as db:
        return adoptions.loan_rows_to_return(db, limit)


def return_loans(coordinators: dict[int, Coordinator]) -> int:
    """Each coordinator's idle loan rows returned (the move worker's pass): the rows forgotten."""
    forgotten = 0
    for borrower, coordinator in coordinators.items():
        for key, lender, move in to_return(coordinator):
            answer = check_loan_returned(coordinators[lender].view, ReturnedLoan(key, borrower, move), NOW)
            run(coordinators[lender], answer)
            if answer.response.error_code == ErrorCode.NONE:
                forgotten += run(coordinator, check_file_returned(coordinator.view, key, NOW))
    return forgotten


def holders(coordinators: dict[int, Coordinator], key: str) -> set[int]:
    """The coordinators holding a live batch in the file (batches awaiting purge counted: they are still stored)."""
    found = set()
    for coordinator_id, coordinator in coordinators.items():
        facts = coordinator.store.committed_file(key)
        if facts is not None and facts.live_batches > 0:
            found.add(coordinator_id)
    return found


def file_workers(coordinators: dict[int, Coordinator], deleted: set[str], only: int | None = None) -> int:
    """One pass of DESIGN §5's file workers at every coordinator (hand-over, deletion scheduling with no grace,
    deletion), or only at coordinator `only`: the records written. A deletion is checked against every coordinator's
    live batches."""
    written = 0
    for coordinator_id, coordinator in coordinators.items():
        if only is not None and coordinator_id != only:
            continue
        for query, bindings in QUERIES:
            with coordinator.store.read_transaction() as db:
                files = file_reads.idle_files(db, query, bindings, 100)
            for facts in files:
                ref = [ownership.FileRef(facts.file_id, facts.object_key)]
                if query is file_reads.IdleFilesQuery.TO_HAND_OVER:
                    following = ownership.next_owner(facts.owner_ids, coordinator_id)
                    assert following is not None
                    handed = internal.HandedOverFile(
                        object_key=facts.object_key, file_size=facts.file_size, owner_ids=facts.owner_ids,
                        uploader_broker_id=facts.uploader_broker_id, committed_at_ms=facts.committed_at_ms,
                    )  # fmt: skip
                    request = internal.HandOverFilesRequest(
                        from_coordinator_id=coordinator_id, to_coordinator_id=following, files=[handed]
                    )
                    written += run(coordinators[following], ownership.check_receive_files(
                        coordinators[following].view, request, NOW))  # fmt: skip
                    written += run(coordinator, ownership.check_handed_over(coordinator.view, ref, NOW))
                elif query is file_reads.IdleFilesQuery.TO_SCHEDULE:
                    written += run(coordinator, ownership.check_schedule_deletions(coordinator.view, ref, NOW, 0))
                else:
                    assert holders(coordinators, facts.object_key) == set(), f"{facts.object_key} deleted while held"
                    if run(coordinator, ownership.check_files_deleted(coordinator.view, ref, NOW)):
                        deleted.add(facts.object_key)
                        written += 1
    return written


def settle(coordinators: dict[int, Coordinator], deleted: set[str]) -> None:
    """Returns and file workers until nothing more happens."""
    for _ in range(20):
        if not return_loans(coordinators) + file_workers(coordinators, deleted):
            return
    raise AssertionError("the file workers and returns do not settle")


def test_a_return_waits_for_the_drop_which_lends_even_a_loan_row_the_target_emptied_meanwhile(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    adopted(pair)
    lose_partition(target, 0)  # the target's retention: its loan rows of the move are idle before the drop
    assert {row.object_key for row in to_return(target)} == LOANED
    assert {(row.lender, row.move_id) for row in to_return(target)} == {(0, MOVE)}
    early = check_loan_returned(source.view, ReturnedLoan("wal/1", 1, MOVE), NOW)
    assert early.response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and not early.records
    assert drop(source, target) == (ErrorCode.NONE, 1)
    pending = check_loan_returned(source.view, ReturnedLoan("wal/1", 1, MOVE), NOW)
    assert len(pending.records) == 1  # lent by the drop, not applied yet: the return is applied after it
    source.apply()
    run(source, pending)
    facts = source.store.committed_file("wal/1")
    assert facts is not None and facts.borrowers == ()
    assert run(target, check_file_returned(target.view, "wal/1", NOW)) == 1
    assert target.store.committed_file("wal/1") is None
    assert run(target, check_file_returned(target.view, "wal/1", NOW)) == 0  # forgotten already
    for coordinator in pair:
        assert integrity.check_integrity(coordinator.store.path).problem is None


def test_a_returned_loan_frees_the_sources_row_once_and_the_target_forgets_its_row(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    adopted(pair)
    drop(source, target)
    source.apply()
    purge(source)
    assert to_return(target) == []  # every loan row still holds the adopted batches
    busy = check_file_returned(target.view, "wal/1", NOW)
    assert busy.response.error_code == ErrorCode.INVALID_REQUEST and not busy.records
    lose_partition(target, 0)
    assert len(to_return(target, 2)) == 2 and {row.object_key for row in to_return(target)} == LOANED  # bounded
    first = check_loan_returned(source.view, ReturnedLoan("wal/1", 1, MOVE), NOW)
    again = check_loan_returned(source.view, ReturnedLoan("wal/1", 1, MOVE), NOW)  # before the first is applied
    assert len(first.records) == len(again.records) == 1
    run(source, first)
    run(source, again)  # a second record of the same return changes nothing
    facts = source.store.committed_file("wal/1")
    assert facts is not None and facts.borrowers == ()
    assert not check_loan_returned(source.view, ReturnedLoan("wal/1", 1, MOVE), NOW).records  # idempotent
    twice = [check_file_returned(target.view, "wal/1", NOW) for _ in range(2)]
    assert [len(r.records) for r in twice] == [1, 1]
    for result in twice:
        run(target, result)
    assert target.store.committed_file("wal/1") is None
    with source.store.read_transaction() as db:
        handed = {f.object_key for f in file_reads.idle_files(db, file_reads.IdleFilesQuery.TO_HAND_OVER, (-1,), 100)}
    assert "wal/1" in handed and not handed & (LOANED - {"wal/1"})  # the others are still lent
    for coordinator in pair:
        assert integrity.check_integrity(coordinator.store.path).problem is None


@pytest.mark.parametrize("first", ["the partition that stayed", "the moved partition"])
def test_a_shared_file_is_deleted_only_once_neither_coordinator_holds_a_live_batch_in_it(
    pair: tuple[Coordinator, Coordinator], first: str
) -> None:
    source, target = pair
    coordinators = {0: source, 1: target}
    deleted: set[str] = set()
    adopted(pair)
    drop(source, target)
    source.apply()

    def stayed() -> None:
        lose_partition(source, 1)
        purge(source)

    def moved() -> None:
        lose_partition(target, 0)

    steps = [stayed, moved]
    if first == "the moved partition":
        steps.reverse()
    settle(coordinators, deleted)
    assert SHARED not in deleted and holders(coordinators, SHARED) == {0, 1}
    steps[0]()
    settle(coordinators, deleted)
    assert SHARED not in deleted and len(holders(coordinators, SHARED)) == 1
    steps[1]()
    settle(coordinators, deleted)
    assert holders(coordinators, SHARED) == set() and SHARED in deleted  # let go by both: deleted by its last owner
    for coordinator in pair:
        assert integrity.check_integrity(coordinator.store.path).problem is None
