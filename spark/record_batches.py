"""Kafka's record batches, magic v2 (KIP-98's format): the header, the CRC-32C check, and a small codec.

The consolidation job reads each batch's header and checks its CRC-32C before it copies the batch
(`batch_problem`): a damaged batch is never copied. The encoder and decoder serve the test broker and
the benchmark (bench/wal_broker.py), which write WAL files of genuine batches and read every offset
back; tests/test_record_batches.py checks both against kafka-python's own implementation.

Layout (Kafka's DefaultRecordBatch; big-endian):

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records

The CRC covers everything from `attributes` to the end, so a broker may rewrite `baseOffset` (as a
diskless broker does on fetch: the file holds the producer's offsets from 0) without touching it.
Compressed batches are copied like any other (their CRC covers the compressed bytes); the decoder here
reads uncompressed ones only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

MAGIC_V2 = 2
HEADER_BYTES = 61
LOG_OVERHEAD = 12  # baseOffset and batchLength: what batchLength does not count
CRC_START = 21  # attributes onward is checked
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
COMPRESSION_MASK = 0x07
NO_PRODUCER_ID = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")

Header = tuple[bytes, bytes]  # (key, value) of a record header


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """The whole batch's bytes."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


@dataclass(frozen=True, slots=True)
class Record:
    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def read_header(data: bytes | memoryview, position: int = 0) -> BatchHeader:
    """The header of the batch at `position`; ValueError if too few bytes are left for one."""
    if len(data) - position < HEADER_BYTES:
        raise ValueError(f"{len(data) - position} bytes at {position}: fewer than a batch header ({HEADER_BYTES})")
    return BatchHeader(*_HEADER.unpack_from(data, position))


def batch_problem(data: bytes | memoryview) -> str | None:
    """Why `data` is not exactly one intact v2 record batch, or None."""
    try:
        header = read_header(data)
    except ValueError as error:
        return str(error)
    if header.magic != MAGIC_V2:
        return f"magic {header.magic}, not {MAGIC_V2}: not a v2 record batch"
    if header.size != len(data):
        return f"its length field says {header.size} bytes, the batch has {len(data)}"
    computed = crc32c.crc32c(data[CRC_START:])
    if computed != header.crc:
        return f"CRC-32C mismatch: stored {header.crc:#010x}, computed {computed:#010x}"
    return None


# ---------------------------------------------------------------------- the codec (tests and benchmark)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _varint(value: int) -> bytes:
    encoded = bytearray()
    value = _zigzag(value) & 0xFFFFFFFFFFFFFFFF
    while value >= 0x80:
        encoded.append((value & 0x7F) | 0x80)
        value >>= 7
    encoded.append(value)
    return bytes(encoded)


def _bytes_field(value: bytes | None) -> bytes:
    return _varint(-1) if value is None else _varint(len(value)) + value


def _record(record: Record, base_timestamp: int) -> bytes:
    body = b"".join(
        [
            b"\x00",  # record attributes: unused
            _varint(record.timestamp - base_timestamp),
            _varint(record.offset_delta),
            _bytes_field(record.key),
            _bytes_field(record.value),
            _varint(len(record.headers)),
            *(_bytes_field(key) + _bytes_field(value) for key, value in record.headers),
        ]
    )
    return _varint(len(body)) + body


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One uncompressed v2 batch of CREATE_TIME records, as a producer writes it."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_timestamp = records[0].timestamp
    max_timestamp = max(r.timestamp for r in records)
    attributes = (TRANSACTIONAL_FLAG if is_transactional else 0) | (CONTROL_FLAG if is_control else 0)
    body = b"".join(_record(r, base_timestamp) for r in records)
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            records[-1].offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + body
    )
    batch_length = len(after_crc) + 4 + 1 + 4  # crc, magic, partition leader epoch
    head = struct.pack(">qiib", base_offset, batch_length, partition_leader_epoch, MAGIC_V2)
    return head + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc


def _read_varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7


def _read_bytes(data: bytes | memoryview, position: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(data, position)
    if length < 0:
        return None, position
    return bytes(data[position : position + length]), position + length


def decode_records(data: bytes | memoryview) -> tuple[BatchHeader, list[Record]]:
    """The header and records of one uncompressed batch; ValueError if it is damaged or compressed."""
    problem = batch_problem(data)
    if problem:
        raise ValueError(problem)
    header = read_header(data)
    if header.attributes & COMPRESSION_MASK:
        raise ValueError(f"compressed batch (codec {header.attributes & COMPRESSION_MASK}): not decoded here")
    records, position = [], HEADER_BYTES
    for _ in range(header.record_count):
        length, position = _read_varint(data, position)
        end = position + length
        position += 1  # record attributes
        timestamp_delta, position = _read_varint(data, position)
        offset_delta, position = _read_varint(data, position)
        key, position = _read_bytes(data, position)
        value, position = _read_bytes(data, position)
        header_count, position = _read_varint(data, position)
        headers = []
        for _ in range(header_count):
            name, position = _read_bytes(data, position)
            content, position = _read_bytes(data, position)
            headers.append((name or b"", content or b""))
        if position != end:
            raise ValueError(f"a record's length says it ends at {end}, its fields end at {position}")
        records.append(Record(offset_delta, header.base_timestamp + timestamp_delta, key, value, tuple(headers)))
    return header, records


def split_batches(data: bytes | memoryview) -> Iterator[bytes | memoryview]:
    """The batches laid one after another in `data`, by their length fields (not checked)."""
    position = 0
    while position < len(data):
        size = read_header(data, position).size
        yield data[position : position + size]
        position += size
