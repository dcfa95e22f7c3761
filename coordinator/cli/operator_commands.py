"""Operator commands `diskless describe`, `diskless state check` and `diskless log recover` (DESIGN §6, §9), and
what every command shares (the first answering address, a coordinator directory's lock, the exit codes);
`diskless snapshot ...` is in `snapshots.py`, `diskless describe --gateways` in `gateways.py`.

Each talks to a running node over gRPC (`--bootstrap HOST:PORT[,...]`, the
first address that answers) or works on a stopped node's data directory
(`--data-dir`); `restore` and `log recover` only on a data directory, since
replacing the state or the log of a live coordinator makes no sense. A
command working on a data directory takes each coordinator directory's lock,
so it refuses to run beside a live node. `--json` prints one JSON document;
exit code 0 on success, 1 when a coordinator reported a problem, 2 when the
command could not run, with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import apsw
import grpc

from coordinator.base.directory_lock import DirectoryInUse, DirectoryLock
from coordinator.cli.log_recovery.apply import apply_recovery
from coordinator.cli.log_recovery.plan import RecoveryRefused, plan_recovery
from coordinator.cli.log_recovery.report import plan_json_text, report_lines
from coordinator.cli.output import (
    STATE_CHECK_COLUMNS,
    CoordinatorRow,
    StateCheckRow,
    print_rows,
)
from coordinator.machine.state import file_reads, reads
from coordinator.machine.state.integrity import check_integrity, take_clean_close_mark
from coordinator.runtime.log.inspection import scan_log
from coordinator.runtime.log.segments import CorruptLogError, LogPosition
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from snapshot import page_checksums
from snapshot.durable_files import ChecksumMismatch
from snapshot.snapshots import (
    SnapshotError,
    list_snapshots,
    snapshot_directory,
)

DEFAULT_BOOTSTRAP = "127.0.0.1:50051"
RPC_TIMEOUT_S = 120.0  # a snapshot of a large state takes seconds; the command waits this long at most
_COORDINATOR_DIRECTORY = re.compile(r"^coordinator-(\d+)$")
T = TypeVar("T")


class CommandFailed(Exception):
    """The command could not run; the message is the one-line reason."""


# ---------------------------------------------------------------------- over gRPC


def _channel_credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """TLS for the call when --ca is given, with --cert/--key as the operator's own certificate (mutual TLS)."""
    if not args.ca:
        if args.cert or args.key:
            raise CommandFailed("--cert and --key need --ca (the CA that signed the node's certificate)")
        return None
    if bool(args.cert) != bool(args.key):
        raise CommandFailed("--cert and --key go together")
    try:
        return grpc.ssl_channel_credentials(
            args.ca.read_bytes(),
            args.key.read_bytes() if args.key else None,
            args.cert.read_bytes() if args.cert else None,
        )
    except OSError as error:
        raise CommandFailed(f"cannot read a TLS file: {error}") from error


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """--ca, --cert and --key, as `call_first` reads them."""
    parser.add_argument("--ca", type=Path, help="PEM CA of the node's certificate: call over TLS")
    parser.add_argument("--cert", type=Path, help="PEM certificate of the operator (mutual TLS)")
    parser.add_argument("--key", type=Path, help="PEM private key of --cert")


def add_node_arguments(parser: argparse.ArgumentParser, json_help: str = "print one JSON document") -> None:
    """What every command calling a node takes: --bootstrap, the TLS files and --json."""
    parser.add_argument(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        help=f"HOST:PORT[,HOST:PORT...] of a node (default {DEFAULT_BOOTSTRAP})",
    )
    add_tls_arguments(parser)
    parser.add_argument("--json", action="store_true", help=json_help)


def call_first(args: argparse.Namespace, call: Callable[[grpc.Channel], T]) -> T:
    """Runs `call` against the first address of --bootstrap that answers."""
    problems = []
    bootstrap = args.bootstrap
    credentials = _channel_credentials(args)
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        channel = (
            grpc.secure_channel(address, credentials) if credentials is not None else grpc.insecure_channel(address)
        )
        with channel:
            try:
                return call(channel)
            except grpc.RpcError as error:
                problems.append(f"{address}: {error.code().name} {error.details()}")
                if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    break
    raise CommandFailed("; ".join(problems) or f"no address in --bootstrap {bootstrap!r}")


# ---------------------------------------------------------------------- on a data directory


