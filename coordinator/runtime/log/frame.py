"""One frame of the metadata log: a header and one operation's records.

length        u32  bytes after this field (header rest + payload)
crc           u32  zlib CRC-32 of everything after this field
base_offset   i64  offset of the frame's first record
leader_epoch  i32  epoch of the leader that wrote it
record_count  i32  records in the payload (offsets base..base+count-1)
payload            protos.records.RecordBatch
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

_LENGTH = struct.Struct("<I")
_BODY_HEADER = struct.Struct("<qii")
HEADER_BYTES = _LENGTH.size + 4 + _BODY_HEADER.size
FRAME_MAX_BYTES = 256 * 1024 * 1024  # a length above this is a torn or corrupt header


@dataclass(frozen=True, slots=True)
class Frame:
    base_offset: int
    leader_epoch: int
    record_count: int
    payload: bytes

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.record_count


def encode_frame(base_offset: int, leader_epoch: int, record_count: int, payload: bytes) -> bytes:
    body = _BODY_HEADER.pack(base_offset, leader_epoch, record_count) + payload
    return _LENGTH.pack(len(body) + 4) + struct.pack("<I", zlib.crc32(body)) + body


def decode_frame(buffer: bytes | memoryview, position: int) -> tuple[Frame, int] | None:
    """The frame at `position` and the position after it, or None if it is torn or corrupt."""
    if position + HEADER_BYTES > len(buffer):
        return None
    (length,) = _LENGTH.unpack_from(buffer, position)
    end = position + 4 + length
    if length < 4 + _BODY_HEADER.size or length > FRAME_MAX_BYTES or end > len(buffer):
        return None
    (crc,) = struct.unpack_from("<I", buffer, position + 4)
    body = bytes(buffer[position + 8 : end])
    if zlib.crc32(body) != crc:
        return None
    base_offset, leader_epoch, record_count = _BODY_HEADER.unpack_from(body, 0)
    if base_offset < 0 or record_count <= 0:
        return None
    return Frame(base_offset, leader_epoch, record_count, body[_BODY_HEADER.size :]), end


# ---------------------------------------------------------------------- finding frames after damage
#
# At open a frame that does not verify is either a torn tail (a crash during an unacknowledged write:
# nothing valid after it) or damage inside the log (valid frames after it, acknowledged records at
# risk). Telling them apart means finding any frame that verifies after the bad one, anywhere in a
# segment of up to 64 MiB, which rules out trying decode_frame at every byte in Python.
#
# Cost bounds, for R bytes after the bad frame:
# - frames that follow each other are walked from one to the next (one CRC pass over their bytes);
# - where that walk breaks, candidate headers are found by one C-speed regex pass over the bytes
#   (anchored on the payload's first byte, 0x0a: a RecordBatch starts with its field 1), measured at
#   about 0.1-0.2 s for 64 MiB; a candidate must have a plausible length that fits the segment, a base
#   offset >= the one expected at the damage, a positive record count and epoch, and a payload that
#   parses exactly as RecordBatch entries to its last byte; only then is its CRC computed;
# - the CRC bytes spent on candidates that still fail it are capped (SEARCH_FAILED_CRC_BYTES_MAX):
#   past it the search stops as incomplete, and the caller must refuse rather than guess "torn tail".
#   Real data meets the cap only if built to (a frame header hidden in an object key).

SEARCH_FAILED_CRC_BYTES_MAX = 256 * 1024 * 1024  # about 0.2 s of CRC-32
_HEADER = struct.Struct("<IIqii")
_PAYLOAD_FIRST_BYTE = 0x0A  # RecordBatch.records is field 1, length-delimited: tag 0x0a
# The byte after a candidate header is 0x0a; looking back from it (at fixed distances): the length's top
# byte <= 0x10 (FRAME_MAX_BYTES), the base offset's, epoch's and record count's top bytes >= 0.
_CANDIDATE = re.compile(rb"\x0a(?<=[\x00-\x10][\s\S]{11}[\x00-\x7f][\s\S]{3}[\x00-\x7f][\s\S]{3}[\x00-\x7f]\x0a)")


class FrameSearchIncomplete(Exception):
    """The search for verifying frames spent its budget on candidates that did not verify."""

    def __init__(self, position: int) -> None:
        super().__init__(f"search for verifying frames stopped at byte {position}")
        self.position = position


def frame_problem(buffer: bytes | memoryview, position: int, expected_offset: int) -> str:
    """Why the bytes at `position` are not the frame holding `expected_offset`, in an operator's words."""
    remaining = len(buffer) - position
    if remaining < HEADER_BYTES:
        return f"only {remaining} bytes remain there, less than a frame header ({HEADER_BYTES} bytes)"
    (length,) = _LENGTH.unpack_from(buffer, position)
    if length < 4 + _BODY_HEADER.size or length > FRAME_MAX_BYTES:
        return f"its length field says {length} bytes, which no frame has"
    if length > remaining - 4:
        return f"its length field says {length} bytes, but only {remaining - 4} follow it"
    decoded = decode_frame(buffer, position)
    if decoded is None:
        (crc,) = struct.unpack_from("<I", buffer, position + 4)
        computed = zlib.crc32(buffer[position + 8 : position + 4 + length])
        if computed != crc:
            return f"its CRC-32 {computed:08x} does not match the stored {crc:08x} (a {length + 4}-byte frame)"
        return "it verifies but holds a negative offset or no record"
    frame = decoded[0]
    if frame.base_offset > expected_offset:
        missing = f"offsets {expected_offset}..{frame.base_offset - 1} are missing"
        return f"it verifies but holds log offsets {frame.base_offset}..{frame.end_offset - 1}: {missing}"
    return f"it verifies but holds log offsets {frame.base_offset}..{frame.end_offset - 1}, already in the log"


