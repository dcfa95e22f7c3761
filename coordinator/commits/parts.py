"""A CommitFile as the checks see it: its batches read once, one coordinator's part, each batch's outcome."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from protos import coordinator_pb2 as pb


class RequestBatch(NamedTuple):
    """One batch of a CommitFile request, its fields read from the protobuf once."""

    topic_id: bytes
    partition: int
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    batch_max_timestamp: int
    magic: int
    timestamp_type: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    # Transactions (DESIGN §4b): a marker's control type and coordinator epoch mean nothing on other batches.
    is_transactional: bool
    is_control: bool
    control_type: int
    coordinator_epoch: int


_read_batch = operator.attrgetter(*RequestBatch._fields)


def request_batches(batches: Iterable[pb.CommitFileRequest.Batch]) -> list[RequestBatch]:
    new = tuple.__new__
    return [new(RequestBatch, _read_batch(batch)) for batch in batches]


class BatchOutcome(NamedTuple):
    error_code: ErrorCode
    message: str = ""
    assigned_base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    is_duplicate: bool = False
    is_retry: bool = False  # the first answer again, for a retried commit (DESIGN §6a)


@dataclass(frozen=True, slots=True)
class CommitPart:
    """The batches of one CommitFile that belong to one coordinator, with their structure verdicts."""

    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: tuple[int, ...]
    batches: tuple[RequestBatch, ...]
    problems: tuple[ItemError | None, ...]


def reject_all(part: CommitPart, message: str) -> Result[list[BatchOutcome]]:
    """INVALID_REQUEST for every batch of the part: nothing of it is written."""
    return Result([], [BatchOutcome(ErrorCode.INVALID_REQUEST, message) for _ in part.batches])
