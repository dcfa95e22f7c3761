"""FindBatches answers as protobuf bytes, assembled from entries serialized once, when a batch is applied.

A consumer's FindBatches returns up to hundreds of batches; building each as a message field by field
costs more Python than the rest of the call. Each batch's entry in a PartitionResult (its BatchInfo,
framed as field `batches`) is therefore serialized when the batch is applied and stored with it; a read
joins the stored bytes. Protobuf allows this: a message's fields may come in any order, and the bytes of
repeated fields, one after the other, parse as the list.
"""

from __future__ import annotations

from collections.abc import Iterable

from protos import coordinator_pb2 as pb

_PartitionResult = pb.FindBatchesResponse.PartitionResult
_TopicResult = pb.FindBatchesResponse.TopicResult


# A batch's transaction flags (DESIGN §4b), as bits: what its entry says of it.
TRANSACTIONAL = 1
CONTROL = 2


def _tag(message: type[object], field: str) -> bytes:
    """The key of a length-delimited field (wire type 2); every field number here is below 16: one byte."""
    number: int = message.DESCRIPTOR.fields_by_name[field].number  # type: ignore[attr-defined]
    assert number < 16, number
    return bytes([number << 3 | 2])


_BATCHES_TAG = _tag(_PartitionResult, "batches")
_PARTITIONS_TAG = _tag(_TopicResult, "partitions")
_TOPICS_TAG = _tag(pb.FindBatchesResponse, "topics")


# The varints of 0..127, one byte each: a tail partition's number, most lengths of entries and headers.
_SHORT_VARINTS = tuple(bytes((value,)) for value in range(0x80))


