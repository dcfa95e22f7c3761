"""`diskless move-partition`: a user partition moved to another coordinator, online (docs/design.md §5a).

It finds the partition's coordinator and that coordinator's leader (FindCoordinator through --bootstrap), asks the
leader to start the move (MovePartition: the freeze; the same move again answers the same id), and with --wait asks
the source's leader where the move is (DescribePartitionMove) until it ends, printing each new step on stderr. The
source's move worker does the move itself; the command only starts and watches it, so an interrupted command leaves
the move going on (run it again: it answers the same move and waits for it). Exit 0 once started (or, with --wait,
moved out), 1 when the move was cancelled, 2 when the command could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import grpc

from coordinator.cli.operator_commands import CommandFailed, add_node_arguments, call_first, run
from coordinator.topics.move_admin import CANCELLED, FINAL_STEPS, MOVED_OUT
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

CALL_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.5
DEFAULT_WAIT_TIMEOUT_S = 3600.0
# Answers a retry may mend: a leader changing, a coordinator loading.
RETRIABLE = (pb.NOT_COORDINATOR, pb.COORDINATOR_LOAD_IN_PROGRESS, pb.COORDINATOR_NOT_AVAILABLE, pb.REQUEST_TIMED_OUT)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StartedMove:
    topic_id: str
    partition: int
    from_coordinator: int
    to_coordinator: int
    move_id: int
    step: str = ""


def _at(args: argparse.Namespace, address: str, call: Callable[[grpc.Channel], T]) -> T:
    return call_first(argparse.Namespace(**{**vars(args), "bootstrap": address}), call)


def _address(endpoint: pb.CoordinatorEndpoint) -> str:
    host = endpoint.host if endpoint.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}"


def partition_leader(args: argparse.Namespace, topic_id: bytes, partition: int) -> tuple[int, str] | str:
    """The partition's coordinator and its leader's HOST:PORT, or why not (a retriable answer)."""
    request = pb.FindCoordinatorRequest(
        topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[partition])]
    )
    found = call_first(args, lambda c: pb_grpc.DisklessCoordinatorStub(c).FindCoordinator(request, timeout=10))
    result = found.topics[0].partitions[0]
    if result.error_code != pb.NONE:
        if result.error_code not in RETRIABLE:
            raise CommandFailed(
                f"partition {partition} of topic {topic_id.hex()}: {pb.ErrorCode.Name(result.error_code)}"
            )
        return pb.ErrorCode.Name(result.error_code)
    for endpoint in found.coordinators:
        if endpoint.coordinator_id == result.coordinator_id and endpoint.port > 0:
            return result.coordinator_id, _address(endpoint)
    return f"no leader known for coordinator {result.coordinator_id}"


def coordinator_leader(args: argparse.Namespace, coordinator_id: int) -> str | None:
    request = pb.DescribeCoordinatorsRequest(coordinator_ids=[coordinator_id])
    described = call_first(args, lambda c: pb_grpc.DisklessCoordinatorStub(c).DescribeCoordinators(request, timeout=10))
    for description in described.coordinators:
        if description.coordinator_id == coordinator_id and description.leader.port > 0:
            return _address(description.leader)
    return None


def _start_at(
    args: argparse.Namespace, address: str, topic_id: bytes, partition: int, to: int
) -> admin.MovePartitionResponse:
    request = admin.MovePartitionRequest(topic_id=topic_id, partition=partition, to_coordinator_id=to)
    response: admin.MovePartitionResponse = _at(
        args, address, lambda c: admin_pb2_grpc.CoordinatorAdminStub(c).MovePartition(request, timeout=CALL_TIMEOUT_S)
    )
    return response


def start_move(args: argparse.Namespace, topic_id: bytes, partition: int, to: int, deadline: float) -> StartedMove:
    """MovePartition on the leader of the partition's coordinator, asked again while the answer is retriable."""
    problem = ""
    while time.monotonic() < deadline:
        leader = partition_leader(args, topic_id, partition)
        if isinstance(leader, str):
            problem = leader
        else:
            source, address = leader
            response = _start_at(args, address, topic_id, partition, to)
            if response.error_code == pb.NONE:
                return StartedMove(topic_id.hex(), partition, response.from_coordinator_id, to, response.move_id)
            problem = f"{pb.ErrorCode.Name(response.error_code)}: {response.error_message}"
            if response.error_code not in RETRIABLE:
                raise CommandFailed(f"coordinator {source} refused the move: {problem}")
        time.sleep(POLL_INTERVAL_S)
    raise CommandFailed(f"the move could not be started in time: {problem}")


