"""The orphan scan's report: what it found and did, as a human summary table or as JSON.

Status and exit code: `ok` (exit 0); `incomplete` when some orphans could
not be re-checked before deleting (they were kept; a rerun retries them), `failed` when a
delete failed, `aborted` when a safety rule stopped the scan before deleting
anything further (reason given): all three exit 1. A scan that could not start
(bad options or settings) exits 2 without a report.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from dataclasses import dataclass, field
from typing import Any

RUNNING = "running"
OK = "ok"
INCOMPLETE = "incomplete"
FAILED = "failed"
ABORTED = "aborted"
SAMPLE_MAX = 20  # orphans, foreign keys and failure messages shown; the counts are complete


@dataclass(slots=True)
class ScanReport:
    scan_id: str
    mode: str  # "dry-run" or "delete"
    started_at_ms: int
    store: str
    key_pattern: str
    grace_period_ms: int
    max_orphan_percent: int
    max_deletes: int
    delete_rate: float  # deletes per second; 0: no limit
    status: str = RUNNING
    reason: str = ""  # why it was aborted
    coordinators: int = 0
    nodes: list[str] = field(default_factory=list)
    threshold_ms: int = -1
    threshold_rule: str = ""
    oldest_live_file_ms: int = -1
    listed: int = 0  # every object under the prefix
    listed_bytes: int = 0
    foreign: int = 0  # keys not matching the WAL key pattern: left alone
    wal_files: int = 0  # keys matching it
    young: int = 0  # WAL files at or after the threshold
    candidates: int = 0  # WAL files before the threshold
    known_keys: int = 0  # keys the coordinators streamed (a file several coordinators own counts once per owner)
    known: int = 0  # candidates some coordinator knows
    live: int = 0
    awaiting_handover: int = 0
    awaiting_deletion: int = 0
    unresolved: int = 0  # orphans kept because some node did not answer for them when re-checked
    orphans: int = 0  # candidates no coordinator knows (the anti-join's), in the manifest
    orphan_bytes: int = 0
    orphan_percent: float = 0.0
    manifest: str = ""
    deleted: int = 0
    delete_failed: int = 0
    kept_by_recheck: int = 0  # orphans a coordinator knew when re-checked at delete time (committed meanwhile)
    saturated: bool = False  # more orphans than --max-deletes
    durations_s: dict[str, float] = field(default_factory=dict)  # per phase, wall clock
    # Within the deleting phase, summed over its tasks: re-check (DescribeFiles), delete (the store), paced.
    deleting_s: dict[str, float] = field(default_factory=dict)
    sample: list[dict[str, Any]] = field(default_factory=list)  # orphans: key, size, last_modified_ms
    foreign_sample: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def abort(self, reason: str) -> None:
        self.status = ABORTED
        self.reason = reason

    def finish(self) -> None:
        """Sets the final status unless the scan was aborted."""
        if self.status == ABORTED:
            return
        if self.delete_failed:
            self.status = FAILED
        elif self.unresolved:
            self.status = INCOMPLETE
        else:
            self.status = OK

    def note_failures(self, messages: list[str]) -> None:
        self.failures = (self.failures + messages)[:SAMPLE_MAX]

    @property
    def exit_code(self) -> int:
        return 0 if self.status == OK else 1

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(dataclasses.asdict(self), indent=indent)

    def to_table(self) -> str:
        return "\n".join(_table_lines(self))


def iso_ms(epoch_ms: int) -> str:
    if epoch_ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _count(value: int, size: int | None = None) -> str:
    return f"{value:,}" if size is None else f"{value:,} ({_bytes(size)})"


def _bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _table_lines(r: ScanReport) -> list[str]:
    status = r.status + (f": {r.reason}" if r.reason else "")
    deleted = "- (dry run)" if r.mode == "dry-run" else (
        f"{r.deleted:,} (failed {r.delete_failed:,}, kept by recheck {r.kept_by_recheck:,}, unresolved "
        f"{r.unresolved:,}, cap {r.max_deletes:,}{', SATURATED' if r.saturated else ''})"
    )  # fmt: skip
    rows = [
        ("scan", f"{r.scan_id} ({r.mode}) at {iso_ms(r.started_at_ms)}"),
        ("status", status),
        ("coordinators", f"{r.coordinators} on {len(r.nodes)} node(s): {', '.join(r.nodes) or '-'}"),
        ("threshold", f"{iso_ms(r.threshold_ms)} = {r.threshold_rule or '-'}"),
        ("store", f"{r.store}, WAL key pattern {r.key_pattern}"),
        ("listed", _count(r.listed, r.listed_bytes)),
        ("  foreign", f"{_count(r.foreign)} (left alone)"),
        ("  WAL files", _count(r.wal_files)),
        ("    young", f"{_count(r.young)} (at or after the threshold)"),
        ("    candidates", _count(r.candidates)),
        ("      keys known", f"{_count(r.known_keys)} (streamed from the coordinators, anti-joined)"),
        ("      known", f"{_count(r.known)} (live {r.live:,}, awaiting hand-over {r.awaiting_handover:,}, "
                        f"awaiting deletion {r.awaiting_deletion:,})"),
        ("      orphans", f"{_count(r.orphans, r.orphan_bytes)}, {r.orphan_percent:.1f}% of WAL files "
                          f"(max {r.max_orphan_percent}%)"),
        ("manifest", r.manifest or "-"),
        ("deleted", deleted),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
    if r.durations_s:
        lines.append("phase".ljust(width) + "  seconds")
        lines += [f"  {name}".ljust(width) + f"  {seconds:.2f}" for name, seconds in r.durations_s.items()]
        lines += [
            f"    {name}".ljust(width) + f"  {seconds:.2f} (tasks' sum)" for name, seconds in r.deleting_s.items()
        ]
    if r.sample:
        lines.append(f"orphans (first {len(r.sample)})")
        lines += [f"  {s['key']}  {_bytes(s['size'])}  {iso_ms(s['last_modified_ms'])}" for s in r.sample]
    if r.foreign_sample:
        lines.append(f"foreign keys (first {len(r.foreign_sample)})")
        lines += [f"  {key}" for key in r.foreign_sample]
    if r.failures:
        lines.append(f"failures (first {len(r.failures)})")
        lines += [f"  {message}" for message in r.failures]
    return lines
