"""The loan rule for WAL files across partition moves (docs/design.md §5a, `coordinator/files/loans.py`).

A model of one WAL file at several coordinators: each coordinator's row (live batches, the chain's token, a
lender, loans out), the partitions holding batches in the file, and every step that is two records in two logs
split in two, so that any other step may run in between: a hand-over (the receiver records, then the sender
forgets), a return (the lender settles, then the borrower forgets) and a move (freeze at the source, staging and
adoption at the target, drop at the source; or the target's abandon with the source's cancel). A loan row names the
move that made it: its drop lends it, and its lender holds its return back only while that move is in progress.
Batches are deleted at any time from partitions not frozen. Hypothesis interleaves them; after every step no file
is deleted while a coordinator holds a live batch in it (I4), and at the end, with every batch gone and the workers
run to quiescence, every move is over, the file is deleted and no row is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from coordinator.files.loans import (
    NO_LENDER,
    FileAdoption,
    HeldFile,
    LoanReturn,
    adoption_of_file,
    is_idle,
    keeps_row_after_return,
    loan_return,
    may_pass_token,
    may_return,
)

COORDINATORS = 3


@dataclass
class Row:
    owner_ids: tuple[int, ...]
    live: int
    owned: bool
    lender: int = NO_LENDER
    loans: set[int] = field(default_factory=set)
    loan_move: Move | None = None  # the move that made this loan row: its lender holds the return back only for it

    def held(self) -> HeldFile:
        return HeldFile(self.live, self.owned, self.lender, len(self.loans))


@dataclass
class Partition:
    holder: int
    batches: int  # live batches in the file


@dataclass(eq=False)  # compared by identity: two moves of the same pair are different moves
class Move:
    source: int
    target: int
    staged: int = -1  # batches staged at the target, -1 before the staging
    adopted: bool = False
    borrowed: bool = False


class FileLoans(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, Row] = {}
        self.partitions: list[Partition] = []
        self.moves: dict[int, Move] = {}  # partition index -> its move in progress
        self.handing: dict[int, int] = {}  # sender -> receiver, the receiver has recorded
        self.returning: set[int] = set()  # borrowers whose lender settled the loan
        self.source_batches: dict[int, int] = {}  # partition index -> batches its source counts until the drop
        self.deleted = False

    @initialize(
        owners=st.permutations(range(COORDINATORS)).flatmap(
            lambda p: st.integers(1, COORDINATORS).map(lambda n: p[:n])
        ),
        sizes=st.lists(st.tuples(st.integers(0, COORDINATORS - 1), st.integers(1, 3)), min_size=1, max_size=6),
    )
    def commit(self, owners: list[int], sizes: list[tuple[int, int]]) -> None:
        owner_ids = tuple(owners)
        for position, owner in enumerate(owner_ids):
            self.rows[owner] = Row(owner_ids, 0, owned=position == 0)
        for index, batches in sizes:
            holder = owner_ids[index % len(owner_ids)]  # a commit's batches are at coordinators it names
            self.partitions.append(Partition(holder, batches))
            self.rows[holder].live += batches

    # ------------------------------------------------------------------ the brokers' and operators' steps

    @rule(pick=st.integers(0, 99), count=st.integers(1, 3))
    def delete_batches(self, pick: int, count: int) -> None:
        index = pick % len(self.partitions)
        partition = self.partitions[index]
        move = self.moves.get(index)
        if move is not None and not move.adopted:
            return  # frozen at the source: retention and DeleteRecords are refused
        holder = move.target if move is not None else partition.holder
        gone = min(count, partition.batches)
        if gone == 0:
            return
        partition.batches -= gone  # after the cut-over at the target; the source's frozen copy stays until its drop
        self.rows[holder].live -= gone

    @rule(pick=st.integers(0, 99), to=st.integers(0, COORDINATORS - 1))
    def start_move(self, pick: int, to: int) -> None:
        index = pick % len(self.partitions)
        partition = self.partitions[index]
        if index in self.moves or to == partition.holder:
            return
        self.moves[index] = Move(partition.holder, to)
        self.source_batches[index] = 0

    @rule(pick=st.integers(0, 99))
    def stage(self, pick: int) -> None:
        index, move = self._move(pick, adopted=False)
        if move is None or move.staged >= 0:
            return
        partition = self.partitions[index]
        if partition.batches > 0:
            row = self.rows.get(move.target)
            decision = adoption_of_file(None if row is None else row.held())
            if decision is FileAdoption.RETRY:
                return
            if decision is FileAdoption.BORROW:
                source_row = self.rows[move.source]
                self.rows[move.target] = Row(source_row.owner_ids, 0, owned=False, lender=move.source, loan_move=move)
                move.borrowed = True
            self.rows[move.target].live += partition.batches
        move.staged = partition.batches

    @rule(pick=st.integers(0, 99))
    def adopt(self, pick: int) -> None:
        index, move = self._move(pick, adopted=False)
        if move is None or move.staged < 0:
            return
        self.source_batches[index] = self.partitions[index].batches  # the source still counts these until its drop
        move.adopted = True

    @rule(pick=st.integers(0, 99))
    def abandon(self, pick: int) -> None:
        """The target abandons a move it has not adopted (its staged batches go) and the source cancels it."""
        index, move = self._move(pick, adopted=False)
        if move is None:
            return
        if move.staged > 0:
            self.rows[move.target].live -= move.staged
        del self.moves[index]
        self.source_batches.pop(index, None)

    @rule(pick=st.integers(0, 99))
    def drop(self, pick: int) -> None:
        index, move = self._move(pick, adopted=True)
        if move is None:
            return
        source_row = self.rows.get(move.source)
        moved = self.source_batches.pop(index)
        if moved > 0:
            assert source_row is not None, "the source holds live batches without a row"
            source_row.live -= moved
            if move.borrowed:
                source_row.loans.add(move.target)
        self.partitions[index].holder = move.target
        del self.moves[index]

    # ------------------------------------------------------------------ the file workers' steps

    @rule(pick=st.integers(0, COORDINATORS - 1))
    def hand_over_or_delete(self, pick: int) -> None:
        row = self.rows.get(pick)
        if row is None or pick in self.handing or self.deleted or not may_pass_token(row.held()):
            return
        position = row.owner_ids.index(pick)
        if position + 1 == len(row.owner_ids):
            self.deleted = True  # the last owner (the grace period changes nothing here)
            del self.rows[pick]
            return
        receiver = row.owner_ids[position + 1]
        taken = self.rows.get(receiver)
        if taken is None:
            self.rows[receiver] = Row(row.owner_ids, 0, owned=True)
        else:
            taken.owned = True
        self.handing[pick] = receiver

    @rule(pick=st.integers(0, COORDINATORS - 1))
    def handed_over(self, pick: int) -> None:
        if pick not in self.handing:
            return
        row = self.rows[pick]
        assert is_idle(row.held()), "a row got batches while its hand-over was under way"
        del self.handing[pick]
        del self.rows[pick]

    @rule(pick=st.integers(0, COORDINATORS - 1))
    def return_loan(self, pick: int) -> None:
        row = self.rows.get(pick)
        if row is None or pick in self.returning or not may_return(row.held()):
            return
        lender_row = self.rows.get(row.lender)
        in_progress = any(m is row.loan_move for m in self.moves.values())
        recorded = lender_row is not None and pick in lender_row.loans
        answer = loan_return(recorded, in_progress)
        if answer is LoanReturn.RETRY:
            return
        if answer is LoanReturn.SETTLE:
            assert lender_row is not None
            lender_row.loans.discard(pick)
        self.returning.add(pick)

    @rule(pick=st.integers(0, COORDINATORS - 1))
    def returned(self, pick: int) -> None:
        if pick not in self.returning:
            return
        self.returning.discard(pick)
        row = self.rows[pick]
        assert is_idle(row.held()), "a loan row got batches while its return was under way"
        if keeps_row_after_return(row.held()):
            row.lender, row.loan_move = NO_LENDER, None
        else:
            del self.rows[pick]

    @rule()
    def run_workers(self) -> None:
        """Every worker's next step at once: long histories reach the chain's end in few steps."""
        self._run_workers()

    # ------------------------------------------------------------------ checks

    @invariant()
    def no_live_batch_in_a_deleted_file(self) -> None:
        live = sum(p.batches for p in self.partitions)
        assert not (self.deleted and live > 0), f"file deleted with {live} live batches"

    @invariant()
    def every_holder_has_a_row(self) -> None:
        for index, partition in enumerate(self.partitions):
            if partition.batches == 0:
                continue
            move = self.moves.get(index)
            holders = {partition.holder} if move is None or move.staged <= 0 else {move.source, move.target}
            for holder in holders:
                assert holder in self.rows, f"coordinator {holder} holds live batches in the file without a row"

    def teardown(self) -> None:
        """Every batch goes, every move ends, and the workers run until nothing changes: the file is deleted."""
        for _ in range(10 * COORDINATORS):
            for pick in range(len(self.partitions)):
                self.stage(pick)
                self.adopt(pick)
                self.drop(pick)
            self._run_workers()
        assert not self.moves, "a move cannot finish"
        for partition in self.partitions:
            if partition.batches > 0:
                self.rows[partition.holder].live -= partition.batches
                partition.batches = 0
        for _ in range(10 * COORDINATORS):
            self._run_workers()
        assert self.deleted, f"the file was never deleted: rows {self.rows}"
        assert not self.rows, f"rows left after the deletion: {self.rows}"

    def _run_workers(self) -> None:
        for coordinator in range(COORDINATORS):
            self.handed_over(coordinator)
            self.returned(coordinator)
            self.return_loan(coordinator)
            self.hand_over_or_delete(coordinator)

    def _move(self, pick: int, *, adopted: bool) -> tuple[int, Move | None]:
        candidates = sorted(i for i, m in self.moves.items() if m.adopted == adopted)
        if not candidates:
            return -1, None
        index = candidates[pick % len(candidates)]
        return index, self.moves[index]


FileLoans.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_file_loans = FileLoans.TestCase


def test_a_target_without_a_row_borrows_and_one_with_a_holding_row_adds() -> None:
    assert adoption_of_file(None) is FileAdoption.BORROW
    waiting_chain_row = HeldFile(live_batches=0, owned=False, lender_id=NO_LENDER, loans_out=0)
    assert adoption_of_file(waiting_chain_row) is FileAdoption.ADD
    busy_owner = HeldFile(live_batches=2, owned=True, lender_id=NO_LENDER, loans_out=0)
    assert adoption_of_file(busy_owner) is FileAdoption.ADD
    lending_owner = HeldFile(live_batches=0, owned=True, lender_id=NO_LENDER, loans_out=1)
    assert adoption_of_file(lending_owner) is FileAdoption.ADD


def test_a_row_on_its_way_out_refuses_the_batches_until_the_worker_is_done() -> None:
    idle_owner = HeldFile(live_batches=0, owned=True, lender_id=NO_LENDER, loans_out=0)
    idle_loan = HeldFile(live_batches=0, owned=False, lender_id=3, loans_out=0)
    assert adoption_of_file(idle_owner) is FileAdoption.RETRY
    assert adoption_of_file(idle_loan) is FileAdoption.RETRY


def test_a_row_with_a_loan_out_neither_passes_the_token_nor_returns() -> None:
    lending = HeldFile(live_batches=0, owned=True, lender_id=NO_LENDER, loans_out=1)
    assert not may_pass_token(lending)
    lending_borrower = HeldFile(live_batches=0, owned=False, lender_id=2, loans_out=1)
    assert not may_return(lending_borrower)


def test_an_early_return_waits_for_the_drop_that_records_its_loan() -> None:
    assert loan_return(loan_recorded=False, move_to_borrower_in_progress=True) is LoanReturn.RETRY
    assert loan_return(loan_recorded=False, move_to_borrower_in_progress=False) is LoanReturn.ALREADY
    assert loan_return(loan_recorded=True, move_to_borrower_in_progress=True) is LoanReturn.SETTLE


# The races the rule closes, each as one history of the model (the random histories above find them too, slowly).


def _machine(owners: list[int], sizes: list[tuple[int, int]]) -> FileLoans:
    machine = FileLoans()
    machine.commit(owners=owners, sizes=sizes)
    return machine


def _check(machine: FileLoans) -> None:
    machine.no_live_batch_in_a_deleted_file()
    machine.every_holder_has_a_row()


def test_a_borrowed_file_outlives_its_lender_and_last_owner() -> None:
    machine = _machine([0], [(0, 1)])
    machine.start_move(pick=0, to=1)
    machine.stage(pick=0)
    machine.adopt(pick=0)
    machine.drop(pick=0)
    for _ in range(4):
        machine.run_workers()
        _check(machine)
    assert not machine.deleted and machine.rows[0].loans == {1}
    machine.teardown()


def test_batches_moved_to_an_owner_handing_the_file_over_wait() -> None:
    # Coordinator 0 owns the file and holds nothing; 1 (next) holds a partition that moves to 0 while 0's
    # hand-over to 1 is recorded at 1 but not yet at 0.
    machine = _machine([0, 1], [(1, 2)])
    machine.hand_over_or_delete(pick=0)
    machine.start_move(pick=0, to=0)
    machine.stage(pick=0)
    machine.adopt(pick=0)
    assert not machine.moves[0].adopted, "the adoption went into a row being handed over"
    machine.handed_over(pick=0)
    machine.stage(pick=0)
    machine.adopt(pick=0)
    machine.drop(pick=0)
    for _ in range(4):
        machine.run_workers()
        _check(machine)
    assert not machine.deleted
    machine.teardown()


def test_a_return_before_the_drop_waits_for_the_loan() -> None:
    machine = _machine([0], [(0, 1)])
    machine.start_move(pick=0, to=1)
    machine.stage(pick=0)
    machine.adopt(pick=0)
    machine.delete_batches(pick=0, count=1)  # the target's retention, before the source's drop
    machine.return_loan(pick=1)
    assert 1 not in machine.returning, "returned a loan not recorded yet"
    machine.drop(pick=0)
    for _ in range(4):
        machine.run_workers()
        _check(machine)
    assert machine.deleted and not machine.rows


def test_a_loan_row_an_abandoned_move_left_goes_back_while_another_move_to_its_target_waits() -> None:
    """The next move to the same target waits for the abandoned move's idle loan row to go (adoption_of_file: RETRY),
    and that row's return waits only for the move that made it: both finish."""
    machine = _machine([0], [(0, 1), (0, 1)])
    machine.start_move(pick=0, to=1)
    machine.stage(pick=0)
    assert machine.rows[1].lender == 0
    machine.abandon(pick=0)
    machine.start_move(pick=1, to=1)
    machine.stage(pick=0)  # the only move left: partition 1's, refused while the idle loan row may be on its way back
    assert machine.moves[1].staged < 0
    machine.teardown()  # every move finishes, the file is deleted
