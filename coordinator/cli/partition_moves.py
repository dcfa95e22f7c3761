"""`diskless rebalance-partitions`: even live batches over coordinators by moving user partitions (docs/design.md §5a).

It asks every address of --bootstrap for the partitions of the coordinators it leads (`DescribePartitionLoads`),
plans with `coordinator/topics/partition_balance.plan_partition_moves` and prints the plan; without --dry-run it then
runs the moves one after another, each as `diskless move-partition --wait` does (coordinator/cli/move_partition.py),
progress on stderr. In a cluster, name every node in --bootstrap: the plan covers only the coordinators some address
leads, and says which it could not describe. Exit 0 on success, 1 when a move was cancelled, 2 when the command
could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from coordinator.cli.move_partition import DEFAULT_WAIT_TIMEOUT_S, add_move_partition_command, move_and_wait
from coordinator.cli.operator_commands import DEFAULT_BOOTSTRAP, RPC_TIMEOUT_S, CommandFailed, call_first, run
from coordinator.topics.move_admin import CANCELLED
from coordinator.topics.partition_balance import (
    DEFAULT_MAX_MOVES,
    DEFAULT_TOLERANCE_RATIO,
    PartitionLoad,
    PartitionMove,
    coordinator_loads,
    plan_partition_moves,
)
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb


def _loads_at(args: argparse.Namespace, address: str) -> admin.DescribePartitionLoadsResponse:
    one = argparse.Namespace(**{**vars(args), "bootstrap": address})

    def call(channel: grpc.Channel) -> admin.DescribePartitionLoadsResponse:
        request = admin.DescribePartitionLoadsRequest()
        return admin_pb2_grpc.CoordinatorAdminStub(channel).DescribePartitionLoads(request, timeout=RPC_TIMEOUT_S)

    return call_first(one, call)


def gather_loads(args: argparse.Namespace) -> tuple[list[PartitionLoad], list[int], dict[int, str]]:
    """Every partition of the coordinators the addresses lead; the coordinators described; those that failed."""
    partitions: list[PartitionLoad] = []
    described: set[int] = set()
    failed: dict[int, str] = {}
    for address in (a.strip() for a in args.bootstrap.split(",") if a.strip()):
        for coordinator in _loads_at(args, address).coordinators:
            if coordinator.coordinator_id in described:
                continue
            if coordinator.error_code != pb.NONE:
                failed[coordinator.coordinator_id] = (
                    f"{pb.ErrorCode.Name(coordinator.error_code)}: {coordinator.error_message}"
                )
                continue
            described.add(coordinator.coordinator_id)
            failed.pop(coordinator.coordinator_id, None)
            partitions.extend(
                PartitionLoad(coordinator.coordinator_id, p.topic_id, p.partition, p.live_batches)
                for p in coordinator.partitions
            )
    if not described:
        raise CommandFailed(f"no address of --bootstrap {args.bootstrap!r} leads a coordinator")
    return partitions, sorted(described), failed


def _summary(
    partitions: Sequence[PartitionLoad], coordinators: Sequence[int], moves: Sequence[PartitionMove],
    failed: Mapping[int, str],
) -> dict[str, Any]:  # fmt: skip
    moved = {(m.topic_id, m.partition): m.to_coordinator for m in moves}
    after = [
        PartitionLoad(moved.get((p.topic_id, p.partition), p.coordinator_id), p.topic_id, p.partition, p.live_batches)
        for p in partitions
    ]
    return {
        "coordinators": list(coordinators),
        "moves": [
            {
                "topic_id": m.topic_id.hex(),
                "partition": m.partition,
                "from": m.from_coordinator,
                "to": m.to_coordinator,
                "live_batches": m.live_batches,
            }
            for m in moves
        ],
        "before": {str(c): n for c, n in coordinator_loads(partitions, coordinators).items()},
        "after": {str(c): n for c, n in coordinator_loads(after, coordinators).items()},
        "not_described": {str(c): reason for c, reason in sorted(failed.items())},
    }


def _print(summary: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2), flush=True)
        return
    moves = summary["moves"]
    print(f"{len(moves)} partitions to move over coordinators {summary['coordinators']}")
    for m in moves:
        print(f"  {m['topic_id']}-{m['partition']}: coordinator {m['from']} -> {m['to']} ({m['live_batches']} batches)")
    for when in ("before", "after"):
        print(f"{when}: live batches per coordinator {summary[when]}")
    for coordinator, reason in summary["not_described"].items():
        print(f"coordinator {coordinator} not in the plan: {reason}")
    sys.stdout.flush()


def rebalance_partitions(args: argparse.Namespace) -> int:
    if args.tolerance < 0 or args.max_moves < 0:
        raise CommandFailed(f"--tolerance and --max-moves must be >= 0, got {args.tolerance} and {args.max_moves}")
    partitions, coordinators, failed = gather_loads(args)
    moves = plan_partition_moves(partitions, coordinators, args.tolerance, args.max_moves)
    _print(_summary(partitions, coordinators, moves, failed), args.json)
    if args.dry_run or not moves:
        return 0
    cancelled = 0
    for number, planned in enumerate(moves, 1):
        print(
            f"move {number} of {len(moves)}: {planned.topic_id.hex()}-{planned.partition} to coordinator "
            f"{planned.to_coordinator}",
            file=sys.stderr,
            flush=True,
        )
        done = move_and_wait(args, planned.topic_id, planned.partition, planned.to_coordinator, wait=True)
        cancelled += done.step == CANCELLED
    if cancelled:
        print(f"diskless rebalance-partitions: {cancelled} of {len(moves)} moves were cancelled", file=sys.stderr)
    return 1 if cancelled else 0


def add_partition_move_commands(commands: Any) -> None:
    """Adds `rebalance-partitions` and `move-partition` to the `diskless` parser's subcommands."""
    parser = commands.add_parser(
        "rebalance-partitions", help="even live batches over coordinators by moving the fewest partitions"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan only; without it, run its moves")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_WAIT_TIMEOUT_S,
        help=f"give up waiting for one move after this long (it goes on; default {DEFAULT_WAIT_TIMEOUT_S:.0f})",
    )
    parser.add_argument(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        help=f"HOST:PORT[,HOST:PORT...]: every node, each asked for the coordinators it leads (default "
        f"{DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE_RATIO,
        help=f"a coordinator within this fraction of the mean is even (default {DEFAULT_TOLERANCE_RATIO})",
    )
    parser.add_argument(
        "--max-moves",
        type=int,
        default=DEFAULT_MAX_MOVES,
        help=f"at most this many moves (default {DEFAULT_MAX_MOVES})",
    )
    parser.add_argument("--ca", type=Path, help="PEM CA of the node's certificate: call over TLS")
    parser.add_argument("--cert", type=Path, help="PEM certificate of the operator (mutual TLS)")
    parser.add_argument("--key", type=Path, help="PEM private key of --cert")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(run=lambda args: run(rebalance_partitions, args))
    add_move_partition_command(commands)
