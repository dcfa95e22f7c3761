"""One frame of the metadata log: a header and one operation's records.

length        u32  bytes after this field (header rest + payload)
crc           u32  zlib CRC-32 of everything after this field
base_offset   i64  offset of the frame's first record
leader_epoch  i32  epoch of the leader that wrote it
record_count  i32  records in the payload (offsets base..base+count-1)
payload            protos.records.RecordBatch
"""

from __future__ import annotations

import struct
import zlib
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