def _payload_tiles(buffer: bytes | memoryview, start: int, end: int) -> bool:
    """Whether buffer[start:end] parses exactly as RecordBatch entries (tag 0x0a, varint length, bytes).

    Not compared with the record count: a frame's count is its offsets, which the format does not tie
    to the number of entries.
    """
    position = start
    while position < end:
        if buffer[position] != _PAYLOAD_FIRST_BYTE:
            return False
        size, shift, position = 0, 0, position + 1
        while True:  # the entry's length, a varint of at most 5 bytes
            if position >= end or shift > 28:
                return False
            byte = buffer[position]
            size |= (byte & 0x7F) << shift
            position, shift = position + 1, shift + 7
            if not byte & 0x80:
                break
        position += size
    return position == end


def _next_candidate(buffer: bytes, start: int, min_base_offset: int, budget: list[int]) -> tuple[int, Frame] | None:
    """The first frame at or after `start` that verifies with a base offset >= `min_base_offset`."""
    for match in _CANDIDATE.finditer(buffer, start + HEADER_BYTES):
        position = match.start() - HEADER_BYTES
        length, _, base_offset, leader_epoch, record_count = _HEADER.unpack_from(buffer, position)
        end = position + 4 + length
        if end > len(buffer) or length < 4 + _BODY_HEADER.size + 2 or base_offset < min_base_offset:
            continue
        if record_count <= 0 or leader_epoch < 0:
            continue
        if not _payload_tiles(buffer, position + HEADER_BYTES, end):
            continue
        decoded = decode_frame(buffer, position)
        if decoded is not None:
            return position, decoded[0]
        budget[0] -= length
        if budget[0] < 0:
            raise FrameSearchIncomplete(position)
    return None


def verifying_frames_after(buffer: bytes, position: int, min_base_offset: int) -> Iterator[tuple[int, Frame]]:
    """Every frame at or after `position` that verifies and holds offsets >= `min_base_offset`, with its position.

    Raises FrameSearchIncomplete when its budget runs out (see the cost bounds above).
    """
    budget = [SEARCH_FAILED_CRC_BYTES_MAX]
    while position < len(buffer):
        decoded = decode_frame(buffer, position)
        if decoded is not None:  # frames back to back: a walk, no search
            frame, following = decoded
            if frame.base_offset >= min_base_offset:
                yield position, frame
            position = following
            continue
        found = _next_candidate(buffer, position + 1, min_base_offset, budget)
        if found is None:
            return
        position = found[0]
