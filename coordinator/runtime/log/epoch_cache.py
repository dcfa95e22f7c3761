"""The leader-epoch checkpoint (Kafka's LeaderEpochFileCache, KIP-101/KIP-279): epoch -> start offset.

A follower asks the leader for the end offset of its last epoch and truncates its log there,
never blindly to its high watermark (DESIGN §6a). The entries are strictly increasing in both
epoch and start offset, and persisted in `<directory>/leader-epoch-checkpoint`:

    0                   format version
    2                   entry count
    3 0                 epoch, start offset
    5 120
    crc 1a2b3c4d        CRC-32 of every line before this one

Kafka's format, with a checksum line added (STYLE §2.11); a file that does not parse or verify
is rebuilt from the log's frames, which carry their epochs.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Protocol, final

from coordinator.base.invariants import check_invariant
from coordinator.runtime.log.frame import Frame
from snapshot.durable_files import part_path, write_durably

log = logging.getLogger(__name__)
CHECKPOINT_NAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LogPositionView(Protocol):
    """The part of a log position the cache reads."""

    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def last_epoch(self) -> int: ...


class EpochSource(Protocol):
    """The log as the cache reads it (MetadataLog): a protocol, since the log module ranks above this one."""

    def position(self) -> LogPositionView: ...
    def read(self, from_offset: int) -> Iterator[Frame]: ...


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int  # of the epoch's first record


@final
@dataclass(slots=True, eq=False)
class LeaderEpochCache:
    """Not thread-safe: called by the thread that writes the log."""

    path: Path
    _entries: list[EpochEntry]
    # Opened from a checkpoint that was unreadable or behind the log, rebuilt from the log's frames (a repair the
    # coordinator counts); False for one that was right, or absent (a new coordinator's).
    rebuilt: bool = False

    @classmethod
    def open(cls, directory: Path, metadata_log: EpochSource) -> LeaderEpochCache:
        """Reads the checkpoint in `directory`, rebuilt from `metadata_log` when missing, unreadable or stale."""
        path = directory / CHECKPOINT_NAME
        part_path(path).unlink(missing_ok=True)  # a crash during a write left it; the old file is whole
        position = metadata_log.position()
        existed = path.exists()
        stored = _read_checkpoint(path)
        # The log was cut after the checkpoint was written (a truncation whose checkpoint write a crash lost).
        entries = [e for e in stored if e.start_offset < position.end_offset] if stored is not None else None
        log_epoch = position.last_epoch if position.end_offset > position.start_offset else UNDEFINED_EPOCH
        cached_epoch = entries[-1].epoch if entries else UNDEFINED_EPOCH
        if entries is None or cached_epoch != log_epoch:
            # Missing, unreadable, or behind the log (frames of a new epoch reached the log, their entry did not).
            if stored is not None:
                log.info("%s: latest epoch %d, the log's %d: rebuilding it from the log", path, cached_epoch, log_epoch)
            entries = _scan(metadata_log, position.start_offset)
        cache = cls(path, entries, rebuilt=existed and entries != stored)
        if entries != stored:
            cache._write()
        return cache

    # ------------------------------------------------------------------ facts

    @property
    def latest_epoch(self) -> int:
        """The newest epoch known, UNDEFINED_EPOCH (-1) when none is."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, the start offset of the next known epoch or `log_end_offset`).

        Kafka's endOffsetFor, except at the two ends: an epoch above every known one gets the latest
        epoch and the log end (this replica holds nothing newer), and one below every known epoch
        gets (UNDEFINED_EPOCH, UNDEFINED_OFFSET), where Kafka answers the first epoch's start offset.
        """
        floor_index = -1
        for index, entry in enumerate(self._entries):
            if entry.epoch > epoch:
                break
            floor_index = index
        if floor_index < 0:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if floor_index + 1 < len(self._entries):
            return self._entries[floor_index].epoch, self._entries[floor_index + 1].start_offset
        return self._entries[floor_index].epoch, log_end_offset

    # ------------------------------------------------------------------ changes (each written before returning)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Records that `epoch` starts at `start_offset`; nothing when it is the latest epoch already."""
        if _assign(self._entries, epoch, start_offset):
            self._write()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drops the entries starting at or after `end_offset`: the log was truncated there."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            log.info("%s: truncated to offset %d: epochs %s dropped", self.path, end_offset, self._dropped(kept))
            self._entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drops the entries wholly below `start_offset` (the log start moved up); the one holding it starts there."""
        below = [e for e in self._entries if e.start_offset <= start_offset]
        if not below or below == [EpochEntry(below[-1].epoch, start_offset)]:
            return
        self._entries = [EpochEntry(below[-1].epoch, start_offset), *self._entries[len(below) :]]
        self._write()

    def _dropped(self, kept: list[EpochEntry]) -> list[int]:
        return [e.epoch for e in self._entries if e not in kept]

    def _write(self) -> None:
        write_durably(self.path, _encode(self._entries))


def _assign(entries: list[EpochEntry], epoch: int, start_offset: int) -> bool:
    """Adds `epoch` at `start_offset` to `entries`; False when it is the latest epoch already."""
    check_invariant(epoch >= 0 and start_offset >= 0, f"epoch {epoch} assigned at offset {start_offset}")
    if not entries:
        entries.append(EpochEntry(epoch, start_offset))
        return True
    latest = entries[-1]
    check_invariant(
        epoch >= latest.epoch and start_offset >= latest.start_offset,
        f"epoch {epoch} at offset {start_offset} goes back from epoch {latest.epoch} at {latest.start_offset}",
    )
    if epoch == latest.epoch:
        return False
    if start_offset == latest.start_offset:
        # The previous epoch never wrote a record (a leader elected again before appending): Kafka drops it too.
        entries[-1] = EpochEntry(epoch, start_offset)
    else:
        entries.append(EpochEntry(epoch, start_offset))
    return True


def _scan(metadata_log: EpochSource, start_offset: int) -> list[EpochEntry]:
    """The entries of the log's frames from `start_offset`: where each epoch's first frame starts."""
    entries: list[EpochEntry] = []
    for frame in metadata_log.read(start_offset):
        if not entries or entries[-1].epoch != frame.leader_epoch:
            _assign(entries, frame.leader_epoch, frame.base_offset)
    return entries


def _encode(entries: list[EpochEntry]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries)), *(f"{e.epoch} {e.start_offset}" for e in entries)]
    body = "".join(f"{line}\n" for line in lines).encode()
    return body + f"crc {zlib.crc32(body):08x}\n".encode()


def _read_checkpoint(path: Path) -> list[EpochEntry] | None:
    """The entries stored in `path`, or None when it is missing or does not parse, verify and increase."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        entries = _decode(content)
    except ValueError as error:
        log.warning("%s: unreadable (%s): rebuilding it from the log", path, error)
        return None
    return entries


def _decode(content: bytes) -> list[EpochEntry]:
    body, separator, trailer = content.rpartition(b"crc ")
    if not separator or trailer.strip() != f"{zlib.crc32(body):08x}".encode():
        raise ValueError("its checksum line is missing or does not match")
    lines = body.decode().splitlines()
    if len(lines) < 2 or lines[0] != str(CHECKPOINT_VERSION):
        raise ValueError(f"version line {lines[0]!r} is not {CHECKPOINT_VERSION}" if lines else "empty")
    if int(lines[1]) != len(lines) - 2:
        raise ValueError(f"says {lines[1]} entries and holds {len(lines) - 2}")
    entries = []
    for line in lines[2:]:
        epoch, start_offset = (int(field) for field in line.split(" "))
        entries.append(EpochEntry(epoch, start_offset))
    for earlier, later in pairwise(entries):
        if not (earlier.epoch < later.epoch and earlier.start_offset < later.start_offset):
            raise ValueError(f"entries {earlier} and {later} do not increase")
    if any(e.epoch < 0 or e.start_offset < 0 for e in entries):
        raise ValueError("a negative epoch or offset")
    return entries
