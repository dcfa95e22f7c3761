"""`diskless reassign` and `diskless rebalance`: moving coordinators' replicas online, as Kafka's
`kafka-reassign-partitions --execute` (KIP-455) does partitions' (DESIGN §6a).

`reassign --coordinator C --replicas N1,N2,N3` starts one coordinator's reassignment (a new one replaces the one
running; the replicas before it cancel it); `reassign --list` shows those in progress. `rebalance` reads every
coordinator's replicas and the live nodes, plans an even placement with the fewest moves
(`coordinator/cluster/placement.plan_rebalance`; `--exclude N` empties node N before it is retired) and, unless
`--dry-run`, starts it. With `--wait` both poll until every reassignment
started is done, printing each change of its progress. Exit 0 on success, 1 when the cluster refused a
reassignment (its one-line reason on stderr) or it did not end as asked, 2 when the command could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from coordinator.cli.operator_commands import (
    RPC_TIMEOUT_S,
    CommandFailed,
    add_node_arguments,
    call_first,
    run,
)
from coordinator.cluster.placement import leader_counts, plan_rebalance, replica_counts
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb

POLL_S = 0.5  # how often --wait asks for progress
WAIT_DEFAULT_S = 600.0


def _alter(args: argparse.Namespace, moves: Mapping[int, Sequence[int]]) -> list[str]:
    """Starts the reassignments; the one-line refusals, as `coordinator C: reason`."""
    request = admin.AlterReassignmentsRequest(
        reassignments=[admin.AlterReassignmentsRequest.Reassignment(coordinator_id=c, replicas=r)
                       for c, r in sorted(moves.items())]
    )  # fmt: skip

    def call(channel: grpc.Channel) -> admin.AlterReassignmentsResponse:
        return admin_pb2_grpc.CoordinatorAdminStub(channel).AlterReassignments(request, timeout=RPC_TIMEOUT_S)

    answer = call_first(args, call)
    if answer.error_code != pb.NONE:
        raise CommandFailed(f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}")
    return [f"coordinator {r.coordinator_id}: {r.error_message}" for r in answer.results if r.error_code != pb.NONE]


def _listed(args: argparse.Namespace) -> admin.ListReassignmentsResponse:
    def call(channel: grpc.Channel) -> admin.ListReassignmentsResponse:
        request = admin.ListReassignmentsRequest(all_coordinators=True)
        return admin_pb2_grpc.CoordinatorAdminStub(channel).ListReassignments(request, timeout=RPC_TIMEOUT_S)

    answer = call_first(args, call)
    if answer.error_code != pb.NONE:
        raise CommandFailed(f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}")
    return answer


def _progress(c: admin.ListReassignmentsResponse.Coordinator) -> str:
    if not c.reassigning:
        return f"coordinator {c.coordinator_id}: replicas {list(c.replicas)}, leader {c.leader}, ISR {list(c.isr)}"
    waiting = [n for n in c.target_replicas if n not in c.isr]
    step = f"waiting for {waiting} to catch up and join the ISR" if waiting else "moving leadership or finishing"
    return (
        f"coordinator {c.coordinator_id}: reassigning to {list(c.target_replicas)} (adding {list(c.adding_replicas)}, "
        f"removing {list(c.removing_replicas)}); leader {c.leader}, ISR {list(c.isr)}: {step}"
    )


def _wait(args: argparse.Namespace, moves: Mapping[int, Sequence[int]]) -> list[str]:
    """Polls until each coordinator's reassignment is done; what did not end on the replicas asked."""
    deadline = time.monotonic() + args.wait_timeout_s
    said: dict[int, str] = {}
    while True:
        coordinators = {c.coordinator_id: c for c in _listed(args).coordinators if c.coordinator_id in moves}
        for coordinator_id, c in sorted(coordinators.items()):
            line = _progress(c)
            if said.get(coordinator_id) != line:
                print(line, file=sys.stderr if args.json else sys.stdout, flush=True)
                said[coordinator_id] = line
        running = [c for c in coordinators.values() if c.reassigning]
        if not running:
            return [
                f"coordinator {c}: ended on {list(coordinators[c].replicas)}, not {list(r)} (replaced by another "
                "reassignment?)"
                for c, r in sorted(moves.items())
                if c in coordinators and tuple(coordinators[c].replicas) != tuple(r)
            ]
        if time.monotonic() > deadline:
            raise CommandFailed(
                f"{len(running)} reassignments still running after {args.wait_timeout_s:.0f} s (coordinators "
                f"{sorted(c.coordinator_id for c in running)}); they go on: see diskless reassign --wait"
            )
        time.sleep(POLL_S)


def _fail(command: str, problems: list[str]) -> int:
    for problem in problems:
        print(f"diskless {command}: {problem}", file=sys.stderr)
    return 1 if problems else 0


def list_running(args: argparse.Namespace) -> int:
    """The reassignments in progress (Kafka's `--verify`/ListPartitionReassignments), one line each, or JSON."""
    running = [c for c in _listed(args).coordinators if c.reassigning]
    if args.json:
        print(json.dumps({"reassignments": [
            {"coordinator_id": c.coordinator_id, "target": list(c.target_replicas), "replicas": list(c.replicas),
             "adding": list(c.adding_replicas), "removing": list(c.removing_replicas), "leader": c.leader,
             "isr": list(c.isr)}
            for c in running
        ]}, indent=2))  # fmt: skip
        return 0
    for c in running:
        print(_progress(c))
    if not running:
        print("no reassignment in progress")
    return 0


