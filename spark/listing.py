"""Listing the object store on executors, split by key prefix (DESIGN §7, step 2).

WAL keys are `<prefix>wal/<xx>/<uuid>.wal` with 256 fan-out values of `<xx>`.
The listing is split into 257 slices: one per fan-out block `<prefix>wal/<xx>`
(no trailing '/', so that a stray `<prefix>wal/<xx>.bak` next to the block's
directory is listed by the block's own slice), and one slice for the rest of
the prefix, which walks the key space in order and jumps over the blocks it
meets (`start_after` = a block followed by the highest code point). No key can
sort between two blocks whose names differ only by consecutive last digits
(`wal/a3`, `wal/a4`): so a jump clears a whole run of them, `wal/<h>0`..`<h>9`
or `wal/<h>a`..`<h>f`, and the rest slice restarts at most 32 times, reading
one key of each run it meets (on the local backend, one directory per run). Slices are spread round-robin over the
listing tasks; each task opens its own store and lists its slices one after
the other. Nothing is collected: a task yields one row per object, tagged

- `foreign`: the key after the prefix does not match the WAL key pattern; counted and left alone;
- `young`: a WAL key last modified at or after the threshold; counted, never a candidate;
- `candidate`: a WAL key older than the threshold; the coordinators are asked about it next.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from coordinator.files.object_store import (
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    StoreConfig,
    open_object_store,
    wal_fanout_prefixes,
)

FOREIGN = "foreign"
YOUNG = "young"
CANDIDATE = "candidate"
KINDS = (FOREIGN, YOUNG, CANDIDATE)
# Sorts after every character a key can hold after a block's name: the rest slice resumes past the block.
KEY_ORDER_MAX = "\U0010ffff"
_HEX_PAIR = re.compile(r"[0-9a-f]{2}")
_DIGIT_RUNS = ("0123456789", "abcdef")  # consecutive code points: nothing sorts between two of a run

# A listed object: (key, size in bytes, last modified in ms since the epoch, kind).
ListedRow = tuple[str, int, int, str]


@dataclass(frozen=True, slots=True)
class ListingSlice:
    prefix: str  # list the keys that start with this
    skip_blocks: bool = False  # the rest of the prefix: jump over the fan-out blocks (their own slices list them)


@dataclass(frozen=True, slots=True)
class ListingRules:
    """What a listing task needs besides its slices; picklable."""

    store: StoreConfig
    key_pattern: str
    threshold_ms: int

    @property
    def prefix(self) -> str:
        return self.store.prefix


def listing_slices(prefix: str) -> list[ListingSlice]:
    """The 256 fan-out blocks, then the rest of the prefix."""
    return [ListingSlice(p.removesuffix("/")) for p in wal_fanout_prefixes(prefix)] + [ListingSlice(prefix, True)]


def spread(slices: list[ListingSlice], tasks: int) -> list[list[ListingSlice]]:
    """Round-robin: task i lists slices i, i + tasks, ...; never an empty task."""
    tasks = max(1, min(tasks, len(slices)))
    return [slices[i::tasks] for i in range(tasks)]


def block_of(key: str, prefix: str) -> str | None:
    """The fan-out block `<prefix>wal/<xx>` a key starts with, or None."""
    base = prefix + "wal/"
    if key.startswith(base) and _HEX_PAIR.fullmatch(key, len(base), len(base) + 2):
        return key[: len(base) + 2]
    return None


def block_run(block: str) -> list[str]:
    """The blocks sorting next to `block` with no key possible between them: its last digit's run, in order."""
    run = _DIGIT_RUNS[0] if block[-1] in _DIGIT_RUNS[0] else _DIGIT_RUNS[1]
    return [block[:-1] + digit for digit in run]


def list_outside_blocks(store: ObjectStore, prefix: str) -> Iterator[ObjectInfo]:
    """Keys under `prefix` outside every fan-out block, in order; one restart at most per run of blocks met."""
    skipped: set[str] = set()
    start_after = ""
    while True:
        resume_after = None
        listing = store.list(prefix, start_after)
        try:
            for info in listing:
                block = block_of(info.key, prefix)
                if block is None:
                    yield info
                elif block not in skipped:  # a key past KEY_ORDER_MAX in a skipped block is dropped, not re-jumped
                    run = block_run(block)
                    skipped.update(run)
                    resume_after = run[-1] + KEY_ORDER_MAX
                    break
        finally:
            close = getattr(listing, "close", None)
            if close is not None:
                close()
        if resume_after is None:
            return
        start_after = resume_after


def list_slice(store: ObjectStore, listing_slice: ListingSlice) -> Iterator[ObjectInfo]:
    if listing_slice.skip_blocks:
        return list_outside_blocks(store, listing_slice.prefix)
    return store.list(listing_slice.prefix)


def kind_of(key: str, last_modified_ms: int, prefix: str, pattern: re.Pattern[str], threshold_ms: int) -> str:
    # Matched on a copy, not with `pos`: a user's pattern may anchor with '^', which `pos` would defeat.
    if not key.startswith(prefix) or pattern.fullmatch(key[len(prefix) :]) is None:
        return FOREIGN
    return CANDIDATE if last_modified_ms < threshold_ms else YOUNG


def open_existing_store(config: StoreConfig) -> ObjectStore:
    """Opens the store, refusing a local root that does not exist (opening would create an empty one).

    A missing root is a wrong path or an unmounted volume: listing a fresh empty
    directory would report nothing, and deleting from it would count every key
    as already deleted.
    """
    if config.backend == "local" and not os.path.isdir(config.local_root):
        raise ObjectStoreError(f"local object store root {config.local_root} is not a directory (unmounted?)")
    return open_object_store(config)


def list_task(slices: Iterable[ListingSlice], rules: ListingRules) -> Iterator[ListedRow]:
    """One listing task (a Spark partition): every object of its slices, tagged with its kind."""
    pattern = re.compile(rules.key_pattern)
    store = open_existing_store(rules.store)
    try:
        for listing_slice in slices:
            for info in list_slice(store, listing_slice):
                kind = kind_of(info.key, info.last_modified_ms, rules.prefix, pattern, rules.threshold_ms)
                yield (info.key, info.size, info.last_modified_ms, kind)
    finally:
        store.close()


def is_candidate(row: ListedRow) -> bool:
    return row[3] == CANDIDATE


def candidate_fields(row: ListedRow) -> tuple[str, int, int]:
    return row[0], row[1], row[2]


@dataclass(slots=True)
class ListingSummary:
    """Counts and bytes per kind of one listing task (or, merged, of all of them), with a few foreign keys."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    foreign_sample: list[str] = field(default_factory=list)

    def merge(self, other: ListingSummary, sample_max: int) -> ListingSummary:
        return ListingSummary(
            {kind: self.counts[kind] + other.counts[kind] for kind in KINDS},
            {kind: self.bytes[kind] + other.bytes[kind] for kind in KINDS},
            (self.foreign_sample + other.foreign_sample)[:sample_max],
        )


def summarize_listing(rows: Iterable[ListedRow], sample_max: int) -> Iterator[ListingSummary]:
    """One summary per partition: all the driver gets back from the listing."""
    summary = ListingSummary()
    for key, size, _, kind in rows:
        summary.counts[kind] += 1
        summary.bytes[kind] += size
        if kind == FOREIGN and len(summary.foreign_sample) < sample_max:
            summary.foreign_sample.append(key)
    yield summary
