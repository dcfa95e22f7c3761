"""Reading a metadata log without opening it for writing: what a start would find (operator commands, recovery)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.runtime.log.damage import CorruptLogError, LogDamage, find_damage
from coordinator.runtime.log.segment_files import LogPosition, segment_bases, segment_name, walk_frames


@dataclass(frozen=True, slots=True)
class LogScan:
    """A log read without opening it for writing: what a start would find."""

    position: LogPosition  # of the verified log: up to the damage when there is one
    damage: LogDamage | None
    torn_tail_bytes: int  # bytes at the end of the newest segment that a start would cut


def scan_log(directory: Path, from_offset: int | None = None) -> LogScan:
    """What a start would find in the log, changing nothing.

    Reads the newest segment (as an open does), or with `from_offset` every segment from the one
    holding it (as a replay from there does), checking that each continues the one before. A torn
    tail of the newest segment is reported (torn_tail_bytes), not cut; damage is reported, with the
    position ending where the verified log ends.
    """
    bases = segment_bases(directory)
    if not bases:
        return LogScan(LogPosition(0, 0, 0), None, 0)
    first_index = len(bases) - 1
    if from_offset is not None:
        first_index = max(0, sum(1 for b in bases if b <= from_offset) - 1)
    expected, last_epoch = bases[first_index], 0
    for index in range(first_index, len(bases)):
        path = directory / segment_name(bases[index])
        data = path.read_bytes()
        later = [directory / segment_name(b) for b in bases[index + 1 :]]
        if bases[index] != expected:  # the segment before it ends elsewhere: offsets missing or overlapping
            return LogScan(LogPosition(bases[0], expected, last_epoch), find_damage(path, data, 0, expected, later), 0)
        end_offset, epoch, position = walk_frames(data, bases[index])
        last_epoch = epoch or last_epoch
        if position < len(data):
            damage = find_damage(path, data, position, end_offset, later)
            if later or not damage.is_torn_tail:
                return LogScan(LogPosition(bases[0], end_offset, last_epoch), damage, 0)
            torn_bytes = len(data) - position
            return LogScan(_with_epoch(directory, bases, end_offset, last_epoch), None, torn_bytes)
        expected = end_offset
    return LogScan(_with_epoch(directory, bases, expected, last_epoch), None, 0)


def _with_epoch(directory: Path, bases: list[int], end_offset: int, last_epoch: int) -> LogPosition:
    """The position, with the epoch of the newest frame found walking back from the newest segment if needed."""
    for base_offset in reversed(bases[:-1]):
        if last_epoch:
            break
        last_epoch = walk_frames((directory / segment_name(base_offset)).read_bytes(), base_offset)[1]
    return LogPosition(bases[0], end_offset, last_epoch)


def scan_position(directory: Path) -> LogPosition:
    """The position a start would find (a torn tail not counted), for inspection; raises CorruptLogError on damage."""
    scan = scan_log(directory)
    if scan.damage is not None:
        raise CorruptLogError(scan.damage.describe(), scan.damage)
    return scan.position
