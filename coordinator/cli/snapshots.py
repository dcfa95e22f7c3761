"""`diskless snapshot create|list|verify|restore` (DESIGN §6): over gRPC on a running node (`--bootstrap`) or on a
stopped node's data directory (`--data-dir`, each coordinator directory locked); `restore` on a data directory only,
since replacing the state of a live coordinator makes no sense."""

from __future__ import annotations

import argparse
import sys

import grpc

from coordinator.cli.operator_commands import (
    RPC_TIMEOUT_S,
    CommandFailed,
    call_first,
    coordinator_directories,
    locked,
    now_ms,
    report_errors,
)
from coordinator.cli.output import SnapshotRow, print_rows, row_of_info, row_of_manifest
from coordinator.config.settings import Settings
from coordinator.machine.state.integrity import take_clean_close_mark
from coordinator.runtime.log.inspection import scan_position
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.shard.pruning import prune
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from snapshot.snapshots import (
    SnapshotId,
    check_snapshots,
    list_snapshots,
    restore_snapshot,
    snapshot_directory,
    take_snapshot,
    verify_snapshot,
)


def _remote_snapshots(args: argparse.Namespace, verify: bool) -> tuple[list[SnapshotRow], list[str]]:
    def call(channel: grpc.Channel) -> admin.ListSnapshotsResponse:
        stub = admin_pb2_grpc.CoordinatorAdminStub(channel)
        request = admin.ListSnapshotsRequest(coordinator_ids=args.coordinator or [], verify=verify)
        return stub.ListSnapshots(request, timeout=RPC_TIMEOUT_S)

    rows, errors = [], []
    for entry in call_first(args, call).coordinators:
        if entry.error_code != pb.NONE:
            errors.append(f"coordinator {entry.coordinator_id}: {entry.error_message}")
        for s in entry.snapshots:
            rows.append(row_of_info(entry.coordinator_id, s.info, s.verified if verify else None, s.problem))
    return rows, errors


_SNAPSHOT_COLUMNS = ("coordinator_id", "snapshot", "size_bytes", "crc32", "created_at_ms", "verified", "problem")


def snapshot_create(args: argparse.Namespace) -> int:
    rows, errors = [], []
    if args.data_dir is not None:
        settings = Settings()
        for coordinator_id, directory in coordinator_directories(args):
            with locked(directory):
                state = directory / "state.sqlite"
                if not state.exists():
                    errors.append(f"coordinator {coordinator_id}: {state} is missing")
                    continue
                manifest = take_snapshot(
                    state,
                    snapshot_directory(directory),
                    settings.snapshot_copy_step_pages,
                    now_ms(),
                    settings.snapshot_copy_max_bytes_per_second,
                    settings.state_page_checksums,
                )
                metadata_log = MetadataLog(directory / "log", settings.log_segment_bytes)
                try:
                    prune(snapshot_directory(directory), metadata_log, args.retained_count)
                finally:
                    metadata_log.close()
                rows.append(row_of_manifest(coordinator_id, manifest))
    else:

        def call(channel: grpc.Channel) -> admin.CreateSnapshotResponse:
            request = admin.CreateSnapshotRequest(coordinator_ids=args.coordinator or [])
            return admin_pb2_grpc.CoordinatorAdminStub(channel).CreateSnapshot(request, timeout=RPC_TIMEOUT_S)

        for result in call_first(args, call).results:
            if result.error_code != pb.NONE:
                errors.append(f"coordinator {result.coordinator_id}: {result.error_message}")
            else:
                rows.append(row_of_info(result.coordinator_id, result.snapshot, None, ""))
    print_rows(rows, args.json, "snapshots", _SNAPSHOT_COLUMNS)
    return report_errors(errors)


def snapshot_list(args: argparse.Namespace, verify: bool = False) -> int:
    rows: list[SnapshotRow] = []
    errors: list[str] = []
    if args.data_dir is not None:
        for coordinator_id, directory in coordinator_directories(args):
            with locked(directory):
                if verify:
                    checks = check_snapshots(snapshot_directory(directory))
                    rows += [row_of_manifest(coordinator_id, c.manifest, c.problem or "") for c in checks]
                else:
                    rows += [row_of_manifest(coordinator_id, m) for m in list_snapshots(snapshot_directory(directory))]
    else:
        rows, errors = _remote_snapshots(args, verify)
    print_rows(rows, args.json, "snapshots", _SNAPSHOT_COLUMNS)
    errors += [f"coordinator {r.coordinator_id}: snapshot {r.snapshot}: {r.problem}" for r in rows if r.problem]
    return report_errors(errors)


def snapshot_verify(args: argparse.Namespace) -> int:
    return snapshot_list(args, verify=True)


def snapshot_restore(args: argparse.Namespace) -> int:
    if args.data_dir is None:
        raise CommandFailed("restore works on a stopped node's --data-dir only")
    found = coordinator_directories(args)
    if len(found) != 1 or not args.coordinator:
        raise CommandFailed("restore needs one --coordinator")
    [(coordinator_id, directory)] = found
    with locked(directory):
        position = scan_position(directory / "log")
        snapshots = list_snapshots(snapshot_directory(directory))
        if args.snapshot:
            wanted = SnapshotId.parse(args.snapshot)
            snapshots = [m for m in snapshots if m.snapshot_id == wanted]
            if not snapshots:
                raise CommandFailed(f"coordinator {coordinator_id} has no snapshot {wanted}")
        for manifest in snapshots:
            end = manifest.snapshot_id.end_offset
            problem = verify_snapshot(manifest)
            if problem is None and not position.start_offset <= end <= position.end_offset:
                problem = f"the log ({position.start_offset}..{position.end_offset}) does not continue it at {end}"
            if problem is None:
                take_clean_close_mark(directory)  # a state the node did not close: checked at its next load
                restore_snapshot(manifest, directory / "state.sqlite")
                print_rows([row_of_manifest(coordinator_id, manifest, "")], args.json, "restored", _SNAPSHOT_COLUMNS)
                return 0
            print(f"diskless snapshot restore: skipping {manifest.snapshot_id}: {problem}", file=sys.stderr)
    raise CommandFailed(f"coordinator {coordinator_id}: no snapshot verifies and fits the log")
