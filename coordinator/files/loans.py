"""WAL files across a partition's move: the loan rule (docs/design.md §5a), pure.

A moved batch stays in its WAL file, and a file is deleted by the last coordinator of its `owner_ids` chain
(DESIGN §5) once it holds the token with nothing live. A coordinator that passed the token forgot the file and
never sees it again, so the target of a move cannot simply join the chain: it may already have passed. It
*borrows* instead. A target with no row for the file makes a loan row (`lender_id` = the source) and the source
keeps the loan on its own row until the target returns it; a row with a loan out is not idle, so the chain
cannot pass it. A target that still has a row (a chain row that has not passed the token, or a loan row) just
adds the batches to it: that row already holds the file back, and no loan cycle can form (S -> T -> S finds S's
row, which holds T's loan).

The only unsafe moment is a row that is idle and on its way out: an owned row whose hand-over (or deletion) the
worker may have started, or a loan row whose return may be under way. Batches arriving then could be left in a
file the chain has passed, so the adoption is refused (retriably) until the worker is done with that row.

`tests/test_move_file_loans.py` checks the rule in a model of coordinators, interleaved hand-overs, returns,
moves and batch deletions: no file deleted while any coordinator holds a live batch in it, and every file
deleted once nobody does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import final

NO_LENDER = -1


@final
@dataclass(frozen=True, slots=True)
class HeldFile:
    """A coordinator's row for a WAL file, as the loan rule reads it."""

    live_batches: int
    owned: bool  # holds the chain's token (DESIGN §5)
    lender_id: int  # NO_LENDER for a chain row; else the coordinator this row borrowed the file from
    loans_out: int  # coordinators this row lent the file to, not returned yet


class FileAdoption(enum.Enum):
    """What the target of a move does with a file its adopted batches live in."""

    BORROW = "borrow"  # no row here: a loan row from the source; the source's drop records the loan
    ADD = "add"  # a row that still holds the file back: the batches join it, no loan
    RETRY = "retry"  # a row the worker may be passing on or returning: refuse the chunk, retriably


def is_idle(row: HeldFile) -> bool:
    """Nothing here keeps the file: no live batch and no loan out."""
    return row.live_batches == 0 and row.loans_out == 0


def is_loan(row: HeldFile) -> bool:
    return row.lender_id != NO_LENDER


def adoption_of_file(row: HeldFile | None) -> FileAdoption:
    """How the target takes a file its adopted batches live in, given its row for the file (None: no row)."""
    if row is None:
        return FileAdoption.BORROW
    if is_idle(row) and (row.owned or is_loan(row)):
        return FileAdoption.RETRY
    return FileAdoption.ADD


def may_return(row: HeldFile) -> bool:
    """A loan row goes back to its lender once idle; an owned one first returns the loan, then passes the token."""
    return is_loan(row) and is_idle(row)


def keeps_row_after_return(row: HeldFile) -> bool:
    """After the lender recorded the return: an owned row stays (as a chain row) to pass the token on."""
    return row.owned


def may_pass_token(row: HeldFile) -> bool:
    """A chain owner hands the file over (or, last, schedules its deletion) only idle and with no loan of its own."""
    return row.owned and is_idle(row) and not is_loan(row)


class LoanReturn(enum.Enum):
    """What the lender does when a borrower returns a file."""

    SETTLE = "settle"  # the loan leaves the lender's row
    ALREADY = "already"  # no such loan and none coming: a retried return, nothing to do
    RETRY = "retry"  # no such loan yet, but a move to the borrower is not dropped here yet: it will record one


def loan_return(loan_recorded: bool, move_to_borrower_in_progress: bool) -> LoanReturn:
    """A borrower returns its loan row: the lender's answer. `move_to_borrower_in_progress`: the move that made the
    loan row (the row names it) is still in progress at the lender.

    The loan is recorded by the source's drop, after the target adopted; the target may meanwhile have lost the
    batches (its retention) and return early. Settling nothing then would let the drop record a loan nobody will
    return, so the return waits for the drop. Only for that move: a loan row left by an abandoned move would otherwise
    wait for another move to the same target, which may itself wait for that row to go (a chunk naming an idle loan
    row waits).
    """
    if loan_recorded:
        return LoanReturn.SETTLE
    return LoanReturn.RETRY if move_to_borrower_in_progress else LoanReturn.ALREADY