def describe_move(args: argparse.Namespace, move: StartedMove) -> admin.DescribePartitionMoveResponse | None:
    """Where the move is, from the source's leader; None when that cannot be asked now."""
    address = coordinator_leader(args, move.from_coordinator)
    if address is None:
        return None
    request = admin.DescribePartitionMoveRequest(
        topic_id=bytes.fromhex(move.topic_id), partition=move.partition, from_coordinator_id=move.from_coordinator,
        move_id=move.move_id,
    )  # fmt: skip
    try:
        response: admin.DescribePartitionMoveResponse = _at(
            args,
            address,
            lambda c: admin_pb2_grpc.CoordinatorAdminStub(c).DescribePartitionMove(request, timeout=CALL_TIMEOUT_S),
        )
    except CommandFailed:
        return None
    return response if response.error_code == pb.NONE else None


def wait_move(args: argparse.Namespace, move: StartedMove, deadline: float) -> str:
    """Polls the move until it ends (its last step) or the deadline (CommandFailed), each new step on stderr."""
    shown = ""
    while time.monotonic() < deadline:
        described = describe_move(args, move)
        if described is not None:
            step = described.step
            line = step if step != "chunks sent" else f"{step} ({described.staged_chunks} staged)"
            if line != shown:
                shown = line
                print(f"move {move.move_id} of {move.topic_id}-{move.partition}: {line}", file=sys.stderr, flush=True)
            if step in FINAL_STEPS:
                return step
        time.sleep(POLL_INTERVAL_S)
    raise CommandFailed(f"move {move.move_id} did not end in time (last step: {shown or 'unknown'})")


def _print(move: StartedMove, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(move)), flush=True)
        return
    step = f": {move.step}" if move.step else ""
    print(
        f"move {move.move_id}: partition {move.partition} of topic {move.topic_id} from coordinator "
        f"{move.from_coordinator} to coordinator {move.to_coordinator}{step}",
        flush=True,
    )


def move_and_wait(args: argparse.Namespace, topic_id: bytes, partition: int, to: int, wait: bool) -> StartedMove:
    deadline = time.monotonic() + args.timeout_s
    move = start_move(args, topic_id, partition, to, deadline)
    if not wait:
        return move
    return StartedMove(**{**asdict(move), "step": wait_move(args, move, deadline)})


def move_partition(args: argparse.Namespace) -> int:
    try:
        topic_id = bytes.fromhex(args.topic_id)
    except ValueError as error:
        raise CommandFailed(f"--topic-id must be hex: {error}") from error
    if len(topic_id) != 16:
        raise CommandFailed(f"--topic-id must be 16 bytes (32 hex digits), got {len(topic_id)}")
    move = move_and_wait(args, topic_id, args.partition, args.to, args.wait)
    _print(move, args.json)
    return 1 if move.step == CANCELLED else 0


def add_move_partition_command(commands: Any) -> None:
    parser = commands.add_parser("move-partition", help="move a user partition to another coordinator, online")
    add_node_arguments(parser)
    parser.add_argument("--topic-id", required=True, help="the topic's id, hex (as kafka-topics --describe shows)")
    parser.add_argument("--partition", type=int, required=True)
    parser.add_argument("--to", type=int, required=True, help="the coordinator to move it to")
    parser.add_argument("--wait", action="store_true", help=f"wait until the move ends ({MOVED_OUT} or {CANCELLED})")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_WAIT_TIMEOUT_S,
        help=f"give up waiting after this long (the move goes on; default {DEFAULT_WAIT_TIMEOUT_S:.0f})",
    )
    parser.set_defaults(run=lambda args: run(move_partition, args))
