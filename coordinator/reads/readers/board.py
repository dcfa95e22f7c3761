"""The status board: one int64 per coordinator in shared memory, written by the node, read by its readers.

A word holds whether the coordinator's state may be read now (0), else the Kafka error code a caller gets,
and the generation of the state: it changes on every (re)load, so a reader reopens its connection after
the file was rebuilt or replaced. One aligned 64-bit word is written and read whole, so a reader never
sees a code of one generation with another's number.
"""

from __future__ import annotations

import multiprocessing.sharedctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, final

from coordinator.base.errors import ErrorCode

_CODE_BITS = 16  # Kafka error codes are small positive numbers
_CODE_MASK = (1 << _CODE_BITS) - 1
READABLE = 0  # ErrorCode.NONE


@final
@dataclass(frozen=True, slots=True)
class Status:
    """A coordinator's readability: `error_code` 0 when it may be read, and the generation of its state."""

    error_code: int
    generation: int

    @property
    def readable(self) -> bool:
        return self.error_code == READABLE


def pack(status: Status) -> int:
    if not 0 <= status.error_code <= _CODE_MASK or status.generation < 0:
        raise ValueError(f"cannot publish {status}")
    return status.generation << _CODE_BITS | status.error_code


def unpack(word: int) -> Status:
    return Status(word & _CODE_MASK, word >> _CODE_BITS)


@final
class StatusBoard:
    """The board over a shared array (made by `create`, passed to reader processes as it is)."""

    def __init__(self, words: Sequence[int]) -> None:
        self.words: Any = words  # a multiprocessing RawArray of int64

    @classmethod
    def create(cls, coordinators: int) -> StatusBoard:
        """A board where every coordinator is loading (nothing readable) at generation 0."""
        initial = pack(Status(int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), 0))
        return cls(multiprocessing.sharedctypes.RawArray("q", [initial] * coordinators))

    def __len__(self) -> int:
        return len(self.words)

    def publish(self, coordinator_id: int, status: Status) -> None:
        self.words[coordinator_id] = pack(status)

    def status(self, coordinator_id: int) -> Status:
        return unpack(self.words[coordinator_id])

    def readable_generation(self, coordinator_id: int) -> Status | int:
        """The generation of the coordinator's state when it may be read, else its Status (why not), from one read of
        its word: a reader asks at every call, and a Status per call cost more than the answer's check."""
        word: int = self.words[coordinator_id]
        return unpack(word) if word & _CODE_MASK else word >> _CODE_BITS