def reassign(args: argparse.Namespace) -> int:
    if args.list:
        return list_running(args)
    if args.coordinator is None or not args.replicas:
        raise CommandFailed("--coordinator and --replicas are required (or --list)")
    try:
        replicas = [int(n) for n in args.replicas.split(",") if n.strip()]
    except ValueError:
        raise CommandFailed(f"--replicas wants node ids N1,N2,..., got {args.replicas!r}") from None
    moves = {args.coordinator: replicas}
    refused = _alter(args, moves)
    if refused:
        return _fail("reassign", refused)
    print(f"coordinator {args.coordinator}: reassignment to {replicas} started (or already there)", flush=True)
    return _fail("reassign", _wait(args, moves)) if args.wait else 0


def rebalance(args: argparse.Namespace) -> int:
    listed = _listed(args)
    running = [c.coordinator_id for c in listed.coordinators if c.reassigning]
    if running:
        raise CommandFailed(f"reassignments are in progress for coordinators {running}: wait for them first")
    current = {c.coordinator_id: tuple(c.replicas) for c in listed.coordinators}
    excluded = set(args.exclude or [])
    nodes = [n for n in listed.live_nodes if n not in excluded]
    try:
        plan = plan_rebalance(current, nodes, listed.replication_factor)
    except ValueError as error:
        raise CommandFailed(f"no plan over the live nodes {nodes}: {error}") from None
    after = {**current, **plan}
    moves = [
        {"coordinator_id": c, "from": list(current[c]), "to": list(r),
         "adding": [n for n in r if n not in current[c]], "removing": [n for n in current[c] if n not in r]}
        for c, r in sorted(plan.items())
    ]  # fmt: skip
    summary: dict[str, Any] = {
        "live_nodes": list(listed.live_nodes),
        "excluded": sorted(excluded),
        "moves": moves,
        "before": _counts(current, listed.live_nodes),
        "after": _counts(after, listed.live_nodes),
        "dry_run": bool(args.dry_run),
    }
    _print_plan(summary, args.json)
    if args.dry_run or not plan:
        return 0
    refused = _alter(args, plan)
    if refused:
        return _fail("rebalance", refused)
    if not args.wait:
        return 0
    problems = _wait(args, plan)
    if not problems:
        _elect_preferred(args, sorted(plan))
    return _fail("rebalance", problems)


def _elect_preferred(args: argparse.Namespace, coordinator_ids: list[int]) -> None:
    """Leadership to the new preferred leaders at once (as Cruise Control follows its moves with a preferred
    election), rather than at the cluster's next periodic check; one that is not possible waits for that check."""
    request = admin.ElectLeadersRequest(coordinator_ids=coordinator_ids)

    def call(channel: grpc.Channel) -> admin.ElectLeadersResponse:
        return admin_pb2_grpc.CoordinatorAdminStub(channel).ElectLeaders(request, timeout=RPC_TIMEOUT_S)

    answer = call_first(args, call)
    elected = [r.coordinator_id for r in answer.results if r.outcome == admin.LEADER_ELECTED]
    waiting = [
        f"{r.coordinator_id} ({r.reason})" for r in answer.results if r.outcome == admin.LEADER_ELECTION_NOT_POSSIBLE
    ]
    print(
        f"preferred leaders elected for coordinators {elected}"
        + (f"; not yet for {', '.join(waiting)}" if waiting else "")
        + (f" ({pb.ErrorCode.Name(answer.error_code)}: {answer.error_message})" if answer.error_code else ""),
        file=sys.stderr if args.json else sys.stdout, flush=True,
    )  # fmt: skip


def _counts(placement: Mapping[int, tuple[int, ...]], live: Sequence[int]) -> dict[str, dict[str, int]]:
    """Replicas and preferred leaders per node (every live node, and every node holding a replica)."""
    replicas, leaders = replica_counts(placement), leader_counts(placement)
    nodes = sorted(set(live) | set(replicas))
    return {
        "replicas": {str(n): replicas.get(n, 0) for n in nodes},
        "preferred_leaders": {str(n): leaders.get(n, 0) for n in nodes},
    }


def _print_plan(summary: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2), flush=True)
        return
    moves = summary["moves"]
    print(f"{len(moves)} coordinators to move over nodes {summary['live_nodes']}"
          + (f" (emptying {summary['excluded']})" if summary["excluded"] else ""))  # fmt: skip
    for move in moves:
        print(
            f"  coordinator {move['coordinator_id']}: {move['from']} -> {move['to']} "
            f"(adding {move['adding']}, removing {move['removing']})"
        )
    for when in ("before", "after"):
        counts = summary[when]
        print(
            f"{when}: replicas per node {counts['replicas']}, preferred leaders per node {counts['preferred_leaders']}"
        )
    sys.stdout.flush()


def _common(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser, json_help="print one JSON document (progress goes to stderr)")
    parser.add_argument("--wait", action="store_true", help="wait until every reassignment started is done")
    parser.add_argument("--wait-timeout-s", type=float, default=WAIT_DEFAULT_S, help="--wait gives up after this")


def add_reassign_commands(commands: Any) -> None:
    """Adds `reassign` and `rebalance` to the `diskless` parser's subcommands."""
    parser = commands.add_parser(
        "reassign", help="move one coordinator's replicas online (kafka-reassign-partitions --execute)"
    )
    parser.add_argument("--coordinator", type=int, help="the coordinator id")
    parser.add_argument("--replicas", help="N1,N2,N3: its new replicas, the preferred leader first")
    parser.add_argument("--list", action="store_true", help="instead: the reassignments in progress")
    _common(parser)
    parser.set_defaults(run=lambda args: run(reassign, args))
    parser = commands.add_parser(
        "rebalance", help="spread the replicas evenly over the live nodes with the fewest moves, and run the moves"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan only")
    parser.add_argument(
        "--exclude", type=int, action="append", metavar="N", help="a node to empty before it is retired (repeatable)"
    )
    _common(parser)
    parser.set_defaults(run=lambda args: run(rebalance, args))
