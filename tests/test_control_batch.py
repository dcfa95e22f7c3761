"""Kafka's transaction marker batch (coordinator/client/control_batch.py): the bytes Kafka's
`MemoryRecords.withEndTransactionMarker` writes, checked field by field, and read back as a consumer does."""

from __future__ import annotations

import struct

import pytest

from coordinator.cli.transactions import MARKER_BYTES
from coordinator.client.control_batch import EndTransactionMarker, crc32c, decode_marker, encode_marker
from protos import coordinator_pb2 as pb


def test_crc32c_is_castagnolis() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC catalogue's check value of CRC-32C
    assert crc32c(b"") == 0


@pytest.mark.parametrize("control_type, kafka_type", [(pb.CONTROL_ABORT, 0), (pb.CONTROL_COMMIT, 1)])
def test_a_marker_batch_is_kafkas_v2_control_batch(control_type: int, kafka_type: int) -> None:
    marker = EndTransactionMarker(control_type, 21, 3, 7, 1_700_000_000_000)
    data = encode_marker(marker)
    assert len(data) == MARKER_BYTES
    base_offset, length, leader_epoch, magic, crc = struct.unpack_from(">qiibI", data)
    assert (base_offset, length, leader_epoch, magic) == (0, MARKER_BYTES - 12, -1, 2)
    assert crc == crc32c(data[21:])  # from the attributes to the end
    attributes, last_delta, first_ts, max_ts, producer, epoch, sequence, count = struct.unpack_from(
        ">hiqqqhii", data, 21
    )
    assert attributes == 0x30  # transactional (bit 4) and control (bit 5)
    assert (last_delta, first_ts, max_ts, producer, epoch, sequence, count) == (
        0, 1_700_000_000_000, 1_700_000_000_000, 21, 3, -1, 1,
    )  # fmt: skip
    # The record: length 16 (zig-zag 0x20), attributes, deltas, key (version 0, type), value (version 0, epoch 7).
    assert data[61:] == bytes([0x20, 0, 0, 0, 0x08]) + struct.pack(">hh", 0, kafka_type) + bytes([0x0C]) + (
        struct.pack(">hi", 0, 7) + b"\x00"
    )
    assert decode_marker(data) == marker


def test_a_damaged_or_foreign_batch_is_not_read_as_a_marker() -> None:
    data = bytearray(encode_marker(EndTransactionMarker(pb.CONTROL_ABORT, 1, 0, 0, 0)))
    data[-2] ^= 1
    with pytest.raises(ValueError, match="CRC"):
        decode_marker(bytes(data))
    with pytest.raises(ValueError, match="shorter"):
        decode_marker(b"\x00" * 20)
