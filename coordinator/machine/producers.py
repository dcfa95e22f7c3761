"""Idempotent-producer rules (DESIGN §4): duplicates, epochs, sequences; and when a producer's state expires (§4a).

A producer's state per partition is its epoch, the last five batches it
wrote and the effective timestamp of the last one (Kafka's `ProducerStateEntry`
with its `lastTimestamp`). The same pure functions advance the speculative view
and the SQLite state, so both agree by construction.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from coordinator.base.errors import ErrorCode
from protos import coordinator_pb2 as pb

PRODUCER_WINDOW_BATCHES = 5
SEQUENCE_MODULUS = 2**31  # sequences wrap from 2^31-1 to 0
PRODUCER_EPOCH_MAX = 32767  # Kafka's producer epoch is an int16
LOG_APPEND_TIME = pb.LOG_APPEND_TIME


# NamedTuples, not dataclasses: three of each are made per idempotent batch on the commit path.
class WindowEntry(NamedTuple):
    base_sequence: int
    last_sequence: int
    base_offset: int  # assigned
    append_time_ms: int
    timestamp_type: int


class ProducerWindow(NamedTuple):
    epoch: int
    entries: tuple[WindowEntry, ...]  # oldest first, at most PRODUCER_WINDOW_BATCHES
    last_timestamp: int  # the effective timestamp of the producer's last batch: what its expiry is decided by


# NamedTuples built with tuple.__new__ on the commit path: the generated __new__ (a Python function handling
# defaults) costs more than the rest of building the window; every field is given here.
_new = tuple.__new__


def effective_timestamp(max_timestamp: int, timestamp_type: int, append_time_ms: int) -> int:
    """A batch's effective timestamp (DESIGN §4, §4a): its append time for LOG_APPEND_TIME or no timestamp (-1)."""
    return append_time_ms if timestamp_type == LOG_APPEND_TIME or max_timestamp < 0 else max_timestamp


def producer_expired(last_timestamp: int, expired_before_ms: int) -> bool:
    """Whether a producer whose last batch has this effective timestamp is forgotten (DESIGN §4a).

    `expired_before_ms` is the check's now - `diskless.coordinator.producer.id.expiration.ms`. Kafka's rule
    (`ProducerStateManager.isProducerExpired`: now - last timestamp >= the expiration): a producer whose last batch
    is exactly that old is expired too.
    """
    return last_timestamp <= expired_before_ms


@dataclass(frozen=True, slots=True)
class ProducerVerdict:
    """NONE with `duplicate_of` set for a retried batch; NONE alone to accept; else the error."""

    error_code: ErrorCode
    message: str = ""
    duplicate_of: WindowEntry | None = None


ACCEPT = ProducerVerdict(ErrorCode.NONE)


def next_sequence(sequence: int, records: int) -> int:
    return (sequence + records) % SEQUENCE_MODULUS


def check_producer(
    window: ProducerWindow | None, epoch: int, base_sequence: int, last_sequence: int
) -> ProducerVerdict:
    """Kafka's order: duplicate, then epoch, then sequence."""
    if window is not None and window.epoch == epoch:
        for entry in window.entries:  # fields by position (base and last sequence): up to five per idempotent batch
            if entry[0] == base_sequence and entry[1] == last_sequence:
                return ProducerVerdict(ErrorCode.NONE, duplicate_of=entry)
    if window is None:
        return ACCEPT  # no state: any sequence (KIP-360)
    if epoch < window.epoch:
        return ProducerVerdict(
            ErrorCode.INVALID_PRODUCER_EPOCH, f"producer epoch {epoch} is older than the current {window.epoch}"
        )
    if epoch > window.epoch:
        if base_sequence != 0:
            return ProducerVerdict(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"new producer epoch {epoch} must start at sequence 0, got {base_sequence}",
            )
        return ACCEPT
    # A window without entries is a producer whose marker set its epoch (DESIGN §4b): as Kafka's entry with no
    # batch metadata, its next batch at that epoch starts at sequence 0.
    expected = next_sequence(window.entries[-1].last_sequence, 1) if window.entries else 0
    if base_sequence != expected:
        return ProducerVerdict(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"expected base sequence {expected} at epoch {epoch}, got {base_sequence}",
        )
    return ACCEPT


def last_stable_offset(oldest_open_first_offset: int, log_start_offset: int, high_watermark: int) -> int:
    """A partition's LSO (DESIGN §4b): the first offset of its oldest open transaction (-1: none), not below the log
    start (as Kafka's `maybeIncrementFirstUnstableOffset`), else the high watermark."""
    if oldest_open_first_offset < 0:
        return high_watermark
    return min(max(oldest_open_first_offset, log_start_offset), high_watermark)


