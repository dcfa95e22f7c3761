"""A borrowed WAL file's return at the move's target (design §5a), pure.

A loan row (coordinator/files/loans.py) with no live batch and no loan of its own out goes back to its lender: the
move worker asks the lender to record FileLoanReturned (`check_loan_returned`, at the lender), then
`check_file_returned` records FileReturned here, which forgets the row (or, owned because the chain's token reached
it, keeps it as a chain row that passes the token on). The rows to return are `adoptions.loan_rows_to_return`.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.files.loans import HeldFile, LoanReturn, loan_return, may_return
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

_DONE = ItemError(ErrorCode.NONE, "")


@dataclass(frozen=True, slots=True)
class ReturnedLoan:
    """A borrower returns its loan row of the file with this object key, made by the lender's move `move_id`
    (`adoptions.LoanRow`)."""

    object_key: str
    borrower: int
    move_id: int


def check_loan_returned(view: CoordinatorView, request: ReturnedLoan, now_ms: int) -> Result[ItemError]:
    """One FileLoanReturned; nothing for a loan not here (returned already: idempotent); or, while the move that made
    the loan row is in progress here (its drop will record this loan), COORDINATOR_LOAD_IN_PROGRESS. Only that move:
    a loan row left by a move abandoned at the target goes back once the source cancelled it, whatever other move to
    the same target is under way (one of them may wait for that very row to go)."""
    facts = view.committed_file(request.object_key)
    recorded = view.loan_pending(request.object_key, request.borrower) or (
        facts is not None and request.borrower in facts.borrowers
    )
    moving = any(p.move_id == request.move_id and p.moving_to == request.borrower for p in view.partitions())
    answer = loan_return(recorded, moving)
    if answer is LoanReturn.ALREADY:
        return Result([], _DONE)
    if answer is LoanReturn.RETRY:
        message = f"move {request.move_id} to coordinator {request.borrower} is in progress here; return later"
        return Result([], ItemError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, message))
    if facts is None:  # lent by a drop not applied yet: its row is known once it is
        message = f"the loan of {request.object_key!r} is not applied yet; return it again"
        return Result([], ItemError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, message))
    returned = rec.FileLoanReturned(file_id=facts.file_id, borrower=request.borrower)
    return Result([rec.MetadataRecord(file_loan_returned=returned)], _DONE)


def check_file_returned(view: CoordinatorView, object_key: str, now_ms: int) -> Result[ItemError]:
    """One FileReturned for the loan row of this key, its lender having recorded the return; nothing when the row is
    gone or a chain row already (returned: idempotent); INVALID_REQUEST for a row that is not an idle loan row. No
    batch joins an idle loan row meanwhile: a chunk naming it waits (loans.adoption_of_file answers RETRY), and a
    commit of its key here is a retry that is not answered again."""
    facts = view.committed_file(object_key)
    if view.file_pending(object_key):
        return Result([], ItemError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{object_key!r} is not applied yet"))
    if facts is None or facts.lender_id < 0:
        return Result([], _DONE)
    if not may_return(HeldFile(facts.live_batches, facts.owned, facts.lender_id, facts.loans_out)):
        message = f"{object_key!r} has {facts.live_batches} live batches or a loan out here: not returned"
        return Result([], ItemError(ErrorCode.INVALID_REQUEST, message))
    return Result([rec.MetadataRecord(file_returned=rec.FileReturned(file_id=facts.file_id))], _DONE)
