"""Reader processes' call counts in shared memory: each reader writes its own row, the node reads them for /metrics.

One writer per row (the reader), so plain increments suffice; the node reads whole words, which may lag a
call behind, as any scrape does.
"""

from __future__ import annotations

import multiprocessing.sharedctypes
from collections.abc import Iterator
from typing import Any, final

import grpc

STATUS_CODES = tuple(grpc.StatusCode)
_SECONDS_SLOT = len(STATUS_CODES)  # after one count per status: the microseconds spent answering
_ROW = _SECONDS_SLOT + 1
_INDEX = {code: i for i, code in enumerate(STATUS_CODES)}


@final
class CallCounts:
    """Calls answered by each reader process, by gRPC status, and the time spent answering them."""

    def __init__(self, words: Any) -> None:
        self.words: Any = words  # a multiprocessing RawArray of int64, one row per reader

    @classmethod
    def create(cls, readers: int) -> CallCounts:
        return cls(multiprocessing.sharedctypes.RawArray("q", readers * _ROW))

    def add(self, reader: int, code: grpc.StatusCode, seconds: float) -> None:
        base = reader * _ROW
        self.words[base + _INDEX[code]] += 1
        self.words[base + _SECONDS_SLOT] += round(seconds * 1_000_000)

    def calls(self, reader: int) -> Iterator[tuple[grpc.StatusCode, int]]:
        """(status, calls) of one reader, those it answered at least once."""
        base = reader * _ROW
        for code, index in _INDEX.items():
            count = int(self.words[base + index])
            if count:
                yield code, count

    def seconds(self, reader: int) -> float:
        return int(self.words[reader * _ROW + _SECONDS_SLOT]) / 1_000_000
