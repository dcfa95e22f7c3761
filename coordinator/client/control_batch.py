"""Kafka's transaction marker as a broker writes it into a WAL file: a v2 record batch holding one control record.

The layout is Kafka's `DefaultRecordBatch` (magic 2) with `EndTransactionMarker`'s key and value:

    base offset i64 | batch length i32 | partition leader epoch i32 | magic i8 = 2 | crc u32 (CRC-32C of the rest)
    attributes i16 (transactional 0x10 | control 0x20) | last offset delta i32 | base timestamp i64
    max timestamp i64 | producer id i64 | producer epoch i16 | base sequence i32 (-1) | record count i32 (1)
    record: length varint | attributes i8 | timestamp delta varlong | offset delta varint
            key length varint | key: version i16 = 0, type i16 (0 ABORT, 1 COMMIT)
            value length varint | value: version i16 = 0, coordinator epoch i32 | header count varint (0)

The offsets are the broker's (0 here): the coordinator assigns the real ones and consumers take them from
FindBatches, as for every batch of a WAL file. The CRC-32C is computed here in Python (a table): a marker is 78
bytes, and nothing else in the project needs it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import final

from protos import coordinator_pb2 as pb

MAGIC = 2
TRANSACTIONAL_ATTRIBUTE = 0x10
CONTROL_ATTRIBUTE = 0x20
NO_PARTITION_LEADER_EPOCH = -1
NO_SEQUENCE = -1
# Kafka's ControlRecordType: ABORT 0, COMMIT 1 (key version 0); EndTransactionMarker's value version 0.
_CONTROL_TYPES: dict[int, int] = {pb.CONTROL_ABORT: 0, pb.CONTROL_COMMIT: 1}
_HEADER = struct.Struct(">qiibI")  # base offset, batch length, partition leader epoch, magic, crc
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record count
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
# The bytes the batch length counts: everything after the length field itself.
_LENGTH_COUNTED_FROM = 12
_CRC_FROM = _HEADER.size


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of Kafka's v2 record batches."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _varint(value: int) -> bytes:
    """Kafka's zig-zag varint (ByteUtils.writeVarint/writeVarlong)."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag & ~0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    shift = zigzag = 0
    while True:
        byte = data[position]
        position += 1
        zigzag |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (zigzag >> 1) ^ -(zigzag & 1), position
        shift += 7


@final
@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    control_type: int  # pb.CONTROL_ABORT or pb.CONTROL_COMMIT
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    timestamp_ms: int


def encode_marker(marker: EndTransactionMarker) -> bytes:
    """The control batch a broker writes for WriteTxnMarkers (Kafka's `MemoryRecords.withEndTransactionMarker`)."""
    key = _KEY.pack(0, _CONTROL_TYPES[marker.control_type])
    value = _VALUE.pack(0, marker.coordinator_epoch)
    body = b"".join(
        (
            b"\x00",  # record attributes (unused)
            _varint(0),  # timestamp delta
            _varint(0),  # offset delta
            _varint(len(key)),
            key,
            _varint(len(value)),
            value,
            _varint(0),  # headers
        )
    )
    record = _varint(len(body)) + body
    after_crc = (
        _AFTER_CRC.pack(
            TRANSACTIONAL_ATTRIBUTE | CONTROL_ATTRIBUTE,
            0,  # last offset delta: one record
            marker.timestamp_ms,
            marker.timestamp_ms,
            marker.producer_id,
            marker.producer_epoch,
            NO_SEQUENCE,
            1,
        )
        + record
    )
    length = _HEADER.size - _LENGTH_COUNTED_FROM + len(after_crc)
    return _HEADER.pack(0, length, NO_PARTITION_LEADER_EPOCH, MAGIC, crc32c(after_crc)) + after_crc


def decode_marker(data: bytes) -> EndTransactionMarker:
    """The marker of one control batch (its exact bytes), verified as a consumer does; ValueError if it is not one."""
    if len(data) < _HEADER.size + _AFTER_CRC.size:
        raise ValueError(f"{len(data)} bytes: shorter than a v2 batch header")
    _, length, _, magic, crc = _HEADER.unpack_from(data)
    if magic != MAGIC or length != len(data) - _LENGTH_COUNTED_FROM:
        raise ValueError(f"magic {magic}, batch length {length} for {len(data)} bytes")
    if crc32c(data[_CRC_FROM:]) != crc:
        raise ValueError("CRC-32C mismatch")
    attributes, _, _, max_timestamp, producer_id, epoch, _, count = _AFTER_CRC.unpack_from(data, _CRC_FROM)
    if attributes & (TRANSACTIONAL_ATTRIBUTE | CONTROL_ATTRIBUTE) != TRANSACTIONAL_ATTRIBUTE | CONTROL_ATTRIBUTE:
        raise ValueError(f"attributes {attributes:#x}: not a transactional control batch")
    if count != 1:
        raise ValueError(f"{count} records in a control batch")
    position = _CRC_FROM + _AFTER_CRC.size
    _, position = _read_varint(data, position)  # record length
    position += 1  # record attributes
    _, position = _read_varint(data, position)  # timestamp delta
    _, position = _read_varint(data, position)  # offset delta
    key_length, position = _read_varint(data, position)
    version, kind = _KEY.unpack_from(data, position)
    position += key_length
    value_length, position = _read_varint(data, position)
    value_version, coordinator_epoch = _VALUE.unpack_from(data, position)
    types = {number: control for control, number in _CONTROL_TYPES.items()}
    if version != 0 or kind not in types or value_version != 0 or key_length != _KEY.size or value_length < _VALUE.size:
        raise ValueError(f"control key version {version} type {kind}, value version {value_version}")
    return EndTransactionMarker(types[kind], producer_id, epoch, coordinator_epoch, max_timestamp)
