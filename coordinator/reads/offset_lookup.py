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
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.NONE, -1, log_start
    if timestamp == LATEST_TIERED:
        return ErrorCode.NONE, -1, -1  # nothing is tiered
    if timestamp == MAX_TIMESTAMP:
        found = reads.max_timestamp_batch(db, offsets.partition_key)
    else:
        found = reads.first_batch_at_or_after(db, offsets.partition_key, timestamp)
    if found is None:
        return ErrorCode.NONE, -1, -1
    found_timestamp, base_offset = found
    return ErrorCode.NONE, found_timestamp, max(base_offset, log_start)
