"""`diskless coordinators add`: more coordinators on a running lone node or cluster (CreateCoordinators, DESIGN §2).

On a cluster any node may take the call: the count is etcd's, and every node follows it.

`--total T` asks for T coordinators in all, as Kafka's CreatePartitions takes a total: the same command again
changes nothing, so a script may retry it. `--count K` adds K to the count the node describes now, sent as that
total with the count it read (compare-and-set): when another add ran in between, the call is refused rather than
adding twice. Exit 0 when the node has the total afterwards, 2 with a one-line reason otherwise.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import grpc

from coordinator.cli.operator_commands import (
    RPC_TIMEOUT_S,
    CommandFailed,
    add_node_arguments,
    call_first,
    run,
)
from coordinator.cli.output import print_rows
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc, coordinator_pb2_grpc
from protos import coordinator_pb2 as pb

# Creating and loading coordinators takes a moment per coordinator, and the readers start again.
ADD_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class CountRow:
    previous_count: int
    count: int


def _current_count(args: argparse.Namespace) -> int:
    def call(channel: grpc.Channel) -> pb.DescribeCoordinatorsResponse:
        stub = coordinator_pb2_grpc.DisklessCoordinatorStub(channel)
        return stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=RPC_TIMEOUT_S)

    return len(call_first(args, call).coordinators)


def add_coordinators(args: argparse.Namespace) -> int:
    if (args.count is None) == (args.total is None):
        raise CommandFailed("give --count K (coordinators to add) or --total T (coordinators in all)")
    if args.count is not None:
        if args.count <= 0:
            raise CommandFailed(f"--count must be > 0, got {args.count}")
        current = _current_count(args)
        request = admin.CreateCoordinatorsRequest(count=current + args.count, expected_count=current)
    else:
        request = admin.CreateCoordinatorsRequest(count=args.total, expected_count=-1)
    request.validate_only = args.dry_run

    def call(channel: grpc.Channel) -> admin.CreateCoordinatorsResponse:
        return admin_pb2_grpc.CoordinatorAdminStub(channel).CreateCoordinators(request, timeout=ADD_TIMEOUT_S)

    answer = call_first(args, call)
    if answer.error_code != pb.NONE:
        raise CommandFailed(f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}")
    print_rows([CountRow(answer.previous_count, answer.count)], args.json, "coordinators", ("previous_count", "count"))
    return 0


def add_coordinators_command(commands: Any) -> None:
    """Adds `coordinators add` to the `diskless` parser's subcommands."""
    parser = commands.add_parser("coordinators", help="add coordinators to a running node or cluster")
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser(
        "add",
        help="add coordinators online: new topics' partitions spread over every coordinator, existing ones stay "
        "(Kafka's CreatePartitions on __consumer_offsets)",
    )
    add_node_arguments(add)
    add.add_argument("--count", type=int, help="coordinators to add to the count the node has now")
    add.add_argument("--total", type=int, help="coordinators in all afterwards (the same command again: no change)")
    add.add_argument("--dry-run", action="store_true", help="check the change, make none")
    add.set_defaults(run=lambda args: run(add_coordinators, args))
