"""Damage inside the metadata log (not a torn tail): where it is, what still verifies after it, what to run."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator.runtime.log.frame import FrameSearchIncomplete, frame_problem, verifying_frames_after
from coordinator.runtime.log.segment_files import SEGMENT_SUFFIX

_COORDINATOR_DIRECTORY = re.compile(r"^coordinator-(\d+)$")


@dataclass(frozen=True, slots=True)
class LogDamage:
    """Where the log is damaged inside, and what still verifies after the damage."""

    segment_path: Path
    segment_size_bytes: int
    byte_position: int  # of the frame that does not verify or does not continue
    expected_offset: int  # the log offset that frame should start at: the verified log ends here
    problem: str  # what is wrong at byte_position
    following_frame_count: int  # frames after it that verify, with offsets >= expected (here and in later segments)
    following_record_count: int
    following_first_offset: int  # -1 when no frame follows
    following_end_offset: int  # exclusive, -1 when no frame follows
    search_complete: bool = True  # False: the search stopped at its budget, frames may follow unseen

    @property
    def is_torn_tail(self) -> bool:
        """Nothing verifies after it: in the newest segment, what a crash mid-write leaves."""
        return self.search_complete and self.following_frame_count == 0

    def describe(self) -> str:
        """The complete statement for an operator: where, what, what follows, and what to run."""
        where = f"{self.segment_path}, byte {self.byte_position} of {self.segment_size_bytes}"
        if not self.search_complete:
            after = "the search for valid frames after it stopped at its budget, so acknowledged records may follow it"
        elif self.following_frame_count:
            after = (
                f"{_count(self.following_frame_count, 'frame')} after it still verify "
                f"({_count(self.following_record_count, 'record')}, "
                f"log offsets {self.following_first_offset}..{self.following_end_offset - 1}): acknowledged records "
                "follow the damage"
            )
        else:
            after = "no frame after it verifies, but it is not the end of the log"
        return (
            f"metadata log damaged inside, not a torn tail: {where}, where log offset {self.expected_offset} was "
            f"expected: {self.problem}; {after}. Nothing was truncated or changed. A coordinator does not load a log "
            f"damaged inside: stop the node, run `{recover_command(self.segment_path.parent)}` to see what recovery "
            "keeps and loses, then run it again with --yes"
        )


class CorruptLogError(Exception):
    """The log is damaged inside (not at its tail): it cannot be trusted, and only an operator can settle it.

    The message is the complete statement for the operator; `damage` says the same for code.
    """

    def __init__(self, message: str, damage: LogDamage | None = None) -> None:
        super().__init__(message)
        self.damage = damage


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def recover_command(log_directory: Path) -> str:
    """The command line an operator runs to recover the log in `log_directory` (`<data>/coordinator-<n>/log`)."""
    coordinator_directory = log_directory.absolute().parent
    match = _COORDINATOR_DIRECTORY.match(coordinator_directory.name)
    if match is None:
        return f"diskless log recover --data-dir <the data directory holding {coordinator_directory}>"
    data_dir = shlex.quote(str(coordinator_directory.parent))
    return f"diskless log recover --data-dir {data_dir} --coordinator {int(match.group(1))}"


def find_damage(
    path: Path, data: bytes, position: int, expected_offset: int, later_segments: Sequence[Path] = ()
) -> LogDamage:
    """What is wrong at `position` of a segment, and which frames still verify after it (here and later)."""
    problem = frame_problem(data, position, expected_offset)
    segment_base = int(path.name[: -len(SEGMENT_SUFFIX)])
    if position == 0 and segment_base > expected_offset:
        problem = (
            f"the segment starts at log offset {segment_base}: offsets {expected_offset}..{segment_base - 1} are "
            f"missing (a segment file is missing or was cut short); {problem}"
        )
    elif position == 0 and segment_base < expected_offset:
        problem = f"the segment starts at log offset {segment_base}, inside the segment before it; {problem}"
    count = records = 0
    first = end = -1
    complete = True
    try:
        for buffer in _buffers(data, later_segments):
            for _, frame in verifying_frames_after(buffer, position if buffer is data else 0, expected_offset):
                count, records = count + 1, records + frame.record_count
                first = frame.base_offset if first < 0 else min(first, frame.base_offset)
                end = max(end, frame.end_offset)
    except FrameSearchIncomplete:
        complete = False
    return LogDamage(
        path.absolute(), len(data), position, expected_offset, problem, count, records, first, end, complete
    )


def _buffers(data: bytes, later_segments: Sequence[Path]) -> Iterator[bytes]:
    yield data
    for path in later_segments:
        yield path.read_bytes()