def coordinator_directories(args: argparse.Namespace) -> list[tuple[int, Path]]:
    data_dir: Path = args.data_dir
    if not data_dir.is_dir():
        raise CommandFailed(f"{data_dir} is not a directory")
    found = sorted(
        (int(m.group(1)), p) for p in data_dir.iterdir() if p.is_dir() and (m := _COORDINATOR_DIRECTORY.match(p.name))
    )
    if args.coordinator:
        found = [(i, p) for i, p in found if i in args.coordinator]
        missing = set(args.coordinator) - {i for i, _ in found}
        if missing:
            raise CommandFailed(f"no coordinator {sorted(missing)} in {data_dir}")
    if not found:
        raise CommandFailed(f"no coordinator-<n> directory in {data_dir}")
    return found


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    try:
        lock = DirectoryLock(directory)
    except DirectoryInUse as error:
        raise CommandFailed(f"{error}; stop the node or use --bootstrap") from None
    try:
        yield
    finally:
        lock.release()


def _describe_directory(coordinator_id: int, directory: Path) -> CoordinatorRow:
    # The log as a start would find it: damage inside it is shown, never a log end shortened at the damage.
    scan = scan_log(directory / "log")
    row = _describe_state(coordinator_id, directory, scan.position)
    if scan.damage is None:
        return row
    error = scan.damage.describe() + (f"; {row.error}" if row.error else "")
    return replace(row, log_end_offset=-1, error=error)


def _describe_state(coordinator_id: int, directory: Path, position: LogPosition) -> CoordinatorRow:
    newest = next(iter(list_snapshots(snapshot_directory(directory))), None)
    newest_name = str(newest.snapshot_id) if newest else ""
    state = directory / "state.sqlite"
    if not state.exists():
        return CoordinatorRow(
            coordinator_id, "STOPPED", -1, position.start_offset, position.end_offset, newest_name, 0, 0, 0,
            "no state.sqlite: the next start restores a snapshot or replays the log",
        )  # fmt: skip
    try:
        # Read-write without create (the lock is held): closing it leaves no -wal/-shm behind.
        connection = page_checksums.connect(state, apsw.SQLITE_OPEN_READWRITE)
        try:
            connection.execute("BEGIN")
            (applied,) = reads.one_row(
                connection.execute("SELECT value FROM meta WHERE name = 'applied_offset'"), "meta applied_offset"
            )
            counts = file_reads.coordinator_counts(connection)
            connection.execute("COMMIT")
        finally:
            connection.close()
    except apsw.Error as error:
        return CoordinatorRow(
            coordinator_id, "STOPPED", -1, position.start_offset, position.end_offset, newest_name, 0, 0, 0,
            f"{state}: {error}",
        )  # fmt: skip
    return CoordinatorRow(
        coordinator_id, "STOPPED", applied, position.start_offset, position.end_offset, newest_name,
        counts.partition_count, counts.live_file_count, counts.live_batch_count,
    )  # fmt: skip


# ---------------------------------------------------------------------- commands


def describe(args: argparse.Namespace) -> int:
    rows: list[CoordinatorRow] = []
    if args.data_dir is not None:
        for coordinator_id, directory in coordinator_directories(args):
            with locked(directory):
                rows.append(_describe_directory(coordinator_id, directory))
    else:

        def call(channel: grpc.Channel) -> tuple[pb.DescribeCoordinatorsResponse, admin.ListSnapshotsResponse]:
            ids = args.coordinator or []
            described = pb_grpc.DisklessCoordinatorStub(channel).DescribeCoordinators(
                pb.DescribeCoordinatorsRequest(coordinator_ids=ids), timeout=RPC_TIMEOUT_S
            )
            listed = admin_pb2_grpc.CoordinatorAdminStub(channel).ListSnapshots(
                admin.ListSnapshotsRequest(coordinator_ids=ids), timeout=RPC_TIMEOUT_S
            )
            return described, listed

        described, listed = call_first(args, call)
        newest = {
            c.coordinator_id: f"{c.snapshots[0].info.end_offset}-{c.snapshots[0].info.epoch}"
            for c in listed.coordinators
            if c.snapshots
        }
        for c in described.coordinators:
            rows.append(
                CoordinatorRow(
                    c.coordinator_id,
                    c.state,
                    c.applied_offset,
                    c.log_start_offset,
                    c.log_end_offset,
                    newest.get(c.coordinator_id, ""),
                    c.partition_count,
                    c.live_file_count,
                    c.live_batch_count,
                    c.error_message,
                    c.role,
                    c.leader.leader_node_id if c.HasField("leader") else -1,
                    c.leader.leader_epoch if c.HasField("leader") else -1,
                    ",".join(map(str, c.isr)),
                    c.high_watermark,
                    ",".join(map(str, c.replica_node_ids)),
                    _lag_cell(c),
                    c.producer_count,
                    c.state_bytes,
                    c.log_bytes,
                    c.snapshot_bytes,
                    c.scrubbed_bytes,
                    c.scrub_damage_found,
                    workers_cell(c),
                )
            )
    print_rows(
        rows, args.json, "coordinators",
        ("coordinator_id", "state", "role", "leader", "leader_epoch", "replicas", "isr", "lag", "applied_offset",
         "high_watermark", "log_start_offset", "log_end_offset", "newest_snapshot", "partitions", "live_files",
         "live_batches", "producers", "state_bytes", "log_bytes", "snapshot_bytes", "scrubbed_bytes", "scrub_damage",
         "worker_failures", "error"),
    )  # fmt: skip
    return 1 if any(r.error for r in rows) else 0


