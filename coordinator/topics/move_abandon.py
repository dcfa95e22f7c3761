"""A partition move at its target: where its log has the move, and the abandon before the adoption (design §5a),
pure.

`adoption_state` is what the move worker reads of the target's log (move_protocol.next_step). `check_adoption_abandoned`
writes PartitionAdoptionAbandoned (the staged batches go) as move_protocol.abandon_answer says: once for a move not
adopted (staged or not: the record also refuses a late chunk), nothing for a move abandoned already, refused
(INVALID_REQUEST) once adopted: from then on the partition is served here and the source drops it.
"""

from __future__ import annotations

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine.view import CoordinatorView
from coordinator.topics.move_protocol import Answer, TargetState, TargetStep, abandon_answer
from protos import records_pb2 as rec


def adoption_state(view: CoordinatorView, from_coordinator: int, move_id: int) -> TargetState:
    """Where this target's log has the move: its step and the chunks staged (0 once adopted or abandoned: the count
    matters only while staging)."""
    move = (from_coordinator, move_id)
    if move in view.adopted_moves:
        return TargetState(TargetStep.ADOPTED, 0)
    if move in view.abandoned_moves:
        return TargetState(TargetStep.ABANDONED, 0)
    staged = view.staged_moves.get(move)
    return TargetState(TargetStep.NONE, 0) if staged is None else TargetState(TargetStep.STAGING, staged.chunks)


def check_adoption_abandoned(
    view: CoordinatorView, from_coordinator: int, move_id: int, now_ms: int
) -> Result[ItemError]:
    """One PartitionAdoptionAbandoned, nothing (abandoned already), or INVALID_REQUEST once adopted."""
    move = f"move {move_id} from coordinator {from_coordinator}"
    if from_coordinator < 0 or from_coordinator == view.coordinator_id or move_id < 0:
        return Result([], ItemError(ErrorCode.INVALID_REQUEST, f"{move}: a move comes from another coordinator"))
    answer = abandon_answer(adoption_state(view, from_coordinator, move_id))
    if answer is Answer.REFUSED:
        message = f"{move} is adopted here: the partition is served here, and the source drops it"
        return Result([], ItemError(ErrorCode.INVALID_REQUEST, message))
    if answer is Answer.ALREADY:
        return Result([], ItemError(ErrorCode.NONE, ""))
    abandoned = rec.PartitionAdoptionAbandoned(from_coordinator=from_coordinator, move_id=move_id)
    return Result([rec.MetadataRecord(partition_adoption_abandoned=abandoned)], ItemError(ErrorCode.NONE, ""))
