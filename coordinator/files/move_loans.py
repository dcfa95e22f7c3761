"""ReturnFiles (protos/internal.proto) at the lender of borrowed WAL files (design §5a): each loan the borrower gives
back ends here through `move_returns.check_loan_returned` (FileLoanReturned; a loan not here answers success, one a
move to the borrower may still record waits), in one operation through this coordinator's pipeline."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.base.result import ItemError, Result
from coordinator.files.move_returns import ReturnedLoan, check_loan_returned
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import Operation
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal


@dataclass(frozen=True, slots=True)
class Returns:
    borrower: int
    loans: tuple[tuple[str, int], ...]  # (object key, the move that made its loan row), each key once


def check_returns(view: CoordinatorView, request: Returns, now_ms: int) -> Result[list[ItemError]]:
    """One FileLoanReturned per loan ended now; an answer per key. Keys are distinct, so no check here depends on a
    record another one of this operation writes."""
    records = []
    answers = []
    for object_key, move_id in request.loans:
        result = check_loan_returned(view, ReturnedLoan(object_key, request.borrower, move_id), now_ms)
        records.extend(result.records)
        answers.append(result.response)
    return Result(records, answers)


async def return_files(
    coordinators: NodeCoordinators, request: internal.ReturnFilesRequest
) -> internal.ReturnFilesResponse:
    lender = request.to_coordinator_id
    if not coordinators.hosts(lender):
        return internal.ReturnFilesResponse(
            error_code=pb.NOT_COORDINATOR, error_message=f"coordinator {lender} is not hosted on this node"
        )
    coordinators.limit_items(len(request.object_keys), "object keys")
    if len(request.move_ids) != len(request.object_keys):
        message = f"{len(request.object_keys)} object keys but {len(request.move_ids)} move ids"
        return internal.ReturnFilesResponse(error_code=pb.INVALID_REQUEST, error_message=message)
    loans = dict(zip(request.object_keys, request.move_ids, strict=True))  # a key named twice: its last move
    keys = tuple(loans)
    coordinators.require_room([lender])
    operation = Operation(check_returns, Returns(request.from_coordinator_id, tuple(loans.items())))
    outcome = (await coordinators.run_parts({lender: operation}, request.timeout_ms))[lender]
    if isinstance(outcome, CoordinatorUnavailable):
        return internal.ReturnFilesResponse(error_code=wire_code(outcome.error_code), error_message=outcome.message)
    answers = dict(zip(keys, outcome, strict=True))
    response = internal.ReturnFilesResponse()
    for object_key in request.object_keys:
        answer = answers[object_key]
        response.files.add(object_key=object_key, error_code=wire_code(answer.error_code), error_message=answer.message)
    return response
