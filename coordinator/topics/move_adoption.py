"""A partition move's cut-over at its target (design §5a), pure.

`check_adopt_partition` answers the source's request to adopt a move whose chunks it sent: one PartitionAdopted
that makes the staged batches the partition served here, with the frozen source's positions, producers' state and
topic configurations; nothing when the move is adopted already (the answer of the first time: a resumed worker asks
again); or why not. It refuses (INVALID_REQUEST) a move not staged here, staged with another number of chunks, a
partition or topic that contradicts what is here (the partition served here already, the topic id under another
name, the name held by another topic id), positions out of order or not ending where the staged batches end; it
makes the adoption wait (COORDINATOR_LOAD_IN_PROGRESS) while this coordinator holds other partitions of the topic
under other configurations (a configuration change is on its way through the coordinators).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine import records
from coordinator.machine.records import AdoptedPartition
from coordinator.machine.view import CoordinatorView

_DONE = ItemError(ErrorCode.NONE, "")


@dataclass(frozen=True, slots=True)
class AdoptRequest:
    from_coordinator: int
    move_id: int
    chunks: int  # the chunks the source sent
    partition: AdoptedPartition


def _refused(message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> Result[ItemError]:
    return Result([], ItemError(code, message))


def _topic_problem(view: CoordinatorView, adopted: AdoptedPartition) -> str | None:
    for partition in view.partitions():
        if partition.topic_id == adopted.topic_id and partition.topic_name != adopted.topic_name:
            return f"the topic is {partition.topic_name!r} here, not {adopted.topic_name!r}"
        if partition.topic_name == adopted.topic_name and partition.topic_id != adopted.topic_id:
            return f"the name {adopted.topic_name!r} is another topic's here"
    return None


def _positions_problem(adopted: AdoptedPartition, next_offset: int) -> str | None:
    if not 0 <= adopted.log_start_offset <= adopted.local_log_start_offset <= adopted.high_watermark:
        return (
            f"log start {adopted.log_start_offset}, local log start {adopted.local_log_start_offset} and high "
            f"watermark {adopted.high_watermark} out of order"
        )
    end = adopted.local_log_start_offset if next_offset < 0 else next_offset
    if adopted.high_watermark != end:
        return f"high watermark {adopted.high_watermark}, but the staged batches end at {end}"
    if len({p.producer_id for p in adopted.producers}) != len(adopted.producers):
        return "a producer named twice"
    return None


def check_adopt_partition(view: CoordinatorView, request: AdoptRequest, now_ms: int) -> Result[ItemError]:
    """One PartitionAdopted, nothing (adopted already), or why not (design §5a)."""
    move = (request.from_coordinator, request.move_id)
    name = f"move {request.move_id} from coordinator {request.from_coordinator}"
    if move in view.adopted_moves:
        return Result([], _DONE)
    staged = view.staged_moves.get(move)
    if staged is None:
        return _refused(f"{name}: nothing staged here")
    if staged.chunks != request.chunks:
        return _refused(f"{name}: {staged.chunks} chunks staged here, {request.chunks} sent")
    adopted = request.partition
    if (staged.topic_id, staged.partition) != (adopted.topic_id, adopted.partition):
        return _refused(f"{name} staged partition {staged.partition} of its topic, not this one")
    if view.partition(adopted.topic_id, adopted.partition) is not None:
        return _refused(f"{name}: partition {adopted.partition} of the topic is served here already")
    problem = _topic_problem(view, adopted) or _positions_problem(adopted, staged.next_offset)
    if problem is not None:
        return _refused(f"{name}: {problem}")
    held_here = any(partition.topic_id == adopted.topic_id for partition in view.partitions())
    if held_here and dict(view.topic_configs(adopted.topic_id)) != dict(adopted.configs):
        message = f"{name}: the topic's configurations differ here; a change is on its way, ask again"
        return _refused(message, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return Result(
        [records.partition_adopted(request.from_coordinator, request.move_id, staged.partition_key, adopted)], _DONE
    )
