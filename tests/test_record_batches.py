"""Kafka v2 record batches (spark/record_batches.py) against kafka-python, Kafka's codec in Python.

The consolidation job's CRC check and the test broker's encoder must agree with what Kafka clients
write and read: a batch kafka-python builds is read back here, record by record, and a batch encoded
here is byte for byte the one kafka-python builds from the same records, which kafka-python then
validates and decodes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from spark.record_batches import Record, batch_problem, decode_records, encode_batch, read_header, split_batches
from tests.lanes import sized

BASE_TIME_MS = 1_700_000_000_000

headers = st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=8)), max_size=2)
records = st.lists(
    st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=40), headers, st.integers(0, 10_000)),
    min_size=1,
    max_size=6,
)


def kafka_python_batch(
    rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]], **producer: int
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1), base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 20,
    )  # fmt: skip
    for offset, (key, value, record_headers, delay) in enumerate(rows):
        builder.append(offset, BASE_TIME_MS + delay, key, value, record_headers)
    return bytes(builder.build())


def our_records(rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]) -> list[Record]:
    return [
        Record(offset, BASE_TIME_MS + delay, key, value, tuple((name.encode(), content) for name, content in hs))
        for offset, (key, value, hs, delay) in enumerate(rows)
    ]


@settings(max_examples=sized(60, 20), deadline=None)
@given(records)
def test_kafka_pythons_batches_decode_here_and_ours_are_the_same_bytes(rows: list) -> None:
    theirs = kafka_python_batch(rows, producer_id=7, producer_epoch=2, base_sequence=40)
    header, decoded = decode_records(theirs)
    assert decoded == our_records(rows)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.last_offset_delta == len(rows) - 1 and header.size == len(theirs)
    # kafka-python writes partition leader epoch 0 where a producer's request leaves it to the broker.
    ours = encode_batch(our_records(rows), producer_id=7, producer_epoch=2, base_sequence=40, partition_leader_epoch=0)
    assert ours == theirs
    read = DefaultRecordBatch(ours)
    assert read.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in read] == [
        (offset, BASE_TIME_MS + delay, key, value, hs) for offset, (key, value, hs, delay) in enumerate(rows)
    ]


def test_a_flipped_bit_anywhere_the_crc_covers_is_found() -> None:
    data = encode_batch([Record(0, BASE_TIME_MS, b"k", b"value" * 10), Record(1, BASE_TIME_MS + 1, None, b"v")])
    assert batch_problem(data) is None
    for position in range(21, len(data)):  # attributes onward
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        problem = batch_problem(bytes(damaged))
        assert problem is not None, position
    # The base offset is outside the CRC: a broker rewrites it on fetch, the batch stays intact.
    rebased = (1234).to_bytes(8, "big") + data[8:]
    assert batch_problem(rebased) is None and read_header(rebased).base_offset == 1234


def test_a_batch_cut_short_or_of_another_magic_is_refused() -> None:
    data = encode_batch([Record(0, BASE_TIME_MS, b"k", b"v")])
    assert "fewer than a batch header" in (batch_problem(data[:30]) or "")
    assert "length field" in (batch_problem(data[:-1]) or "")
    assert "magic 1" in (batch_problem(data[:16] + b"\x01" + data[17:]) or "")
    with pytest.raises(ValueError, match="CRC-32C"):
        decode_records(data[:-1] + bytes([data[-1] ^ 0xFF]))


def test_batches_laid_one_after_another_split_by_their_lengths() -> None:
    batches = [encode_batch([Record(i, BASE_TIME_MS, None, b"x" * i) for i in range(n)]) for n in (1, 3, 2)]
    assert [bytes(b) for b in split_batches(b"".join(batches))] == batches
