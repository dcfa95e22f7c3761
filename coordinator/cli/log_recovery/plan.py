"""Planning the recovery of a coordinator whose metadata log is damaged inside (`diskless log recover`).

`plan_recovery` reads and changes nothing: it finds the first damage a start would meet, chooses
the newest verifying snapshot that ends at or before it, and says exactly what is lost (see
coordinator/cli/log_recovery/apply.py for the whole procedure).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from coordinator.cli.log_recovery.record_descriptions import LostRecord, Names, describe_record
from coordinator.machine import kinds, records
from coordinator.runtime.log.damage import LogDamage
from coordinator.runtime.log.frame import Frame, FrameSearchIncomplete, decode_frame, verifying_frames_after
from coordinator.runtime.log.inspection import LogScan, scan_log
from coordinator.runtime.log.segment_files import LogPosition, segment_bases, segment_name
from snapshot import page_checksums
from snapshot.snapshots import (
    SnapshotManifest,
    list_snapshots,
    snapshot_directory,
    verify_snapshot,
)

STATE_FILES = ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm")
RECOVERY_DIRECTORY_PREFIX = "log-recovery-"


class RecoveryRefused(Exception):
    """Recovery cannot go on; the message is the one-line reason."""


# ---------------------------------------------------------------------- what a plan holds


@dataclass(frozen=True, slots=True)
class LostFrame:
    base_offset: int
    record_count: int
    leader_epoch: int
    segment: str
    byte_position: int
    records: tuple[LostRecord, ...]


@dataclass(frozen=True, slots=True)
class ReusedOffsets:
    """Offsets of one partition acknowledged before the recovery and handed out again after it."""

    topic_name: str
    topic_id: str  # hex
    partition: int
    first_offset: int  # the partition's next offset after the recovery
    end_offset: int  # exclusive: its next offset before, as far as known
    exists_after: bool  # False: the partition was created in the lost range and is gone
    known_from: str  # "state" (the state set aside) or "lost frames" (at least these)


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    coordinator_id: int
    directory: Path
    damage: LogDamage | None  # None: nothing to recover
    torn_tail_bytes: int  # cut by the next start anyway
    log_start_offset: int
    kept_end_offset: int  # records below it are kept: the damage's expected offset, where the leader change goes
    lost_end_offset: int  # exclusive: the log end known before (frames after the damage, state, snapshots)
    lost_record_count: int
    undecodable_offsets: tuple[tuple[int, int], ...]  # (first, last) ranges no verifying frame holds
    lost_frames: tuple[LostFrame, ...]
    lost_frames_complete: bool  # False: the search for verifying frames stopped at its budget
    damaged_segment: str
    damaged_segment_bytes: int
    damaged_segment_crc32: int  # of the whole file when planned: apply refuses if it changed
    prefix_bytes: int  # bytes of the damaged segment kept under its name; -1: none (the segment moves whole)
    moved_segments: tuple[str, ...]  # the damaged segment and every later one, oldest first
    snapshot: SnapshotManifest | None  # restored; None: the state is rebuilt from the log (which starts at 0)
    moved_snapshots: tuple[str, ...]  # ending past the damage: set aside (restored later, they would mix histories)
    state_files: tuple[str, ...]  # set aside
    reused: tuple[ReusedOffsets, ...]
    leader_epoch_after: int  # of the leader change the log continues with at kept_end_offset
    leader_node_id: int  # the node of the newest leader change seen (the next start writes its own)


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    plan: RecoveryPlan
    recovery_directory: Path  # where everything set aside now is, with report.json


@dataclass(frozen=True, slots=True)
class _StateFacts:
    """What the recovery needs from a state or snapshot file."""

    partitions: dict[int, tuple[str, bytes, int, int]]  # key -> (topic, topic id, partition, high watermark)
    files: dict[int, str]  # file id -> object key
    applied_offset: int
    leader_epoch: int


def _read_sqlite(path: Path, writable: bool) -> _StateFacts:
    """The partitions, files and position of a state or snapshot file.

    The state is opened read-write without create (the directory lock is held), as
    `diskless describe` does, so that a WAL is read and no -wal/-shm is left behind; a snapshot
    is a self-contained file, opened read-only.
    """
    flags = apsw.SQLITE_OPEN_READWRITE if writable else apsw.SQLITE_OPEN_READONLY
    connection = page_checksums.connect(path, flags)
    try:
        connection.execute("BEGIN")
        partitions = {
            key: (name, topic_id, partition, high_watermark)
            for key, topic_id, name, partition, high_watermark in connection.execute(
                "SELECT partition_key, topic_id, topic_name, partition, high_watermark FROM partitions"
            )
        }
        files = dict(connection.execute("SELECT file_id, object_key FROM files"))
        meta = dict(connection.execute("SELECT name, value FROM meta WHERE name IN ('applied_offset', 'leader_epoch')"))
        connection.execute("COMMIT")
        return _StateFacts(partitions, files, int(meta["applied_offset"]), int(meta.get("leader_epoch", 0)))
    finally:
        connection.close()


def _read_state(directory: Path) -> _StateFacts | None:
    """The coordinator's state as it is, None when missing or unreadable (names then come from elsewhere)."""
    state = directory / "state.sqlite"
    if not state.exists():
        return None
    try:
        return _read_sqlite(state, writable=True)
    except (apsw.Error, KeyError):
        return None