def _varint(value: int) -> bytes:
    """A non-negative length as a protobuf varint. Up to three bytes without a loop: a FindBatches answer encodes
    a few per partition (its offsets, its length), and the loop with its bytearray cost as much as the rest."""
    if value < 0x80:
        return _SHORT_VARINTS[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _framed(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def batch_entry(
    batch_id: int,
    object_key: str,
    magic: int,
    byte_offset: int,
    byte_size: int,
    base_offset: int,
    last_offset: int,
    append_time_ms: int,
    max_timestamp: int,
    timestamp_type: int,
    producer_id: int = -1,
    flags: int = 0,
) -> bytes:
    """A batch's FindBatches entry: its BatchInfo framed as one element of PartitionResult.batches."""
    info = pb.BatchInfo(
        producer_id=producer_id,
        batch_id=batch_id,
        object_key=object_key,
        magic=magic,
        byte_offset=byte_offset,
        byte_size=byte_size,
        base_offset=base_offset,
        last_offset=last_offset,
        log_append_timestamp=append_time_ms,
        batch_max_timestamp=max_timestamp,
        timestamp_type=timestamp_type,  # type: ignore[arg-type]  # an enum's number
    )
    if flags:  # a transactional batch or a marker (DESIGN §4b); the others leave both false
        info.is_transactional = True
        info.is_control = bool(flags & CONTROL)
    return _framed(_BATCHES_TAG, info.SerializeToString())


class FileEntries:
    """The FindBatches entries of one file's batches, as `batch_entry` makes them, from one BatchInfo message
    reused: apply makes one per batch committed, and a message per batch (its arena, the object key copied in,
    its append time) cost more than setting the fields that differ. The bytes are the same: a proto3 field set to
    its default is not serialized, so nothing of an earlier batch remains in a later one's entry."""

    __slots__ = ("_flagged", "_info")

    def __init__(self, object_key: str, append_time_ms: int) -> None:
        self._info = pb.BatchInfo(object_key=object_key, log_append_timestamp=append_time_ms)
        self._flagged = False  # the last entry set a transaction flag: the next one clears them

    def entry(
        self,
        batch_id: int,
        magic: int,
        byte_offset: int,
        byte_size: int,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
        timestamp_type: int,
        producer_id: int,
        flags: int,
    ) -> bytes:
        info = self._info
        info.producer_id = producer_id
        info.batch_id = batch_id
        info.magic = magic
        info.byte_offset = byte_offset
        info.byte_size = byte_size
        info.base_offset = base_offset
        info.last_offset = last_offset
        info.batch_max_timestamp = max_timestamp
        info.timestamp_type = timestamp_type  # type: ignore[assignment]  # an enum's number
        if flags or self._flagged:
            info.is_transactional = bool(flags)
            info.is_control = bool(flags & CONTROL)
            self._flagged = bool(flags)
        payload = info.SerializeToString()
        size = len(payload)
        return _BATCHES_TAG + (_SHORT_VARINTS[size] if size < 0x80 else _varint(size)) + payload


_ABORTED_TAG = _tag(_PartitionResult, "aborted_transactions")
_PRODUCER_ID_KEY = bytes([pb.AbortedTransaction.DESCRIPTOR.fields_by_name["producer_id"].number << 3])  # varint
_FIRST_OFFSET_KEY = bytes([pb.AbortedTransaction.DESCRIPTOR.fields_by_name["first_offset"].number << 3])


def aborted_entries(aborted: Iterable[tuple[int, int]]) -> bytes:
    """A read_committed answer's aborted transactions, (producer id, first offset) each (both >= 0), framed as
    elements of PartitionResult.aborted_transactions: built as bytes, as the batches' entries are, since a message
    per transaction costs more than the read that found it."""
    return b"".join(
        [
            _framed(_ABORTED_TAG, _PRODUCER_ID_KEY + _varint(producer_id) + _FIRST_OFFSET_KEY + _varint(first_offset))
            for producer_id, first_offset in aborted
        ]
    )


def _key(message: type[object], field: str) -> bytes:
    """The key of a varint field (wire type 0); every field number here is below 16: one byte."""
    number: int = message.DESCRIPTOR.fields_by_name[field].number  # type: ignore[attr-defined]
    assert number < 16, number
    return bytes([number << 3])


_PARTITION_KEY = _key(_PartitionResult, "partition")
_ERROR_CODE_KEY = _key(_PartitionResult, "error_code")
_ERROR_MESSAGE_TAG = _tag(_PartitionResult, "error_message")
_LOG_START_KEY = _key(_PartitionResult, "log_start_offset")
_HIGH_WATERMARK_KEY = _key(_PartitionResult, "high_watermark")
_LOCAL_LOG_START_KEY = _key(_PartitionResult, "local_log_start_offset")
_LAST_STABLE_KEY = _key(_PartitionResult, "last_stable_offset")
_MINUS_ONE = bytes([0xFF] * 9 + [0x01])  # a negative int32 or int64 is sent as its 64-bit two's complement


def _signed_varint(value: int) -> bytes:
    """An int32 or int64 field's varint: ten bytes when negative (-1, an unknown offset, most often)."""
    if 0 <= value < 0x4000:  # `_varint`'s first cases, without a second call (offsets and partitions, mostly)
        return _SHORT_VARINTS[value] if value < 0x80 else bytes((value & 0x7F | 0x80, value >> 7))
    if value >= 0:
        return _varint(value)
    return _MINUS_ONE if value == -1 else _varint(value + (1 << 64))


UNKNOWN_OFFSETS = (-1, -1, -1, -1)  # a partition's offsets where they are unknown (an error before any read)


def partition_header(partition: int, error_code: int, error_message: str, offsets: tuple[int, int, int, int]) -> bytes:
    """A PartitionResult's own fields (offsets: log start, high watermark, local log start, last stable), as its
    message serializes them. Built as bytes: a message per partition (its fields set one by one, then serialized)
    cost more than the partition's read when it has nothing new (tests/test_find_batches_wire.py compares both)."""
    out = b""
    if partition:
        out = _PARTITION_KEY + _signed_varint(partition)
    if error_code:
        out += _ERROR_CODE_KEY + _signed_varint(error_code)
    log_start_offset, high_watermark, local_log_start_offset, last_stable_offset = offsets
    if log_start_offset:
        out += _LOG_START_KEY + _signed_varint(log_start_offset)
    high_watermark_varint = b""
    if high_watermark:
        high_watermark_varint = _signed_varint(high_watermark)
        out += _HIGH_WATERMARK_KEY + high_watermark_varint
    if error_message:
        out += _framed(_ERROR_MESSAGE_TAG, error_message.encode())
    if local_log_start_offset:
        out += _LOCAL_LOG_START_KEY + _signed_varint(local_log_start_offset)
    if last_stable_offset:  # without open transactions the high watermark: its bytes once
        stable = high_watermark_varint if last_stable_offset == high_watermark else _signed_varint(last_stable_offset)
        out += _LAST_STABLE_KEY + stable
    return out


def partition_result(header: bytes, entries: Iterable[bytes]) -> bytes:
    """A PartitionResult framed as one element of TopicResult.partitions: its header (`partition_header`), then
    the batches' entries (and a read_committed answer's aborted transactions)."""
    payload = header + b"".join(entries)
    size = len(payload)
    return _PARTITIONS_TAG + (_SHORT_VARINTS[size] if size < 0x80 else _varint(size)) + payload


def topic_result(topic_id: bytes, partitions: Iterable[bytes]) -> bytes:
    """A TopicResult framed as one element of FindBatchesResponse.topics."""
    return _framed(_TOPICS_TAG, _TopicResult(topic_id=topic_id).SerializeToString() + b"".join(partitions))


def moved_entry(entry: bytes, object_key: str, byte_offset: int) -> bytes:
    """A batch's entry after consolidation moved it (DESIGN §4c): the same BatchInfo in another object at another
    position; everything else (offsets, timestamps, producer, transaction flags) as it was."""
    length_start = len(_BATCHES_TAG)
    position = length_start
    while entry[position] & 0x80:  # the payload's length, a varint
        position += 1
    info = pb.BatchInfo.FromString(entry[position + 1 :])
    info.object_key = object_key
    info.byte_offset = byte_offset
    return _framed(_BATCHES_TAG, info.SerializeToString())


def entry_flags(entry: bytes | None) -> int:
    """A batch's transaction flags (TRANSACTIONAL, CONTROL) as its entry says; 0 for a row stored without one
    (schema 2, before transactions)."""
    if entry is None:
        return 0
    position = len(_BATCHES_TAG)
    while entry[position] & 0x80:  # the payload's length, a varint
        position += 1
    info = pb.BatchInfo.FromString(entry[position + 1 :])
    return (TRANSACTIONAL if info.is_transactional else 0) | (CONTROL if info.is_control else 0)
