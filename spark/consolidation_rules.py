"""The consolidation job's rules (DESIGN §4c), as pure functions: runs, object keys, reads, extents, GETs.

- A run is consecutive live batches of one partition (each batch starts where the one before ended:
  `base_offset == previous last_offset + 1`), in offset order, up to the target object size and to the
  batches one ReplaceBatches call may move (the coordinators' `diskless.coordinator.replace.batch.max`). A gap (a
  batch in a file that was not planned: too young, too large, or beyond --max-files) ends a run, since a
  ReplaceBatches extent moves every batch of its offset range.
- A run is worth moving only if its batches come from at least two source objects: moving one file's
  piece into an object of its own saves no GET and no file.
- A run's object key is derived from what it moves (the source objects, positions and offsets), as a
  UUID-5 under the brokers' WAL key layout: a rerun after a crash between upload and ReplaceBatches plans
  the same run, writes the same bytes under the same key and commits it (ReplaceBatches' retry rule),
  so the object uploaded before the crash is not left behind.
- Source bytes are read in ranges: batches of a run lying back to back in one object are one ranged
  read. The same count is what a consumer reading the run from its start needs before consolidation
  (one GET per range); after it, one GET for the whole run.
- A batch whose bytes fail the check (CRC-32C, length, offsets) is left where it is: the run's other
  batches are laid out in the new object as extents, each a stretch of consecutive good batches.
- Runs may be sent in groups (`replace_groups`): consecutive runs of one coordinator, up to a batch bound.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from coordinator.machine.object_keys import new_wal_key
from spark.record_batches import batch_problem, read_header

# Namespace of the run keys' UUID-5 (any fixed UUID; this one is uuid5(NAMESPACE_URL, "diskless/consolidate")).
RUN_KEY_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "diskless/consolidate")


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """One live batch as GetFileMergeWorkItem answers it, with the coordinator that holds it."""

    coordinator_id: int
    topic_id: bytes
    partition: int
    base_offset: int
    last_offset: int
    object_key: str
    byte_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Run:
    coordinator_id: int
    topic_id: bytes
    partition: int
    batches: tuple[SourceBatch, ...]

    @property
    def size(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def source_keys(self) -> frozenset[str]:
        return frozenset(b.object_key for b in self.batches)


@dataclass(frozen=True, slots=True)
class ReadRange:
    object_key: str
    byte_offset: int
    size: int
    batches: tuple[SourceBatch, ...]  # in the range, in order


@dataclass(frozen=True, slots=True)
class Extent:
    """A stretch of consecutive good batches in the new object (ReplaceBatches' Extent)."""

    base_offset: int
    last_offset: int
    byte_offset: int
    size: int


def partition_runs(batches: Iterable[SourceBatch], target_bytes: int, max_batches: int = 10_000) -> list[Run]:
    """The runs worth moving among one partition's planned batches (see the module's rules); at most
    `max_batches` each, the most one ReplaceBatches call may move (`diskless.coordinator.replace.batch.max`)."""
    ordered = sorted(batches, key=lambda b: b.base_offset)
    runs: list[list[SourceBatch]] = []
    run_bytes = 0  # the current run's size, kept as it grows: summing it per batch was quadratic
    for batch in ordered:
        current = runs[-1] if runs else None
        if (
            current is None
            or batch.base_offset != current[-1].last_offset + 1
            or run_bytes + batch.size > target_bytes
            or len(current) >= max_batches
        ):
            runs.append([batch])
            run_bytes = batch.size
        else:
            current.append(batch)
            run_bytes += batch.size
    worth = [run for run in runs if len({b.object_key for b in run}) >= 2]
    return [Run(run[0].coordinator_id, run[0].topic_id, run[0].partition, tuple(run)) for run in worth]


def run_object_key(run: Run, prefix: str = "") -> str:
    """The run's object key: the same run always gets the same key (a rerun commits what a crash left)."""
    digest = hashlib.sha256()
    digest.update(run.topic_id + run.partition.to_bytes(4, "big", signed=True))
    for b in run.batches:
        digest.update(f"{b.object_key}\0{b.byte_offset}\0{b.size}\0{b.base_offset}\0{b.last_offset}\n".encode())
    return new_wal_key(prefix, uuid.uuid5(RUN_KEY_NAMESPACE, digest.hexdigest()))


def read_ranges(batches: Sequence[SourceBatch]) -> list[ReadRange]:
    """The ranged reads that fetch `batches`, in order: back-to-back batches of one object are one read."""
    ranges: list[list[SourceBatch]] = []
    for batch in batches:
        last = ranges[-1][-1] if ranges else None
        if (
            last is not None
            and last.object_key == batch.object_key
            and last.byte_offset + last.size == batch.byte_offset
        ):
            ranges[-1].append(batch)
        else:
            ranges.append([batch])
    return [
        ReadRange(r[0].object_key, r[0].byte_offset, r[-1].byte_offset + r[-1].size - r[0].byte_offset, tuple(r))
        for r in ranges
    ]


def gets_to_read(batches: Sequence[SourceBatch]) -> int:
    """GETs a consumer needs to read these batches from the first: one per ranged read."""
    return len(read_ranges(batches))


def source_batch_problem(batch: SourceBatch, data: bytes | memoryview) -> str | None:
    """Why these bytes are not the batch the coordinator describes (damaged, or another batch), or None."""
    if len(data) != batch.size:
        return f"{len(data)} bytes read, the batch has {batch.size}"
    problem = batch_problem(data)
    if problem is not None:
        return problem
    header = read_header(data)
    if header.last_offset_delta != batch.last_offset - batch.base_offset:
        return (
            f"its header says {header.last_offset_delta + 1} offsets, the coordinator "
            f"{batch.last_offset - batch.base_offset + 1}"
        )
    return None


def layout_extents(batches: Sequence[SourceBatch], good: Sequence[bool]) -> list[Extent]:
    """The extents of the good batches laid one after another in the new object, split around bad ones."""
    extents: list[Extent] = []
    position = 0
    previous_good = False
    for batch, ok in zip(batches, good, strict=True):
        if not ok:
            previous_good = False
            continue
        if previous_good:
            last = extents[-1]
            extents[-1] = Extent(last.base_offset, batch.last_offset, last.byte_offset, last.size + batch.size)
        else:
            extents.append(Extent(batch.base_offset, batch.last_offset, position, batch.size))
        position += batch.size
        previous_good = True
    return extents


def describe_batch(batch: SourceBatch) -> str:
    return (
        f"{batch.topic_id.hex()}-{batch.partition} offsets {batch.base_offset}..{batch.last_offset} in "
        f"{batch.object_key} at {batch.byte_offset}+{batch.size}"
    )


def replace_groups(runs: Iterable[Run], max_batches: int) -> Iterator[list[Run]]:
    """Consecutive runs of one coordinator whose batches add up to at most `max_batches` (one run at least;
    0: every run alone). The plan puts a coordinator's runs that start in the same source file side by side
    (spark/consolidation_planning.py), so a group's runs share their source files."""
    group: list[Run] = []
    batches = 0
    for run in runs:
        if group and (run.coordinator_id != group[0].coordinator_id or batches + len(run.batches) > max_batches):
            yield group
            group, batches = [], 0
        group.append(run)
        batches += len(run.batches)
    if group:
        yield group