def check_marker(
    window: ProducerWindow | None, epoch: int, coordinator_epoch: int, last_coordinator_epoch: int
) -> ProducerVerdict:
    """A transaction marker's checks (DESIGN §4b), Kafka's `appendEndTxnMarker` order: the producer epoch, then the
    transaction coordinator's epoch (`last_coordinator_epoch` is that of the producer's last marker here, -1 if
    none). A marker carries no sequence: it is never a duplicate."""
    if window is not None and epoch < window.epoch:
        return ProducerVerdict(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"marker's producer epoch {epoch} is older than the current {window.epoch}",
        )
    if last_coordinator_epoch > coordinator_epoch:
        return ProducerVerdict(
            ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            f"marker's coordinator epoch {coordinator_epoch} is older than the last one, {last_coordinator_epoch}",
        )
    return ACCEPT


def window_after_marker(window: ProducerWindow | None, epoch: int, last_timestamp: int) -> ProducerWindow:
    """The window after an accepted marker: a higher epoch becomes the producer's, with no batch yet (Kafka's
    `maybeUpdateProducerEpoch`); the same epoch keeps its entries. The marker's timestamp is the producer's last."""
    if window is None or window.epoch != epoch:
        return _new(ProducerWindow, (epoch, (), last_timestamp))
    return _new(ProducerWindow, (epoch, window.entries, last_timestamp))


def advance_window(
    window: ProducerWindow | None, epoch: int, entry: WindowEntry, last_timestamp: int
) -> ProducerWindow:
    """The window after an accepted batch whose effective timestamp is `last_timestamp`: a new epoch starts an
    empty window."""
    if window is None or window.epoch != epoch:
        return _new(ProducerWindow, (epoch, (entry,), last_timestamp))
    return _new(ProducerWindow, (epoch, (*window.entries, entry)[-PRODUCER_WINDOW_BATCHES:], last_timestamp))


def last_batch_offset(window: ProducerWindow) -> int:
    """The assigned base offset of the producer's last batch (-1 for a window without entries)."""
    return window.entries[-1].base_offset if window.entries else -1


_ENTRY = struct.Struct("<iiqqb")


def encode_window(window: ProducerWindow) -> bytes:
    """Compact form for SQLite: the entries packed, oldest first (the epoch has a column)."""
    pack = _ENTRY.pack
    return b"".join([pack(*entry) for entry in window.entries])


# (epoch, entries packed oldest first, last batch's effective timestamp): how SQLite and its writer hold a window.
PackedWindow = tuple[int, bytes, int]
_PACKED_WINDOW_BYTES = PRODUCER_WINDOW_BATCHES * _ENTRY.size
_BASE_OFFSET_AT = 8  # of an entry: after its two int32 sequences


def advance_packed_window(
    window: PackedWindow | None, epoch: int, entry: WindowEntry, last_timestamp: int
) -> PackedWindow:
    """advance_window on the packed form: the writer only stores windows, so it never unpacks them."""
    packed = _ENTRY.pack(*entry)
    if window is None or window[0] != epoch:
        return epoch, packed, last_timestamp
    return epoch, (window[1] + packed)[-_PACKED_WINDOW_BYTES:], last_timestamp


def packed_window_after_marker(window: PackedWindow | None, epoch: int, last_timestamp: int) -> PackedWindow:
    """window_after_marker on the packed form."""
    if window is None or window[0] != epoch:
        return epoch, b"", last_timestamp
    return epoch, window[1], last_timestamp


def packed_last_batch_offset(window: PackedWindow) -> int:
    """last_batch_offset on the packed form."""
    packed = window[1]
    if not packed:
        return -1
    (base_offset,) = struct.unpack_from("<q", packed, len(packed) - _ENTRY.size + _BASE_OFFSET_AT)
    return int(base_offset)


def packed_last_append_time(packed: bytes) -> int:
    """The append time of a packed window's last entry (-1 without entries): what a state of schema 4, which did not
    keep the last batch's timestamp, takes for it."""
    return int(_ENTRY.unpack_from(packed, len(packed) - _ENTRY.size)[3]) if packed else -1


def decode_window(epoch: int, packed: bytes, last_timestamp: int) -> ProducerWindow:
    return ProducerWindow(epoch, tuple(map(WindowEntry._make, _ENTRY.iter_unpack(packed))), last_timestamp)
