"""Segment files of the metadata log: their names, and how far a segment's frames verify from its start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.runtime.log.frame import decode_frame

SEGMENT_SUFFIX = ".log"


@dataclass(frozen=True, slots=True)
class LogPosition:
    start_offset: int
    end_offset: int  # exclusive: the next offset to write
    last_epoch: int  # epoch of the last frame, 0 if none


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[: -len(SEGMENT_SUFFIX)]) for p in directory.glob(f"*{SEGMENT_SUFFIX}"))


def walk_frames(data: bytes, base_offset: int) -> tuple[int, int, int]:
    """Frames from the start of a segment while they verify and continue: (end offset, last epoch or 0, byte end)."""
    end_offset, last_epoch, position = base_offset, 0, 0
    while (decoded := decode_frame(data, position)) is not None and decoded[0].base_offset == end_offset:
        frame, position = decoded
        end_offset, last_epoch = frame.end_offset, frame.leader_epoch
    return end_offset, last_epoch, position
