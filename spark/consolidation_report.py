"""`diskless consolidate`'s summary: what it planned, moved, left and why; a table or JSON.

Status and exit code: `ok` (exit 0) when every planned run moved or was refused because part of it was
deleted meanwhile (OFFSET_OUT_OF_RANGE); `incomplete` (exit 1) when batches were damaged, an extent was
refused for another reason, a run's outcome is unknown (its object kept for a rerun or the orphan
scan) or an upload failed; `aborted` (exit 1) when
the job could not plan (a coordinator did not answer) and moved nothing. Bad options exit 2 with no
summary.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from spark.consolidation_tasks import MOVED, NOTHING_TO_MOVE, PLANNED, REFUSED, UNKNOWN, UPLOAD_FAILED, RunResult

OK = "ok"
INCOMPLETE = "incomplete"
ABORTED = "aborted"
RUNNING = "running"
SAMPLE_MAX = 20


@dataclass(slots=True)
class ConsolidationReport:
    mode: str  # "dry-run" or "consolidate"
    started_at_ms: int
    store: str
    min_age_ms: int
    target_object_bytes: int
    max_files: int
    status: str = RUNNING
    reason: str = ""
    coordinators: int = 0
    files_planned: int = 0  # distinct source files with a planned batch
    batches_planned: int = 0  # live batches of the planned files
    runs: int = 0  # runs worth moving
    tasks: int = 0  # Spark tasks the runs were shipped in (diskless.consolidation.task.runs / .task.bytes)
    task_payload_max_bytes: int = 0  # the largest task's plan payload (compressed runs)
    files_in: int = 0  # source files some moved batch came from
    objects_out: int = 0  # objects committed (with --dry-run: that would be)
    batches_moved: int = 0
    bytes_moved: int = 0
    gets_before: int = 0  # GETs a full read of the moved data needed before
    gets_after: int = 0  # and needs now
    damaged: int = 0  # batches left in place: their bytes failed the check
    refused: int = 0  # batches of extents a coordinator refused (deleted meanwhile, ...)
    refused_otherwise: int = 0  # of those, for another reason than "deleted meanwhile"
    unknown: int = 0  # runs whose ReplaceBatches got no answer: objects kept
    upload_failed: int = 0
    objects_deleted: int = 0  # objects nothing moved into, deleted
    # ReplaceBatches calls' wall time (ms): each applies one record per coordinator on its loop, so the
    # slowest call bounds how long a commit there may have waited behind the job.
    replace_ms_p50: float = 0.0
    replace_ms_max: float = 0.0
    durations_s: dict[str, float] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    def add(self, results: Iterable[RunResult]) -> None:
        sources: set[str] = set()
        calls: list[float] = []
        for result in results:
            if result.replace_ms > 0:
                calls.append(result.replace_ms)
            self.damaged += result.damaged
            self.refused += result.refused
            self.refused_otherwise += result.refused_otherwise
            if result.status in (MOVED, PLANNED):
                self.objects_out += 1
                self.batches_moved += result.batches_moved
                self.bytes_moved += result.bytes_moved
                self.gets_before += result.gets_before
                self.gets_after += result.gets_after
                sources.update(result.moved_from)
            self.unknown += result.status == UNKNOWN
            self.upload_failed += result.status == UPLOAD_FAILED
            self.objects_deleted += result.object_deleted
            if result.status in (REFUSED, UNKNOWN, UPLOAD_FAILED, NOTHING_TO_MOVE) or result.damaged:
                room = SAMPLE_MAX - len(self.messages)
                self.messages.extend(f"{result.partition}: {m}" for m in result.messages[: max(0, room)])
        self.files_in = len(sources)
        if calls:
            calls.sort()
            self.replace_ms_p50, self.replace_ms_max = calls[len(calls) // 2], calls[-1]

    def abort(self, reason: str) -> None:
        self.status, self.reason = ABORTED, reason

    def finish(self) -> None:
        if self.status == RUNNING:
            troubled = self.damaged or self.refused_otherwise or self.unknown or self.upload_failed
            self.status = INCOMPLETE if troubled else OK

    @property
    def exit_code(self) -> int:
        return 0 if self.status == OK else 1

    def to_json(self, indent: int | None = 2) -> str:
        document: dict[str, Any] = dataclasses.asdict(self)
        return json.dumps(document, indent=indent, sort_keys=False)

    def to_table(self) -> str:
        moved = "would move" if self.mode == "dry-run" else "moved"
        rows = [
            ("status", self.status + (f" ({self.reason})" if self.reason else "")),
            ("mode", self.mode),
            ("store", self.store),
            ("coordinators", f"{self.coordinators}"),
            ("planned", f"{self.files_planned:,} files, {self.batches_planned:,} live batches, {self.runs:,} runs"),
            (f"{moved}", f"{self.batches_moved:,} batches, {self.bytes_moved:,} bytes"),
            ("files in -> objects out", f"{self.files_in:,} -> {self.objects_out:,}"),
            ("GETs to read it all", f"{self.gets_before:,} before, {self.gets_after:,} after"),
            ("damaged (left in place)", f"{self.damaged:,} batches"),
            (
                "refused by a coordinator",
                f"{self.refused:,} batches ({self.refused_otherwise:,} not deleted meanwhile)",
            ),
            ("no answer (objects kept)", f"{self.unknown:,} runs"),
            ("uploads failed", f"{self.upload_failed:,} runs"),
            ("objects deleted (nothing moved)", f"{self.objects_deleted:,}"),
            ("ReplaceBatches calls", f"p50 {self.replace_ms_p50:g} ms, slowest {self.replace_ms_max:g} ms"),
            ("phases", ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.durations_s.items())),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
        lines.extend(f"  {message}" for message in self.messages)
        return "\n".join(lines)
