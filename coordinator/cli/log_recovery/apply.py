"""Recovering a coordinator whose metadata log is damaged inside: `diskless log recover` (DESIGN §6).

A torn tail is cut at start; damage inside the log is not (segments.py): acknowledged records may
follow it, and only an operator can decide to give them up. This is that decision, on a stopped
node, in two steps:

- `plan_recovery` reads and changes nothing. It finds the first damage a start would meet (from the
  newest snapshot that verifies, or the log start), chooses the newest verifying snapshot that ends
  at or before it, and says exactly what is lost: the log offsets from the damage to the end known
  before it, every frame after the damage that still verifies in Kafka terms, and per partition
  the offsets that were acknowledged and will be handed out again (the partition's next offset
  goes back to where the kept log leaves it: Kafka's unclean recovery, without a replica to fetch
  from).
- `apply_recovery` carries it out, never deleting anything: snapshots that end past the damage
  (of a history that no longer is), the damaged segment and every later one move into
  `<coordinator>/log-recovery-<ms>/`; the damaged segment's verified prefix is written in its place
  (`.part`, fsync, rename, fsync the directory); the log goes on with a leader change to an epoch
  above every epoch of the lost history; the SQLite state moves aside as well, and the chosen
  snapshot is restored (without one, a log starting at 0 rebuilds the state).

A log that verifies but ends before what its state or a snapshot holds (a segment lost or cut
short, or a recovery interrupted before the state moved) is recovered the same way, as damage at
its end.

The steps go in an order where a crash at any point leaves a directory that either still refuses
to load (state ahead of the log, or the damage still there) or loads as the recovery would; running
the command again finishes it.
"""

from __future__ import annotations

import os
import shutil
import zlib
from pathlib import Path

from coordinator.cli.log_recovery.plan import RECOVERY_DIRECTORY_PREFIX, RecoveryOutcome, RecoveryPlan, RecoveryRefused
from coordinator.cli.log_recovery.report import plan_json_text
from coordinator.machine import records
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segment_files import segment_bases, segment_name
from snapshot.durable_files import flush_and_fsync, fsync_directory, fsync_file, part_path, write_durably
from snapshot.snapshots import (
    DATA_SUFFIX,
    MANIFEST_SUFFIX,
    restore_snapshot,
    snapshot_directory,
)

# ---------------------------------------------------------------------- applying


def _keep(source: Path, target: Path) -> None:
    """A second name for the damaged segment's bytes before its own name gets the prefix: nothing is deleted."""
    try:
        os.link(source, target)
    except OSError:  # a file system without hard links: a copy, durable before the original is replaced
        shutil.copyfile(source, target)
        fsync_file(target)
    fsync_directory(target.parent)


def _check_unchanged(plan: RecoveryPlan) -> None:
    """The log is as planned: the same segments from the damaged one on, the damaged one byte for byte."""
    log_directory = plan.directory / "log"
    present = tuple(n for n in (segment_name(b) for b in segment_bases(log_directory)) if n in plan.moved_segments)
    damaged = log_directory / plan.damaged_segment
    data = damaged.read_bytes() if damaged.exists() else b""
    same_bytes = (len(data), zlib.crc32(data)) == (plan.damaged_segment_bytes, plan.damaged_segment_crc32)
    if present != plan.moved_segments or not same_bytes:
        raise RecoveryRefused(
            f"coordinator {plan.coordinator_id}: the log changed since it was read; run the command again"
        )


def _move_snapshots(plan: RecoveryPlan, target: Path) -> None:
    """First of all: while the log is whole, a start never restores them anyway (they fit only the old log).

    The data file before the manifest: a crash in between leaves a manifest without data, which
    verifies as missing and is skipped, rather than data without a manifest, which a start deletes.
    """
    if not plan.moved_snapshots:
        return
    source = snapshot_directory(plan.directory)
    target.mkdir()
    for stem in plan.moved_snapshots:
        for name in (f"{stem}{DATA_SUFFIX}", f"{stem}{MANIFEST_SUFFIX}"):
            if (source / name).exists():
                os.rename(source / name, target / name)
                fsync_directory(source)
    fsync_directory(target)


def _append_leader_change(plan: RecoveryPlan) -> None:
    """Appends one leader change at the kept end to the newest segment (now that it ends there), as the log does.

    Only once the later segments are gone: before, a frame at the kept end could join the log to
    the next segment and let a start load a log whose records differ from its state's.
    """
    log_directory = plan.directory / "log"
    newest = log_directory / segment_name(segment_bases(log_directory)[-1])
    change = [records.leader_change(plan.leader_epoch_after, plan.leader_node_id)]
    frame = encode_frame(plan.kept_end_offset, plan.leader_epoch_after, 1, records.encode_batch(change))
    with open(newest, "ab") as file:
        file.write(frame)  # buffered: the whole frame or an error
        flush_and_fsync(file)


def apply_recovery(plan: RecoveryPlan, now_ms: int) -> RecoveryOutcome:
    """Carries out `plan` (the caller holds the coordinator's lock); everything set aside stays on disk."""
    if plan.damage is None:
        raise RecoveryRefused(f"coordinator {plan.coordinator_id}: nothing to recover")
    _check_unchanged(plan)
    directory, log_directory = plan.directory, plan.directory / "log"
    target = directory / f"{RECOVERY_DIRECTORY_PREFIX}{now_ms}"
    (target / "log").mkdir(parents=True)
    fsync_directory(directory)
    write_durably(target / "report.json", plan_json_text(plan, target, done=False).encode())
    _move_snapshots(plan, target / "snapshots")
    moved = list(plan.moved_segments)
    damaged = log_directory / plan.damaged_segment
    if plan.prefix_bytes >= 0:
        # The prefix takes the damaged segment's name in one rename, after its bytes have a second name:
        # a crash leaves the damaged segment (the start refuses) or the prefix, never neither.
        prefix = part_path(damaged)
        with open(damaged, "rb") as source, open(prefix, "wb") as file:
            file.write(source.read(plan.prefix_bytes))
            flush_and_fsync(file)
        _keep(damaged, target / "log" / plan.damaged_segment)
        os.replace(prefix, damaged)
        fsync_directory(log_directory)
        moved.remove(plan.damaged_segment)
    # Oldest first: the log keeps its end until the last one goes, so a start in between either loads
    # a state that is already at that end (nothing reused) or meets the hole and refuses.
    for name in moved:
        os.rename(log_directory / name, target / "log" / name)
        fsync_directory(log_directory)
    fsync_directory(target / "log")
    _append_leader_change(plan)
    # The state last: until it moves, it is ahead of the shortened log and a start refuses.
    for name in plan.state_files:
        if (directory / name).exists():
            os.rename(directory / name, target / name)
    fsync_directory(directory)
    fsync_directory(target)
    if plan.snapshot is not None:
        restore_snapshot(plan.snapshot, directory / "state.sqlite")
    write_durably(target / "report.json", plan_json_text(plan, target, done=True).encode())
    return RecoveryOutcome(plan, target)
