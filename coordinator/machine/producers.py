"""Idempotent-producer rules (DESIGN §4): duplicates, epochs, sequences.

A producer's state per partition is its epoch and the last five batches it
wrote (Kafka's `ProducerStateEntry`). The same pure functions advance the
speculative view and the SQLite state, so both agree by construction.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from coordinator.base.errors import ErrorCode

PRODUCER_WINDOW_BATCHES = 5
SEQUENCE_MODULUS = 2**31  # sequences wrap from 2^31-1 to 0
PRODUCER_EPOCH_MAX = 32767  # Kafka's producer epoch is an int16


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
        for entry in window.entries:
            if entry.base_sequence == base_sequence and entry.last_sequence == last_sequence:
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
    expected = next_sequence(window.entries[-1].last_sequence, 1) if window.entries else base_sequence
    if base_sequence != expected:
        return ProducerVerdict(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"expected base sequence {expected} at epoch {epoch}, got {base_sequence}",
        )
    return ACCEPT


def advance_window(window: ProducerWindow | None, epoch: int, entry: WindowEntry) -> ProducerWindow:
    """The window after an accepted batch: a new epoch starts an empty window."""
    if window is None or window.epoch != epoch:
        return ProducerWindow(epoch, (entry,))
    return ProducerWindow(epoch, (*window.entries, entry)[-PRODUCER_WINDOW_BATCHES:])


_ENTRY = struct.Struct("<iiqqb")


def encode_window(window: ProducerWindow) -> bytes:
    """Compact form for SQLite: the entries packed, oldest first (the epoch has a column)."""
    pack = _ENTRY.pack
    return b"".join([pack(*entry) for entry in window.entries])


PackedWindow = tuple[int, bytes]  # (epoch, entries packed oldest first): how SQLite and its writer hold a window
_PACKED_WINDOW_BYTES = PRODUCER_WINDOW_BATCHES * _ENTRY.size


def advance_packed_window(window: PackedWindow | None, epoch: int, entry: WindowEntry) -> PackedWindow:
    """advance_window on the packed form: the writer only stores windows, so it never unpacks them."""
    packed = _ENTRY.pack(*entry)
    if window is None or window[0] != epoch:
        return epoch, packed
    return epoch, (window[1] + packed)[-_PACKED_WINDOW_BYTES:]


def decode_window(epoch: int, packed: bytes) -> ProducerWindow:
    return ProducerWindow(epoch, tuple(map(WindowEntry._make, _ENTRY.iter_unpack(packed))))