# ---------------------------------------------------------------------- planning


class _Snapshots:
    """The coordinator's snapshots, newest first, each verified (size and CRC-32) once when first needed."""

    def __init__(self, directory: Path) -> None:
        self._manifests = list_snapshots(directory)
        self._verified: dict[str, bool] = {}

    def newest(self, at_most: int | None, log_start: int) -> SnapshotManifest | None:
        """The newest that verifies and that the log continues: log start <= end (<= at_most)."""
        for manifest in self._manifests:
            end = manifest.snapshot_id.end_offset
            if end < log_start or (at_most is not None and end > at_most):
                continue
            name = str(manifest.snapshot_id)
            if name not in self._verified:
                self._verified[name] = verify_snapshot(manifest) is None
            if self._verified[name]:
                return manifest
        return None

    def newest_end(self) -> int:
        return max((m.snapshot_id.end_offset for m in self._manifests), default=-1)

    def newest_epoch(self) -> int:
        return max((m.snapshot_id.epoch for m in self._manifests), default=0)

    def past(self, offset: int) -> list[SnapshotManifest]:
        """Snapshots of a history past `offset`: after the recovery, offsets from there on hold other records."""
        return [m for m in self._manifests if m.snapshot_id.end_offset > offset]


def _holding(bases: list[int], offset: int) -> int:
    """The index of the segment a read from `offset` starts in."""
    return max(0, sum(1 for b in bases if b <= offset) - 1)


def _damage_to_recover(
    log_directory: Path, bases: list[int], snapshots: _Snapshots, state_applied_offset: int
) -> tuple[LogDamage | None, LogScan, SnapshotManifest | None]:
    """The first damage a start would meet, the scan that found it, and the snapshot to restore before it.

    A start replays from its state, a snapshot, or the log start, so the search starts at the
    newest snapshot that verifies. The snapshot chosen must end at or before the damage; when it is
    older, the log between it and where the search started must verify too, so the search goes
    back and looks again (each round starts at an earlier segment, so it ends). A log that verifies
    but ends before what the state or a snapshot holds lost its end: that is damage at its end.
    """
    log_start = bases[0]
    newest = snapshots.newest(None, log_start)
    scan_from = newest.snapshot_id.end_offset if newest is not None else log_start
    held = max(state_applied_offset, snapshots.newest_end())
    while True:
        scan = scan_log(log_directory, scan_from)
        damage = scan.damage or _end_lost(log_directory, bases, scan, held)
        if damage is None:
            return None, scan, None
        chosen = snapshots.newest(damage.expected_offset, log_start)
        replay_from = chosen.snapshot_id.end_offset if chosen is not None else log_start
        if _holding(bases, replay_from) >= _holding(bases, scan_from):
            return damage, scan, chosen
        scan_from = replay_from


