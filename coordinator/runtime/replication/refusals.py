"""Replication answers that carry only an error: a node or a coordinator that cannot serve a follower's FetchLog or
OffsetForLeaderEpoch (not its leader, not here, closed) answers with these, wherever the refusal is decided."""

from __future__ import annotations

from coordinator.base.errors import ErrorCode
from protos import internal_pb2 as internal


def refused_fetch(code: ErrorCode, message: str) -> internal.FetchLogResponse:
    """A FetchLog answer carrying only an error (no frames, not diverging)."""
    return internal.FetchLogResponse(
        error_code=code, error_message=message, diverging_epoch=-1, diverging_end_offset=-1
    )


def refused_epoch_end(code: ErrorCode, message: str) -> internal.OffsetForLeaderEpochResponse:
    """An OffsetForLeaderEpoch answer carrying only an error."""
    return internal.OffsetForLeaderEpochResponse(error_code=code, error_message=message, leader_epoch=-1, end_offset=-1)
