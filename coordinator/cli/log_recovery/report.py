"""What a recovery plan says to an operator: the report lines and the JSON of `diskless log recover`."""

from __future__ import annotations

import json
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from coordinator.cli.log_recovery.plan import RECOVERY_DIRECTORY_PREFIX, RecoveryPlan

# ---------------------------------------------------------------------- reporting


def plan_json(plan: RecoveryPlan, recovery_directory: Path | None, done: bool) -> dict[str, Any]:
    """The plan as one JSON document (also kept as report.json beside what was set aside).

    Built field by field rather than with dataclasses.asdict, whose deep copies took most of a
    minute for the 55,000 lost frames of a segment damaged halfway through 64 MiB.
    """
    document: dict[str, Any] = {f.name: getattr(plan, f.name) for f in dataclass_fields(plan)}
    document["directory"] = str(plan.directory)
    document["damage"] = asdict(plan.damage) if plan.damage is not None else None
    document["snapshot"] = asdict(plan.snapshot) if plan.snapshot is not None else None
    document["reused"] = [asdict(r) for r in plan.reused]
    document["lost_frames"] = [
        {
            "base_offset": f.base_offset, "record_count": f.record_count, "leader_epoch": f.leader_epoch,
            "segment": f.segment, "byte_position": f.byte_position,
            "records": [{"kind": r.kind, "summary": r.summary, "fields": r.fields} for r in f.records],
        }
        for f in plan.lost_frames
    ]  # fmt: skip
    document["action"] = "none" if plan.damage is None else ("recovered" if done else "plan")
    document["recovery_directory"] = str(recovery_directory) if recovery_directory is not None else None
    document["reused_offsets_note"] = REUSED_NOTE
    return document


def plan_json_text(plan: RecoveryPlan, recovery_directory: Path | None, done: bool) -> str:
    """plan_json as text: compact, since only json's C encoder (no indent) keeps a large report to a second."""
    return json.dumps(plan_json(plan, recovery_directory, done), default=str)


REUSED_NOTE = (
    "after the recovery each partition's next offset goes back to where the kept log leaves it, so offsets "
    "acknowledged in the lost range are handed out again to new batches: consumers that read them may skip or "
    "re-read, idempotent producers get sequence errors (Kafka's unclean recovery; with replicas a follower fetches "
    "from the leader instead)"
)


def _range(first: int, end: int) -> str:
    if end == first + 1:
        return str(first)
    return f"{first}..{end - 1}" if end > first else "none"


def report_lines(plan: RecoveryPlan, recovery_directory: Path | None, done: bool) -> list[str]:
    """The plan (or what was done) for an operator: the actions, then what is lost, then each lost frame."""
    head = f"coordinator {plan.coordinator_id}"
    damage = plan.damage
    if damage is None:
        torn = f"; the next start cuts a torn tail of {plan.torn_tail_bytes} bytes" if plan.torn_tail_bytes else ""
        verified = _range(plan.log_start_offset, plan.kept_end_offset)
        return [f"{head}: the log verifies (offsets {verified}): nothing to recover{torn}"]
    aside = recovery_directory or plan.directory / f"{RECOVERY_DIRECTORY_PREFIX}<now ms>"
    verb = "recovered" if done else "recovery would (dry run: nothing changed)"
    lines = [
        f"{head}: log damaged at {damage.segment_path}, byte {damage.byte_position} of {damage.segment_size_bytes}, "
        f"where log offset {damage.expected_offset} was expected: {damage.problem}",
        f"{head}: {verb}:",
        f"  keep the log {_range(plan.log_start_offset, plan.kept_end_offset)}"
        + (
            f"; {plan.damaged_segment} cut to its verified prefix of {plan.prefix_bytes} bytes, written anew"
            if plan.prefix_bytes >= 0
            else ""
        ),
        f"  move into {aside} (kept, never deleted): segments {', '.join(plan.moved_segments)}"
        + (f"; snapshots {', '.join(plan.moved_snapshots)} (past the damage)" if plan.moved_snapshots else "")
        + (f"; {', '.join(plan.state_files)}" if plan.state_files else ""),
    ]
    lines.append(
        f"  append a leader change to epoch {plan.leader_epoch_after} at log offset {plan.kept_end_offset}, above "
        "every epoch of the lost history, so that no epoch is used twice"
    )
    if plan.snapshot is not None:
        end = plan.snapshot.snapshot_id.end_offset
        replay = f"replays the log {_range(end, plan.kept_end_offset)} onto it" if end < plan.kept_end_offset else ""
        lines.append(
            f"  restore snapshot {plan.snapshot.snapshot_id}" + (f": the next start {replay}" if replay else "")
        )
    else:
        lines.append(f"  leave no state: the next start rebuilds it from the log {_range(0, plan.kept_end_offset)}")
    lines += _lost_lines(plan)
    if not done:
        lines.append(f"{head}: dry run, nothing changed; run again with --yes to recover")
    return lines


def _lost_lines(plan: RecoveryPlan) -> list[str]:
    verifying = len(plan.lost_frames)
    records_verifying = sum(f.record_count for f in plan.lost_frames)
    undecodable = ", ".join(_range(first, last + 1) for first, last in plan.undecodable_offsets) or "none"
    lines = [
        f"lost: log offsets {_range(plan.kept_end_offset, plan.lost_end_offset)} ({plan.lost_record_count} records): "
        f"{verifying} frames after the damage that verify ({records_verifying} records, listed below) and the "
        f"damaged frame(s), which cannot be decoded (offsets {undecodable})",
    ]
    if not plan.lost_frames_complete:
        lines.append("  (the search for frames that verify stopped at its budget: more may be lost than listed)")
    lines.append(f"offsets acknowledged and handed out again ({REUSED_NOTE}):")
    for reused in plan.reused:
        gone = "" if reused.exists_after else " (the partition was created in the lost range and is gone)"
        lines.append(
            f"  {reused.topic_name}-{reused.partition}: offsets {_range(reused.first_offset, reused.end_offset)} "
            f"(next offset back from {reused.end_offset} to {reused.first_offset}; known from the {reused.known_from})"
            f"{gone}"
        )
    if not plan.reused:
        lines.append("  none known")
    lines.append("frames after the damage that verify (lost):")
    for frame in plan.lost_frames:
        where = f"{frame.segment} byte {frame.byte_position}"
        lines.append(
            f"  log offset {_range(frame.base_offset, frame.base_offset + frame.record_count)} "
            f"(epoch {frame.leader_epoch}, {where}):"
        )
        lines += [f"    {record.summary}" for record in frame.records]
    return lines