def _end_lost(log_directory: Path, bases: list[int], scan: LogScan, held_offset: int) -> LogDamage | None:
    """Damage at the end of a log that verifies but ends before `held_offset` (what the state or a snapshot holds).

    A newest segment lost or cut short leaves it (and a recovery interrupted between cutting the log
    and setting the state aside): the shard refuses to load a state ahead of its log.
    """
    end = scan.position.end_offset
    if held_offset <= end:
        return None
    newest = log_directory / segment_name(bases[-1])
    size = newest.stat().st_size
    problem = (
        f"the log verifies but ends at log offset {end}, while the state or a snapshot holds records up to "
        f"{held_offset - 1}: offsets {end}..{held_offset - 1} were acknowledged and are missing from the log"
    )
    return LogDamage(newest.absolute(), size, size - scan.torn_tail_bytes, end, problem, 0, 0, -1, -1)


def _frames_after(log_directory: Path, bases: list[int], damage: LogDamage) -> Iterator[tuple[str, int, Frame]]:
    """(segment name, byte position, frame) of every frame after the damage that verifies with offsets >= it."""
    names = [segment_name(b) for b in bases]
    first = names.index(damage.segment_path.name)
    for index in range(first, len(names)):
        data = (log_directory / names[index]).read_bytes()
        start = damage.byte_position if index == first else 0
        for position, frame in verifying_frames_after(data, start, damage.expected_offset):
            yield names[index], position, frame


def _kept_frames(log_directory: Path, bases: list[int], from_offset: int, to_offset: int) -> Iterator[Frame]:
    """The frames of the kept log from `from_offset` to `to_offset` (verified by the scan that found the damage)."""
    expected = -1
    for base_offset in bases[_holding(bases, from_offset) :]:
        data = (log_directory / segment_name(base_offset)).read_bytes()
        position = 0
        while (decoded := decode_frame(data, position)) is not None:
            frame, position = decoded
            if frame.base_offset >= to_offset or (expected >= 0 and frame.base_offset != expected):
                return
            expected = frame.end_offset
            if frame.end_offset > from_offset:
                yield frame


@dataclass(slots=True)
class _Offsets:
    """Next offsets per partition key: after the recovery (snapshot + kept log) and before it (state, lost frames)."""

    after: dict[int, int] = field(default_factory=dict)
    before_state: dict[int, int] = field(default_factory=dict)
    before_frames: dict[int, int] = field(default_factory=dict)
    state_applied_offset: int = -1


def _replay_offsets(frames: Iterator[Frame], names: Names, next_offsets: dict[int, int]) -> None:
    """Moves `next_offsets` (partition key -> next offset) through frames, learning names as it goes."""
    for frame in frames:
        for record in records.decode_batch(frame.payload):
            found = kinds.find(record)
            if found is None:
                continue
            kind, body = found
            names.learn(kind.names_given(body))
            changes = kind.partition_changes(body)
            for created in changes.created:
                next_offsets[created.partition_key] = 0
            for key, next_offset in changes.next_offsets:
                next_offsets[key] = max(next_offsets.get(key, 0), next_offset)
            for topic_id in changes.deleted_topics:
                for key in [k for k, (_, t, _) in names.partitions.items() if t == topic_id]:
                    next_offsets.pop(key, None)


