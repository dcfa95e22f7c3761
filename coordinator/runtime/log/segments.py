"""The metadata log on disk: `<dir>/<base offset, 20 digits>.log` segment files.

Appends go to the newest segment with one write and one fdatasync per group
commit. At open, the newest segment is read to its end; older segments are
checked frame by frame when read.

A frame that does not verify (or verifies but does not continue the offsets)
is one of two things, told apart by what comes after it:
- a torn tail: nothing after it verifies. A crash during an unacknowledged
  group write leaves one; it is the only thing a start cuts.
- damage inside the log: frames after it still verify, so acknowledged
  records follow it. Nothing is cut or written: the log refuses to open
  (CorruptLogError, with where, what, and the operator command that recovers
  it: `diskless log recover`, coordinator/cli/log_recovery/apply.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from bisect import bisect_left
from collections.abc import Callable, Iterator
from pathlib import Path

from coordinator.base.invariants import InvariantViolation, check_invariant
from coordinator.runtime.log.damage import CorruptLogError, find_damage
from coordinator.runtime.log.frame import (
    HEADER_BYTES,
    Frame,
    decode_frame,
    encode_frame,
)
from coordinator.runtime.log.segment_files import SEGMENT_SUFFIX, LogPosition, segment_bases, segment_name, walk_frames
from snapshot.durable_files import flush_and_fsync, fsync_directory

log = logging.getLogger(__name__)
# Named here too: the log's callers and tests take them from the module of the log.
__all__ = ["SEGMENT_SUFFIX", "CorruptLogError", "LogPosition", "MetadataLog", "segment_name"]


class MetadataLog:
    """Not thread-safe: one writer thread at a time (the coordinator's flush executor)."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.flush_count = 0
        self.appended_bytes = 0  # since open: drives the snapshot size trigger
        directory.mkdir(parents=True, exist_ok=True)
        self._segments = segment_bases(directory)
        if not self._segments:
            self._segments = [0]
            (directory / segment_name(0)).touch()
            fsync_directory(directory)
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

    def size_bytes(self) -> int:
        """Bytes of every segment on disk (read from any thread: a segment pruned meanwhile counts as gone)."""
        total = self._active_size
        for base_offset in self._segments[:-1]:
            with contextlib.suppress(FileNotFoundError):
                total += (self.directory / segment_name(base_offset)).stat().st_size
        return total

    def _active_path(self) -> Path:
        return self.directory / segment_name(self._segments[-1])

    # ------------------------------------------------------------------ open

    def _recover_tail(self) -> tuple[int, int, int]:
        """Reads the newest segment, cutting a torn tail: (end offset, last epoch, size).

        Raises CorruptLogError, changing nothing, when a frame after the bad one verifies.
        """
        path = self._active_path()
        data = path.read_bytes()
        end_offset, last_epoch, position = walk_frames(data, self._segments[-1])
        if position < len(data):
            damage = find_damage(path, data, position, end_offset)
            if not damage.is_torn_tail:
                raise CorruptLogError(damage.describe(), damage)
            log.warning(
                "metadata log %s: torn tail at byte %d of %d (%s; no frame after it verifies): truncating %d bytes",
                path, position, len(data), damage.problem, len(data) - position,
            )  # fmt: skip
            with open(path, "r+b") as file:
                file.truncate(position)
                flush_and_fsync(file)
        if last_epoch == 0 and len(self._segments) > 1:
            last_epoch = self._last_epoch_of(self._segments[-2], self._segments[-1:])
        return end_offset, last_epoch, position

    def _last_epoch_of(self, base_offset: int, later: list[int]) -> int:
        epoch = 0
        for _, frame in self._frames_of(base_offset, later):
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
            # A short write (a disk filling up) is followed by the rest, whose write then raises the real
            # error (ENOSPC, EIO), so the coordinator reports what happened, not a broken invariant.
            view = memoryview(frames)
            while view:
                view = view[os.write(self._fd, view) :]
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
            fsync_directory(self.directory)
            self._segments = self._segments[1:]
            deleted.append(base_offset)
            if after_each is not None:
                after_each()
        return deleted

    def truncate_to(self, offset: int) -> None:
        """Cuts the log so that it ends at `offset`, a frame boundary between the log start and end (KIP-101).

        Segments after the one keeping `offset`'s boundary go newest first, the directory fsynced after
        each, and only then is the kept segment cut and fsynced: a crash at any point leaves a
        contiguous prefix of the log, never a hole, and the caller truncates again after it restarts.
        """
        start = self._segments[0]
        check_invariant(
            start <= offset <= self._end_offset, f"truncate to {offset} outside the log {start}..{self._end_offset}"
        )
        if offset == self._end_offset:
            return
        # The last segment with a record below `offset`, or the first one when the log is cut to its start; a
        # segment starting exactly at `offset` goes, and the one before it (ending there) becomes the active one.
        keep = max(0, bisect_left(self._segments, offset) - 1)
        cut_position, last_epoch = self._boundary_position(keep, offset)  # checked before anything changes
        if last_epoch == 0 and keep > 0:
            last_epoch = self._last_epoch_of(self._segments[keep - 1], self._segments[keep:])
        removed_records, removed_segments = self._end_offset - offset, len(self._segments) - keep - 1
        os.close(self._fd)
        self._fd = -1
        while len(self._segments) > keep + 1:
            (self.directory / segment_name(self._segments[-1])).unlink()
            fsync_directory(self.directory)
            self._segments = self._segments[:-1]  # a new list: a read under way goes on over the one it started with
        path = self._active_path()
        cut_bytes = path.stat().st_size - cut_position
        with open(path, "r+b") as file:
            file.truncate(cut_position)
            flush_and_fsync(file)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._active_size = cut_position
        self._end_offset, self._last_epoch = offset, last_epoch
        log.info(
            "metadata log %s: truncated to offset %d: %d records removed (%d segments deleted, %d bytes cut from %s)",
            self.directory, offset, removed_records, removed_segments, cut_bytes, path.name,
        )  # fmt: skip

    def _boundary_position(self, index: int, offset: int) -> tuple[int, int]:
        """Where `offset` starts in segment `index`: (byte position, epoch of the last frame before it there, or 0)."""
        base_offset = self._segments[index]
        if offset == base_offset:
            return 0, 0
        for position, frame in self._frames_of(base_offset, self._segments[index + 1 :]):
            check_invariant(
                frame.end_offset <= offset,
                f"truncate to {offset}, inside the log frame {frame.base_offset}..{frame.end_offset - 1}",
            )
            if frame.end_offset == offset:
                return position + HEADER_BYTES + len(frame.payload), frame.leader_epoch
        # Only a segment cut short at a frame boundary ends before the next one starts.
        raise InvariantViolation(f"truncate to {offset}: the frames of segment {base_offset} end before it")

    def replace_with_empty(self, start_offset: int) -> None:
        """Deletes every segment and leaves an empty log starting and ending at `start_offset` (a snapshot installed).

        Segments from `start_offset` on go first, newest first; then the new empty segment is created
        and the directory fsynced; then the older segments go, newest first. A crash in that last step
        leaves older segments before the empty one: an open sees `end_offset == start_offset`, but
        `start_offset` and `last_epoch` still those of the older segments, whose frames do not continue
        into the empty one. The caller reads from `start_offset` only (its snapshot's offset) and
        finishes the job by calling this again or `delete_segments_below(start_offset)`.
        """
        check_invariant(start_offset >= 0, f"an empty log cannot start at {start_offset}")
        os.close(self._fd)
        self._fd = -1
        deleted = 0
        while self._segments and self._segments[-1] >= start_offset:
            (self.directory / segment_name(self._segments[-1])).unlink()
            fsync_directory(self.directory)
            self._segments, deleted = self._segments[:-1], deleted + 1
        older = self._segments
        path = self.directory / segment_name(start_offset)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        fsync_directory(self.directory)
        self._segments = [*older, start_offset]
        for base_offset in reversed(older):
            (self.directory / segment_name(base_offset)).unlink()
            fsync_directory(self.directory)
            self._segments = [b for b in self._segments if b != base_offset]
        self._end_offset, self._last_epoch, self._active_size = start_offset, 0, 0
        log.info(
            "metadata log %s: replaced by an empty log starting at offset %d (%d segments deleted)",
            self.directory, start_offset, deleted + len(older),
        )  # fmt: skip

    def _roll(self) -> None:
        os.close(self._fd)
        self._segments.append(self._end_offset)
        self._fd = os.open(self._active_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        fsync_directory(self.directory)
        self._active_size = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ------------------------------------------------------------------ read

    def read(self, from_offset: int) -> Iterator[Frame]:
        """Frames from `from_offset` (a frame boundary) to the end, verified as they are read.

        Raises CorruptLogError where the log is damaged: a frame that does not verify in an older
        segment, or frames that verify but do not continue the offsets (a missing segment, a
        segment cut short, a frame out of place).
        """
        check_invariant(
            self._segments[0] <= from_offset <= self._end_offset,
            f"read from {from_offset} outside the log {self._segments[0]}..{self._end_offset}",
        )
        segments = self._segments  # a prune replaces the list; this read goes on over the one it started with
        expected = from_offset
        for index, base_offset in enumerate(segments):
            following = segments[index + 1] if index + 1 < len(segments) else None
            if following is not None and following <= from_offset:
                continue
            for position, frame in self._frames_of(base_offset, segments[index + 1 :]):
                if frame.end_offset <= from_offset:
                    continue
                if frame.base_offset != expected:
                    check_invariant(
                        expected != from_offset or frame.base_offset > from_offset,
                        f"read from {from_offset}, inside the log frame {frame.base_offset}..{frame.end_offset - 1}",
                    )
                    path = self.directory / segment_name(base_offset)
                    later = [self.directory / segment_name(b) for b in segments[index + 1 :]]
                    damage = find_damage(path, path.read_bytes(), position, expected, later)
                    raise CorruptLogError(damage.describe(), damage)
                expected = frame.end_offset
                if expected > self._end_offset:
                    return
                yield frame
        if segments[-1] == self._segments[-1] and segments[-1] <= expected < self._end_offset:
            self._raise_cut_short(segments[-1], expected)

    def _raise_cut_short(self, base_offset: int, expected: int) -> None:
        """The newest segment stops verifying before the log end it had when written: damaged since it was opened
        (a read would otherwise end early, silently, and a follower fetching there would never catch up)."""
        path = self.directory / segment_name(base_offset)
        data = path.read_bytes()
        _, _, position = walk_frames(data, base_offset)
        damage = find_damage(path, data, position, expected)
        raise CorruptLogError(damage.describe(), damage)

    def read_frame_bytes(self, from_offset: int, max_bytes: int) -> bytes:
        """The encoded frames from `from_offset` (a frame boundary), up to `max_bytes` but at least one frame.

        What a leader sends a follower. The frames are verified as `read` verifies them and encoded
        again, which gives the bytes on disk: a frame's encoding is a function of its fields, and
        its CRC matched them. Empty at the end of the log.
        """
        chunks: list[bytes] = []
        total = 0
        for frame in self.read(from_offset):
            encoded = encode_frame(frame.base_offset, frame.leader_epoch, frame.record_count, frame.payload)
            if chunks and total + len(encoded) > max_bytes:
                break
            chunks.append(encoded)
            total += len(encoded)
        return b"".join(chunks)

    def _frames_of(self, base_offset: int, later: list[int]) -> Iterator[tuple[int, Frame]]:
        """The frames of one segment with their byte positions; `later`: the bases of the segments after it."""
        path = self.directory / segment_name(base_offset)
        data = path.read_bytes()
        position, expected = 0, base_offset
        while position < len(data):
            decoded = decode_frame(data, position)
            if decoded is None:
                if not later:
                    return  # the newest segment: bytes written after open by a failed append are not log
                damage = find_damage(path, data, position, expected, [self.directory / segment_name(b) for b in later])
                raise CorruptLogError(damage.describe(), damage)
            frame, following = decoded
            yield position, frame
            position, expected = following, frame.end_offset
