"""`diskless elect-leaders`: each coordinator's leadership back to its preferred replica at once, as Kafka's
`kafka-leader-election --election-type PREFERRED` (DESIGN §6a; the cluster also does it by itself every
`diskless.cluster.leader.imbalance.check.interval.ms`).

The node asked (the first of --bootstrap that answers) does the elections in etcd. Per coordinator: elected,
already preferred, or not possible (why). Exit 0 when every coordinator asked is led by its preferred replica
afterwards, 1 when some could not be (each reason on stderr, as Kafka's tool fails on them), 2 when the command
could not run, with a one-line reason.
"""

from __future__ import annotations

import argparse
import sys
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
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb

_OUTCOMES = {
    admin.LEADER_ELECTED: "elected",
    admin.LEADER_ALREADY_PREFERRED: "already preferred",
    admin.LEADER_ELECTION_NOT_POSSIBLE: "not possible",
}


@dataclass(frozen=True, slots=True)
class ElectionRow:
    coordinator_id: int
    outcome: str  # elected, already preferred, not possible
    preferred_leader: int
    leader: int  # after the call; -1: none
    leader_epoch: int
    reason: str = ""  # why not possible


ELECTION_COLUMNS = ("coordinator_id", "outcome", "preferred_leader", "leader", "leader_epoch", "reason")


def elect_leaders(args: argparse.Namespace) -> int:
    request = admin.ElectLeadersRequest(coordinator_ids=args.coordinator or [])

    def call(channel: grpc.Channel) -> admin.ElectLeadersResponse:
        return admin_pb2_grpc.CoordinatorAdminStub(channel).ElectLeaders(request, timeout=RPC_TIMEOUT_S)

    answer = call_first(args, call)
    if answer.error_code != pb.NONE:
        raise CommandFailed(f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}")
    rows = [
        ElectionRow(
            r.coordinator_id, _OUTCOMES.get(r.outcome, "unknown"), r.preferred_leader, r.leader, r.leader_epoch,
            r.reason,
        )
        for r in answer.results
    ]  # fmt: skip
    print_rows(rows, args.json, "coordinators", ELECTION_COLUMNS)
    failed = [r for r in rows if r.outcome not in ("elected", "already preferred")]
    for row in failed:
        print(f"diskless elect-leaders: coordinator {row.coordinator_id}: {row.reason or row.outcome}", file=sys.stderr)
    return 1 if failed else 0


def add_elect_leaders_command(commands: Any) -> None:
    """Adds `elect-leaders` to the `diskless` parser's subcommands."""
    parser = commands.add_parser(
        "elect-leaders",
        help="move each coordinator's leadership back to its preferred replica now, where it is in the ISR "
        "(kafka-leader-election --election-type PREFERRED)",
    )
    add_node_arguments(parser)
    parser.add_argument("--coordinator", type=int, action="append", help="a coordinator id (repeatable; default all)")
    parser.set_defaults(run=lambda args: run(elect_leaders, args))