def _gather(
    directory: Path, bases: list[int], damage: LogDamage, snapshot: SnapshotManifest | None, state: _StateFacts | None
) -> tuple[Names, _Offsets]:
    names, offsets = Names(), _Offsets()
    if state is not None:
        offsets.state_applied_offset = state.applied_offset
        for key, (name, topic_id, partition, high_watermark) in state.partitions.items():
            names.partitions[key] = (name, topic_id, partition)
            offsets.before_state[key] = high_watermark
        names.files.update(state.files)
    if snapshot is not None:
        restored = _read_sqlite(snapshot.data_path, writable=False)
        for key, (name, topic_id, partition, high_watermark) in restored.partitions.items():
            names.partitions.setdefault(key, (name, topic_id, partition))
            offsets.after[key] = high_watermark
        for file_id, object_key in restored.files.items():
            names.files.setdefault(file_id, object_key)
    replay_from = snapshot.snapshot_id.end_offset if snapshot is not None else bases[0]
    kept = _kept_frames(directory / "log", bases, replay_from, damage.expected_offset)
    _replay_offsets(kept, names, offsets.after)
    return names, offsets


def _lost(
    log_directory: Path, bases: list[int], damage: LogDamage, names: Names, offsets: _Offsets
) -> tuple[list[LostFrame], bool]:
    """The frames after the damage that verify, described, and whether the search for them was complete."""
    complete = True
    try:
        # Two passes: names first (a partition created in a lost frame is named in later lost frames).
        _replay_offsets((f for _, _, f in _frames_after(log_directory, bases, damage)), names, offsets.before_frames)
        lost = [
            _lost_frame(segment, position, frame, names)
            for segment, position, frame in _frames_after(log_directory, bases, damage)
        ]
    except FrameSearchIncomplete:
        complete, lost = False, []
    return lost, complete


def _lost_frame(segment: str, position: int, frame: Frame, names: Names) -> LostFrame:
    described = tuple(describe_record(r, names) for r in records.decode_batch(frame.payload))
    return LostFrame(frame.base_offset, frame.record_count, frame.leader_epoch, segment, position, described)


def _reused(names: Names, offsets: _Offsets) -> list[ReusedOffsets]:
    reused = []
    for key in sorted(set(offsets.before_state) | set(offsets.before_frames)):
        from_state, from_frames = offsets.before_state.get(key, -1), offsets.before_frames.get(key, -1)
        end = max(from_state, from_frames)
        first = offsets.after.get(key, 0)
        if end <= first:
            continue
        name, topic_id, partition = names.partitions.get(key, (f"partition key {key} (name unknown)", b"", -1))
        known_from = "state" if from_state >= from_frames else "lost frames"
        reused.append(ReusedOffsets(name, topic_id.hex(), partition, first, end, key in offsets.after, known_from))
    return reused


def _undecodable(kept_end: int, lost_end: int, lost: list[LostFrame]) -> list[tuple[int, int]]:
    """The offset ranges in [kept_end, lost_end) that no verifying frame holds (the damaged frames' records)."""
    ranges, offset = [], kept_end
    for frame in sorted(lost, key=lambda f: f.base_offset):
        if frame.base_offset > offset:
            ranges.append((offset, frame.base_offset - 1))
        offset = max(offset, frame.base_offset + frame.record_count)
    if lost_end > offset:
        ranges.append((offset, lost_end - 1))
    return ranges


