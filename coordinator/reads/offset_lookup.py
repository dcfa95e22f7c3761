"""ListOffsets (DESIGN §4) on committed state, after the strict wait for pending records."""

from __future__ import annotations

import apsw

from coordinator.base.errors import ErrorCode
from coordinator.machine.state import reads

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
SPECIAL_TIMESTAMPS = (LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED)


def timestamp_problem(timestamp: int) -> str | None:
    if timestamp >= 0 or timestamp in SPECIAL_TIMESTAMPS:
        return None
    return f"timestamp {timestamp} is neither >= 0 nor one of -1, -2, -3, -4, -5"


def list_offset(db: apsw.Connection, offsets: reads.PartitionOffsets, timestamp: int) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) for a known partition and a valid timestamp."""
    log_start = offsets.log_start_offset
    if timestamp == LATEST:
        return ErrorCode.NONE, -1, offsets.high_watermark
    if timestamp == EARLIEST:
        return ErrorCode.NONE, -1, log_start
    if timestamp == EARLIEST_LOCAL:
        return ErrorCode.NONE, -1, offsets.local_log_start_offset
    if timestamp == LATEST_TIERED:
        return ErrorCode.NONE, -1, offsets.remote_log_end_offset
    if timestamp == MAX_TIMESTAMP:
        # From the batches held here, as Kafka answers it from its local segments.
        found = reads.max_timestamp_batch(db, offsets.partition_key)
    elif offsets.remote_log_end_offset >= 0 and timestamp <= offsets.remote_max_timestamp:
        # A remote batch may be the first at or after it (DESIGN §4a): the broker asks its remote storage.
        return ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE, -1, -1
    else:
        found = reads.first_batch_at_or_after(db, offsets.partition_key, timestamp)
    if found is None:
        return ErrorCode.NONE, -1, -1
    found_timestamp, base_offset = found
    return ErrorCode.NONE, found_timestamp, max(base_offset, log_start)


def list_offset_committed(
    db: apsw.Connection, offsets: reads.PartitionOffsets, timestamp: int
) -> tuple[ErrorCode, int, int]:
    """list_offset for READ_COMMITTED (DESIGN §4b), as Kafka's `fetchOffsetForTimestamp`: -1 answers the last stable
    offset, and any other answer but the earliest stands only below it (else no offset)."""
    stable = offsets.last_stable_offset
    if timestamp == LATEST:
        return ErrorCode.NONE, -1, stable
    code, found_timestamp, offset = list_offset(db, offsets, timestamp)
    if code == ErrorCode.NONE and timestamp != EARLIEST and offset >= stable:
        return ErrorCode.NONE, -1, -1
    return code, found_timestamp, offset
