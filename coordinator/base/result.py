"""What a check returns: the records to append and the answer to give once they are applied."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from coordinator.base.errors import ErrorCode
from protos import records_pb2 as rec

Response = TypeVar("Response")


@dataclass(frozen=True, slots=True)
class Result(Generic[Response]):
    records: list[rec.MetadataRecord]
    response: Response


@dataclass(frozen=True, slots=True)
class ItemError:
    """A per-item Kafka error with a message saying what was wrong."""

    error_code: ErrorCode
    message: str
