"""What the operator commands print: their rows, as a table or one JSON document."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from protos import admin_pb2 as admin
from snapshot.snapshots import SnapshotManifest


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    coordinator_id: int
    snapshot: str  # END-EPOCH
    end_offset: int
    epoch: int
    size_bytes: int
    crc32: str
    created_at_ms: int
    path: str
    verified: bool | None = None  # None: not checked
    problem: str = ""


@dataclass(frozen=True, slots=True)
class GatewayRow:
    coordinator_id: int
    rack: str  # "" for brokers without a rack
    brokers: str  # the gateway broker ids, ascending, comma-separated


GATEWAY_COLUMNS = ("coordinator_id", "rack", "brokers")


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str
    is_default: bool


CONFIG_COLUMNS = ("name", "value", "is_default")


@dataclass(frozen=True, slots=True)
class CoordinatorRow:
    coordinator_id: int
    state: str
    applied_offset: int
    log_start_offset: int
    log_end_offset: int
    newest_snapshot: str  # END-EPOCH, "" if none
    partitions: int
    live_files: int
    live_batches: int
    error: str = ""
    # Replication (a cluster, DESIGN §6a); alone: LEADER, this node, its one-node ISR.
    role: str = ""
    leader: int = -1
    leader_epoch: int = -1
    isr: str = ""  # node ids, comma-separated
    high_watermark: int = -1
    replicas: str = ""  # node ids in assignment order (the preferred leader first), comma-separated
    # On the leader: each follower's offsets behind its log end (NODE:LAG, comma-separated; ? before a first
    # fetch); on a follower: its own lag behind the leader.
    lag: str = ""
    # What this replica keeps (DESIGN §4a), from a running node; -1 read offline.
    producers: int = -1
    state_bytes: int = -1
    log_bytes: int = -1
    snapshot_bytes: int = -1
    # The scrub since the node started (issue #40): bytes verified, damage found before any read met it.
    scrubbed_bytes: int = -1
    scrub_damage: int = -1
    # Background workers that failed on the answering node (this coordinator's and the node's own): NAME:RECENT/TOTAL,
    # comma-separated, "!" after one that keeps failing (health NOT_SERVING); empty when none failed.
    worker_failures: str = ""


@dataclass(frozen=True, slots=True)
class StateCheckRow:
    coordinator_id: int
    sound: bool
    seconds: float
    state_bytes: int
    problem: str = ""


STATE_CHECK_COLUMNS = ("coordinator_id", "sound", "seconds", "state_bytes", "problem")


def row_of_manifest(coordinator_id: int, manifest: SnapshotManifest, problem: str | None = None) -> SnapshotRow:
    return SnapshotRow(
        coordinator_id, str(manifest.snapshot_id), manifest.snapshot_id.end_offset, manifest.snapshot_id.epoch,
        manifest.size_bytes, f"{manifest.crc32:08x}", manifest.created_at_ms, str(manifest.data_path),
        None if problem is None else not problem, problem or "",
    )  # fmt: skip


def row_of_info(coordinator_id: int, info: admin.SnapshotInfo, verified: bool | None, problem: str) -> SnapshotRow:
    return SnapshotRow(
        coordinator_id, f"{info.end_offset}-{info.epoch}", info.end_offset, info.epoch, info.size_bytes,
        f"{info.crc32:08x}", info.created_at_ms, info.path, verified, problem,
    )  # fmt: skip


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def print_rows(rows: list[Any], as_json: bool, key: str, columns: tuple[str, ...]) -> None:
    if as_json:
        print(json.dumps({key: [asdict(r) for r in rows]}, indent=2))
        return
    table = [columns] + [tuple(_cell(getattr(r, c)) for c in columns) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