def plan_recovery(directory: Path, coordinator_id: int) -> RecoveryPlan:
    """What recovering the coordinator in `directory` would do and lose; reads only (the caller holds its lock).

    Raises RecoveryRefused when the state before the damage cannot be rebuilt.
    """
    log_directory = directory / "log"
    bases = segment_bases(log_directory)
    state_files = tuple(name for name in STATE_FILES if (directory / name).exists())
    if not bases:
        return _nothing_to_recover(coordinator_id, directory, LogScan(LogPosition(0, 0, 0), None, 0), state_files)
    snapshots = _Snapshots(snapshot_directory(directory))
    state = _read_state(directory)
    damage, scan, snapshot = _damage_to_recover(
        log_directory, bases, snapshots, state.applied_offset if state is not None else -1
    )
    if damage is None:
        _refuse_if_damaged_below(log_directory, bases, snapshots, coordinator_id)
        return _nothing_to_recover(coordinator_id, directory, scan, state_files)
    kept_end = damage.expected_offset
    if snapshot is None and bases[0] > 0:
        raise RecoveryRefused(
            f"coordinator {coordinator_id}: the log is damaged at log offset {kept_end} ({damage.segment_path}, byte "
            f"{damage.byte_position}), no snapshot that verifies ends at or before it, and the log starts at "
            f"{bases[0]}: the state before the damage cannot be rebuilt; nothing was changed"
        )
    names, offsets = _gather(directory, bases, damage, snapshot, state)
    lost, complete = _lost(log_directory, bases, damage, names, offsets)
    lost_end = max(
        kept_end, damage.following_end_offset, offsets.state_applied_offset, snapshots.newest_end(),
        *(f.base_offset + f.record_count for f in lost),
    )  # fmt: skip
    # The log goes on in an epoch above every one of the lost history: the next start's own epoch
    # (one above the log's last) then never repeats an epoch whose records were given up.
    epoch_after = 1 + max(
        scan.position.last_epoch, state.leader_epoch if state is not None else 0, snapshots.newest_epoch(),
        *(f.leader_epoch for f in lost),
    )  # fmt: skip
    segment_base = int(damage.segment_path.name.split(".")[0])
    keeps_prefix = damage.byte_position > 0 or segment_base == kept_end
    data = damage.segment_path.read_bytes()
    return RecoveryPlan(
        coordinator_id=coordinator_id, directory=directory, damage=damage, torn_tail_bytes=0,
        log_start_offset=bases[0], kept_end_offset=kept_end, lost_end_offset=lost_end,
        lost_record_count=lost_end - kept_end, undecodable_offsets=tuple(_undecodable(kept_end, lost_end, lost)),
        lost_frames=tuple(lost), lost_frames_complete=complete and damage.search_complete,
        damaged_segment=damage.segment_path.name, damaged_segment_bytes=len(data),
        damaged_segment_crc32=zlib.crc32(data), prefix_bytes=damage.byte_position if keeps_prefix else -1,
        moved_segments=tuple(segment_name(b) for b in bases if b >= segment_base), snapshot=snapshot,
        moved_snapshots=tuple(m.data_path.stem for m in snapshots.past(kept_end)), state_files=state_files,
        reused=tuple(_reused(names, offsets)), leader_epoch_after=epoch_after, leader_node_id=names.leader_node_id,
    )  # fmt: skip


def _nothing_to_recover(
    coordinator_id: int, directory: Path, scan: LogScan, state_files: tuple[str, ...]
) -> RecoveryPlan:
    end = scan.position.end_offset
    return RecoveryPlan(
        coordinator_id, directory, None, scan.torn_tail_bytes, scan.position.start_offset, end, end, 0, (), (), True,
        "", 0, 0, -1, (), None, (), state_files, (), 0, 0,
    )  # fmt: skip


def _refuse_if_damaged_below(log_directory: Path, bases: list[int], snapshots: _Snapshots, coordinator_id: int) -> None:
    """Damage below the newest snapshot is not for this command: a start from that snapshot never reads it."""
    newest = snapshots.newest(None, bases[0])
    if newest is None or _holding(bases, newest.snapshot_id.end_offset) == 0:
        return  # the search that found nothing started at the log start
    below = scan_log(log_directory, bases[0])
    if below.damage is not None:
        raise RecoveryRefused(
            f"coordinator {coordinator_id}: the log is damaged at log offset {below.damage.expected_offset} "
            f"({below.damage.segment_path}, byte {below.damage.byte_position}), below snapshot {newest.snapshot_id}, "
            "which verifies, and the log verifies from that snapshot on: no record needs to be given up. If a start "
            "fails there (its state is older than the snapshot), run `diskless snapshot restore` for this "
            "coordinator; the damaged segments go with the next snapshot's pruning. Nothing was changed"
        )
