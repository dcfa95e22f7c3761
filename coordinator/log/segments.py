"""The metadata log on disk: `<dir>/<base offset, 20 digits>.log` segment files.

Appends go to the newest segment with one write and one fdatasync per group
commit. At open, the newest segment is read to its end and a torn or corrupt
tail is truncated (a crash mid-write leaves one); older segments are checked
frame by frame when read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from coordinator.invariants import check_invariant
from coordinator.log.frame import Frame, decode_frame

log = logging.getLogger(__name__)
SEGMENT_SUFFIX = ".log"


class CorruptLogError(Exception):
    """A frame inside the log (not at its tail) does not verify: the log cannot be trusted."""


@dataclass(frozen=True, slots=True)
class LogPosition:
    start_offset: int
    end_offset: int  # exclusive: the next offset to write
    last_epoch: int  # epoch of the last frame, 0 if none


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MetadataLog:
    """Not thread-safe: one writer thread at a time (the coordinator's flush executor)."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.flush_count = 0
        self.appended_bytes = 0  # since open: drives the snapshot size trigger
        directory.mkdir(parents=True, exist_ok=True)
        self._segments = sorted(int(p.name[: -len(SEGMENT_SUFFIX)]) for p in directory.glob(f"*{SEGMENT_SUFFIX}"))
        if not self._segments:
            self._segments = [0]
            (directory / segment_name(0)).touch()
            _fsync_directory(directory)
        self._end_offset, self._last_epoch, size = self._recover_tail()
        self._fd = os.open(self._active_path(), os.O_WRONLY | os.O_APPEND)
        self._active_size = size

    # ------------------------------------------------------------------ facts

    def position(self) -> LogPosition:
        return LogPosition(self._segments[0], self._end_offset, self._last_epoch)

    @property
    def end_offset(self) -> int:
        return self._end_offset

    def bytes_after(self, offset: int) -> int:
        """Bytes of the segments holding records at or after `offset` (an upper bound of the log after it)."""
        total = 0
        for index, base_offset in enumerate(self._segments[:-1]):
            if self._segments[index + 1] > offset:
                total += (self.directory / segment_name(base_offset)).stat().st_size
        return total + self._active_size

    def _active_path(self) -> Path:
        return self.directory / segment_name(self._segments[-1])

    # ------------------------------------------------------------------ open

    def _recover_tail(self) -> tuple[int, int, int]:
        """Reads the newest segment, truncating a torn or corrupt tail: (end offset, last epoch, size)."""
        path = self._active_path()
        data = path.read_bytes()
        end_offset, last_epoch, position = self._segments[-1], 0, 0
        while position < len(data):
            decoded = decode_frame(data, position)
            if decoded is None or decoded[0].base_offset != end_offset:
                log.warning(
                    "metadata log %s: torn or corrupt tail at byte %d of %d, truncating", path, position, len(data)
                )
                with open(path, "r+b") as file:
                    file.truncate(position)
                    file.flush()
                    os.fsync(file.fileno())
                break
            frame, position = decoded
            end_offset, last_epoch = frame.end_offset, frame.leader_epoch
        if last_epoch == 0 and len(self._segments) > 1:
            last_epoch = self._last_epoch_of(self._segments[-2])
        return end_offset, last_epoch, position

    def _last_epoch_of(self, base_offset: int) -> int:
        epoch = 0
        for frame in self._frames_of(base_offset, base_offset):
            epoch = frame.leader_epoch
        return epoch

    # ------------------------------------------------------------------ write

    def append(self, frames: bytes, end_offset: int, last_epoch: int) -> None:
        """Writes encoded frames ending at `end_offset` and makes them durable (one fdatasync).

        On failure the segment is cut back to its previous end, so the log
        holds exactly what was durable before the call.
        """
        check_invariant(end_offset >= self._end_offset, f"log end goes back: {end_offset} < {self._end_offset}")
        if self._active_size >= self.segment_bytes:
            self._roll()
        try:
            written = os.write(self._fd, frames)
            check_invariant(written == len(frames), f"short write to the metadata log: {written} of {len(frames)}")
            os.fdatasync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, self._active_size)
            os.fsync(self._fd)
            raise
        self.flush_count += 1
        self.appended_bytes += len(frames)
        self._active_size += len(frames)
        self._end_offset = end_offset
        self._last_epoch = last_epoch

    def delete_segments_below(self, offset: int, after_each: Callable[[], None] | None = None) -> list[int]:
        """Deletes segments wholly below `offset`, oldest first; returns their base offsets.

        The active segment always stays. The directory is fsynced after each
        deletion so that a crash leaves a contiguous suffix of the log, never
        a hole. `after_each` is a test's fault hook.
        """
        deleted = []
        while len(self._segments) > 1 and self._segments[1] <= offset:
            base_offset = self._segments[0]
            (self.directory / segment_name(base_offset)).unlink()
            _fsync_directory(self.directory)
            self._segments = self._segments[1:]
            deleted.append(base_offset)
            if after_each is not None:
                after_each()
        return deleted

    def _roll(self) -> None:
        os.close(self._fd)
        self._segments.append(self._end_offset)
        self._fd = os.open(self._active_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        _fsync_directory(self.directory)
        self._active_size = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ------------------------------------------------------------------ read

    def read(self, from_offset: int) -> Iterator[Frame]:
        """Frames from `from_offset` (a frame boundary) to the end, verified as they are read."""
        check_invariant(
            self._segments[0] <= from_offset <= self._end_offset,
            f"read from {from_offset} outside the log {self._segments[0]}..{self._end_offset}",
        )
        expected = from_offset
        for index, base_offset in enumerate(self._segments):
            following = self._segments[index + 1] if index + 1 < len(self._segments) else None
            if following is not None and following <= from_offset:
                continue
            for frame in self._frames_of(base_offset, from_offset):
                if frame.end_offset <= from_offset:
                    continue
                if frame.base_offset > expected:
                    # Every frame verifies, but offsets are missing: a lost segment or a segment cut short.
                    raise CorruptLogError(
                        f"{self.directory / segment_name(base_offset)}: frame at offset {frame.base_offset} where "
                        f"{expected} was expected: offsets {expected}..{frame.base_offset - 1} are missing"
                    )
                check_invariant(
                    frame.base_offset == expected,
                    f"log frame at {frame.base_offset} where {expected} was expected (from {from_offset})",
                )
                expected = frame.end_offset
                if expected > self._end_offset:
                    return
                yield frame

    def _frames_of(self, base_offset: int, from_offset: int) -> Iterator[Frame]:
        path = self.directory / segment_name(base_offset)
        data = path.read_bytes()
        position = 0
        while position < len(data):
            decoded = decode_frame(data, position)
            if decoded is None:
                if base_offset == self._segments[-1]:
                    return  # bytes written after open by a failed append are not log
                raise CorruptLogError(f"{path}: frame at byte {position} does not verify")
            frame, position = decoded
            yield frame


def scan_position(directory: Path) -> LogPosition:
    """The position of a log on disk without opening it for writing (no tail truncation): for inspection."""
    bases = sorted(int(p.name[: -len(SEGMENT_SUFFIX)]) for p in directory.glob(f"*{SEGMENT_SUFFIX}"))
    if not bases:
        return LogPosition(0, 0, 0)
    end_offset, last_epoch = bases[-1], 0
    for base_offset in reversed(bases):
        data = (directory / segment_name(base_offset)).read_bytes()
        position, segment_end = 0, base_offset
        while (decoded := decode_frame(data, position)) is not None and decoded[0].base_offset == segment_end:
            frame, position = decoded
            segment_end, last_epoch = frame.end_offset, frame.leader_epoch
        if base_offset == bases[-1]:
            end_offset = segment_end
        if last_epoch:
            break
    return LogPosition(bases[0], end_offset, last_epoch)
