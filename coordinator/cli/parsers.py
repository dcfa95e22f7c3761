"""The argument parsers of the operator commands (coordinator/cli/operator_commands.py) under `diskless`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from coordinator.cli.configs import add_configs_command
from coordinator.cli.coordinators import add_coordinators_command
from coordinator.cli.gateways import describe_gateways
from coordinator.cli.leaders import add_elect_leaders_command
from coordinator.cli.operator_commands import (
    DEFAULT_BOOTSTRAP,
    add_tls_arguments,
    describe,
    log_recover,
    run,
    state_check,
)
from coordinator.cli.partition_moves import add_partition_move_commands
from coordinator.cli.reassign import add_reassign_commands
from coordinator.cli.snapshots import snapshot_create, snapshot_list, snapshot_restore, snapshot_verify
from coordinator.cli.switch import add_switch_command
from coordinator.cli.transactions import add_transactions_command
from coordinator.config.settings import Settings


def _add_target(parser: argparse.ArgumentParser, remote: bool = True) -> None:
    if remote:
        target = parser.add_mutually_exclusive_group()
        target.add_argument(
            "--bootstrap",
            default=DEFAULT_BOOTSTRAP,
            help=f"HOST:PORT[,HOST:PORT...] of a node (default {DEFAULT_BOOTSTRAP})",
        )
        target.add_argument("--data-dir", type=Path, help="a stopped node's data directory, instead of a node")
        add_tls_arguments(parser)
    else:
        parser.add_argument("--data-dir", type=Path, required=True, help="the stopped node's data directory")
    parser.add_argument("--coordinator", type=int, action="append", help="a coordinator id (repeatable; default all)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def add_operator_commands(commands: Any) -> None:
    """Adds `describe`, `configs ...`, `elect-leaders`, `snapshot ...`, `state ...` and `log ...` to the `diskless`
    parser's subcommands."""
    describe_parser = commands.add_parser(
        "describe", help="per coordinator: applied offset, log start and end, newest snapshot, partitions, files"
    )
    _add_target(describe_parser)
    describe_parser.add_argument(
        "--gateways", type=Path, metavar="BROKERS.json",
        help='instead: each coordinator\'s produce gateways per rack among the brokers of a JSON list of '
        '{"broker_id": N, "rack": "r"} objects (KIP-1164)',
    )  # fmt: skip
    describe_parser.set_defaults(run=lambda args: run(describe if args.gateways is None else describe_gateways, args))

    add_configs_command(commands)
    add_transactions_command(commands)
    add_switch_command(commands)
    add_elect_leaders_command(commands)
    add_coordinators_command(commands)
    add_reassign_commands(commands)
    add_partition_move_commands(commands)

    snapshot_parser = commands.add_parser("snapshot", help="create, list, verify or restore coordinator snapshots")
    actions = snapshot_parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="snapshot each coordinator's state now, then prune")
    _add_target(create)
    create.add_argument(
        "--retained-count", type=int, default=Settings().snapshot_retained_count,
        help="with --data-dir: snapshots to keep (the node uses its setting)",
    )  # fmt: skip
    create.set_defaults(run=lambda args: run(snapshot_create, args))
    listing = actions.add_parser("list", help="the snapshots of each coordinator, newest first")
    _add_target(listing)
    listing.set_defaults(run=lambda args: run(snapshot_list, args))
    verify = actions.add_parser("verify", help="read every snapshot and check it against its manifest")
    _add_target(verify)
    verify.set_defaults(run=lambda args: run(snapshot_verify, args))
    restore = actions.add_parser(
        "restore", help="replace a stopped coordinator's SQLite state with a snapshot (the log tail replays at start)"
    )
    _add_target(restore, remote=False)
    restore.add_argument("--snapshot", help="END_OFFSET-EPOCH (default: the newest that verifies and fits the log)")
    restore.set_defaults(run=lambda args: run(snapshot_restore, args))

    state_parser = commands.add_parser("state", help="check coordinators' SQLite state")
    state_actions = state_parser.add_subparsers(dest="action", required=True)
    check = state_actions.add_parser(
        "check",
        help="PRAGMA integrity_check of each coordinator's state; a running node rebuilds a damaged one at once "
        "(from its newest sound snapshot and the log), a stopped node's (--data-dir) at its next start",
    )
    _add_target(check)
    check.set_defaults(run=lambda args: run(state_check, args))

    log_parser = commands.add_parser("log", help="a stopped coordinator's metadata log")
    log_actions = log_parser.add_subparsers(dest="action", required=True)
    recover = log_actions.add_parser(
        "recover",
        help="give up the records from a damage inside a stopped coordinator's log: cut the log before the damage "
        "(everything moved aside, nothing deleted) and restore the newest snapshot before it; a dry run without --yes",
    )
    _add_target(recover, remote=False)
    mode = recover.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="say what recovery keeps and loses, change nothing (default)"
    )
    mode.add_argument("--yes", action="store_true", help="recover: what the dry run says is lost is given up")
    recover.set_defaults(run=lambda args: run(log_recover, args))
