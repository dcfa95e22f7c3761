"""MovePartition and DescribePartitionMove (protos/admin.proto): an operator's start of a partition move and where it
is (design §5a). `diskless move-partition` calls them on the leader of the partition's coordinator.

MovePartition starts the move's catch-up (the worker freezes it later) through `move_freeze.check_start_move` on
its coordinator's leader; the move's id is the offset of its PartitionMoveStarted record in the source's log (design
§5a: never reused there), which the pipeline knows when it checks the operation. The same move again (the partition
moving to the same target) answers the id it has, writing nothing. The source's move worker
(coordinator/topics/move_worker.py) does the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.cluster.peers import PeerClient, PeerError
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import Operation
from coordinator.topics.move_freeze import MoveStart, check_start_move
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal

# DescribePartitionMove's steps, as `diskless move-partition --wait` prints them.
CATCHING_UP = "catching up"
FROZEN = "frozen"
CHUNKS_SENT = "chunks sent"
ADOPTED = "adopted"
MOVED_OUT = "moved out"
CANCELLED = "cancelled"
FINAL_STEPS = (MOVED_OUT, CANCELLED)  # the move is over


@dataclass(frozen=True, slots=True)
class Freeze:
    topic_id: bytes
    partition: int
    to_coordinator: int
    log_end: Callable[[], int]  # the offset the operation's record takes: the pipeline's speculative log end


def check_freeze(view: CoordinatorView, request: Freeze, now_ms: int) -> Result[tuple[ItemError, int]]:
    """The freeze with the record's offset as the move's id; the same move again answers its id, writing nothing."""
    found = view.partition(request.topic_id, request.partition)
    if found is not None and found.moving_to == request.to_coordinator:
        return Result([], (ItemError(ErrorCode.NONE, ""), found.move_id))
    move_id = request.log_end()
    # Catching up first (design §5a): commits go on while the worker copies; it freezes only the tail.
    result = check_start_move(
        view, MoveStart(request.topic_id, request.partition, request.to_coordinator, move_id, catch_up=True), now_ms
    )
    return Result(result.records, (result.response, move_id if result.records else -1))


def _leader_problem(coordinators: NodeCoordinators, coordinator_id: int) -> CoordinatorUnavailable | None:
    try:
        coordinators.shard(coordinator_id).require_leader()
    except CoordinatorUnavailable as error:
        return error
    return None


async def move_partition(
    coordinators: NodeCoordinators, request: admin.MovePartitionRequest
) -> admin.MovePartitionResponse:
    """The partition frozen on its coordinator's leader for a move to `to_coordinator_id`; the move's id."""
    (route,) = coordinators.route(request.topic_id, [request.partition])
    if isinstance(route, ItemError):
        return admin.MovePartitionResponse(error_code=wire_code(route.error_code), error_message=route.message)
    if not coordinators.hosts(request.to_coordinator_id):
        message = f"coordinator {request.to_coordinator_id} does not exist ({len(coordinators.shards)} coordinators)"
        return admin.MovePartitionResponse(error_code=pb.INVALID_REQUEST, error_message=message)
    problem = _leader_problem(coordinators, route)
    if problem is not None:
        return admin.MovePartitionResponse(error_code=wire_code(problem.error_code), error_message=problem.message)
    shard = coordinators.shard(route)
    coordinators.require_room([route])

    def log_end() -> int:
        return shard.speculative_end_offset

    freeze = Freeze(request.topic_id, request.partition, request.to_coordinator_id, log_end)
    outcome = (await coordinators.run_parts({route: Operation(check_freeze, freeze)}, request.timeout_ms))[route]
    if isinstance(outcome, CoordinatorUnavailable):
        return admin.MovePartitionResponse(error_code=wire_code(outcome.error_code), error_message=outcome.message)
    error, move_id = outcome
    return admin.MovePartitionResponse(
        error_code=wire_code(error.error_code), error_message=error.message, from_coordinator_id=route, move_id=move_id
    )


async def describe_partition_move(
    coordinators: NodeCoordinators, peers: PeerClient | None, request: admin.DescribePartitionMoveRequest
) -> admin.DescribePartitionMoveResponse:
    """The step a move is at, from the source's leader and (while frozen) its target's answer."""
    source = request.from_coordinator_id
    if not coordinators.hosts(source):
        return admin.DescribePartitionMoveResponse(
            error_code=pb.INVALID_REQUEST, error_message=f"coordinator {source} does not exist"
        )
    problem = _leader_problem(coordinators, source)
    if problem is not None:
        return admin.DescribePartitionMoveResponse(
            error_code=wire_code(problem.error_code), error_message=problem.message
        )
    here = coordinators.shard(source).partition_move(request.topic_id, request.partition)
    if here is None:
        return admin.DescribePartitionMoveResponse(step=MOVED_OUT)
    moving_to, move_id, catching_up = here
    if move_id != request.move_id:
        return admin.DescribePartitionMoveResponse(step=CANCELLED)
    response = admin.DescribePartitionMoveResponse(
        step=CATCHING_UP if catching_up else FROZEN, to_coordinator_id=moving_to
    )
    if peers is None:
        response.target_error = "this node calls no other coordinator"
        return response
    ask = internal.AdoptPartitionChunkRequest(
        from_coordinator_id=source, to_coordinator_id=moving_to, move_id=move_id, index=-1,
        topic_id=request.topic_id, partition=request.partition, timeout_ms=request.timeout_ms,
    )  # fmt: skip
    try:
        answer = await peers.adopt_partition_chunk(ask, coordinators.timeout_s(request.timeout_ms))
    except PeerError as error:
        response.target_error = str(error)
        return response
    if answer.error_code != pb.NONE:
        response.target_error = f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}"
    elif answer.adopted:
        response.step = ADOPTED
    elif answer.staged_chunks:
        response.step = CATCHING_UP if catching_up else CHUNKS_SENT
        response.staged_chunks = answer.staged_chunks
    return response
