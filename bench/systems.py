"""What every benchmarked system offers the driver, and the /proc counters used to measure them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from bench.workload import CommitSpec

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


class SystemUnavailable(Exception):
    """A baseline cannot run here (a missing server or driver); the run goes on without it."""


@dataclass(frozen=True, slots=True)
class Counters:
    """Cumulative resource use of a system's processes; the driver subtracts two of them."""

    cpu_s: float
    write_bytes: int
    fsyncs: int  # -1 when the system cannot count them


class FindPosition(NamedTuple):
    partition: int
    offset: int
    max_bytes: int


class FindOutcome(NamedTuple):
    partition: int
    batches: int
    next_offset: int  # after the last batch returned, or the offset asked when none


class System(Protocol):
    name: str

    async def open(self) -> None: ...

    async def create_topic(self, name: str, partitions: int) -> int:
        """Creates the benchmark topic; returns a handle the other calls take."""
        ...

    async def commit(self, topic: int, spec: CommitSpec) -> int:
        """Commits one file; returns the batches stored (duplicates excluded). Raises on any error."""
        ...

    async def find(self, topic: int, positions: Sequence[FindPosition], fetch_max_bytes: int) -> list[FindOutcome]: ...

    async def counters(self) -> Counters: ...

    async def close(self) -> None: ...


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its threads (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def process_write_bytes(pid: int) -> int:
    """Bytes the process caused to be written to storage (/proc/<pid>/io write_bytes)."""
    try:
        with open(f"/proc/{pid}/io") as io:
            for line in io:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except PermissionError:
        return 0
    return 0


def children_of(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == pid:
            children.append(int(entry))
    return children


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (a node's reader processes, say), from /proc's children lists."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:  # ended meanwhile
            continue
        for task in tasks:
            try:
                stack += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def processes_counters(pids: Iterable[int], fsyncs: int) -> Counters:
    cpu_s = 0.0
    write_bytes = 0
    for pid in pids:
        try:
            cpu_s += process_cpu_s(pid)
            write_bytes += process_write_bytes(pid)
        except OSError:  # a process that ended between listing and reading
            continue
    return Counters(cpu_s, write_bytes, fsyncs)