def workers_cell(description: pb.CoordinatorDescription) -> str:
    """The background workers that failed on the answering node: NAME:RECENT/TOTAL, "!" after a failing one."""
    return ",".join(
        f"{w.name}:{w.recent_failures}/{w.failures}{'!' if w.failing else ''}"
        for w in (*description.workers, *description.node_workers)
        if w.failures
    )


def _lag_cell(description: pb.CoordinatorDescription) -> str:
    """NODE:LAG for each follower where the answering node leads; the follower's own lag where it follows."""
    if description.role == "FOLLOWER":
        return str(description.replica_lag)
    return ",".join(
        f"{p.node_id}:{p.lag if p.lag >= 0 else '?'}"
        for p in description.replica_progress
        if p.node_id != description.node_id
    )


def log_recover(args: argparse.Namespace) -> int:
    """Recovers a stopped coordinator whose log is damaged inside; a dry run unless --yes (log_recovery/apply.py)."""
    found = coordinator_directories(args)
    if len(found) != 1 or not args.coordinator:
        raise CommandFailed("log recover needs one --coordinator")
    [(coordinator_id, directory)] = found
    with locked(directory):
        plan = plan_recovery(directory, coordinator_id)
        outcome = None
        if args.yes and plan.damage is not None:
            take_clean_close_mark(directory)  # a state the node did not close: checked at its next load
            outcome = apply_recovery(plan, now_ms())
    recovery_directory = outcome.recovery_directory if outcome is not None else None
    if args.json:
        print(plan_json_text(plan, recovery_directory, done=outcome is not None))
    else:
        print("\n".join(report_lines(plan, recovery_directory, done=outcome is not None)))
    return 0


def state_check(args: argparse.Namespace) -> int:
    """PRAGMA integrity_check of each coordinator's state, on a running node (rebuilt if damaged) or offline."""
    rows: list[StateCheckRow] = []
    errors: list[str] = []
    if args.data_dir is not None:
        for coordinator_id, directory in coordinator_directories(args):
            with locked(directory):
                state = directory / "state.sqlite"
                if not state.exists():
                    errors.append(f"coordinator {coordinator_id}: {state} is missing (the next start rebuilds it)")
                    continue
                report = check_integrity(state)
                rows.append(
                    StateCheckRow(coordinator_id, report.problem is None, round(report.seconds, 3), report.size_bytes,
                                  report.problem or "")
                )  # fmt: skip
    else:

        def call(channel: grpc.Channel) -> admin.CheckStateResponse:
            stub = admin_pb2_grpc.CoordinatorAdminStub(channel)
            return stub.CheckState(
                admin.CheckStateRequest(coordinator_ids=args.coordinator or []), timeout=RPC_TIMEOUT_S
            )

        for result in call_first(args, call).results:
            if result.error_code != pb.NONE:
                errors.append(f"coordinator {result.coordinator_id}: {result.error_message}")
                continue
            rows.append(
                StateCheckRow(result.coordinator_id, result.sound, round(result.seconds, 3), result.state_bytes,
                              result.problem)
            )  # fmt: skip
    print_rows(rows, args.json, "coordinators", STATE_CHECK_COLUMNS)
    errors += [f"coordinator {r.coordinator_id}: state damaged: {r.problem}" for r in rows if not r.sound]
    return report_errors(errors)


def report_errors(errors: list[str]) -> int:
    for error in errors:
        print(f"diskless: {error}", file=sys.stderr)
    return 1 if errors else 0


def now_ms() -> int:
    from coordinator.base.clock import SystemClock

    return SystemClock().now_ms()


# Failures reported as a one-line reason (exit 2): the command could not do what it was asked.
_COMMAND_FAILURES = (
    CommandFailed, SnapshotError, CorruptLogError, RecoveryRefused, ChecksumMismatch, OSError, apsw.Error,
)  # fmt: skip


def run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return command(args)
    except _COMMAND_FAILURES as error:
        print(f"diskless {args.command}: {error}", file=sys.stderr)
        return 2
