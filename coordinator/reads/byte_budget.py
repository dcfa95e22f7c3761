"""FindBatches (DESIGN §4): batches from committed state under one byte budget.

The budget runs across partitions in request order: the request's first
batch is always returned; after that a batch is added while its partition's
bytes are below the partition's max and the total is below fetch_max_bytes
(checked before adding). The scan stops at the budget, so its cost follows
the result, never the consumer's lag.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from coordinator.machine.state import reads
from protos import coordinator_pb2 as pb

NO_ERROR: tuple[int, str] = (pb.NONE, "")


@dataclass(slots=True)
class FetchBudget:
    fetch_max_bytes: int
    max_batches_per_partition: int  # <= 0: no limit
    results_max: int  # across the call
    total_bytes: int = 0
    total_batches: int = 0

    @property
    def spent(self) -> bool:
        if self.total_batches >= self.results_max:
            return True
        return self.total_batches > 0 and self.total_bytes >= self.fetch_max_bytes


def fetch_partition(
    db: apsw.Connection,
    offsets: reads.PartitionOffsets,
    offset: int,
    max_partition_bytes: int,
    budget: FetchBudget,
    entries: list[bytes],
    read_committed: bool = False,
) -> tuple[int, str]:
    """Fills `entries` with a known partition's batches' serialized entries; its error (code, message), NONE and
    "" when it was read. Its offsets are the answer's whatever the error (`header_offsets`).

    `read_committed` (DESIGN §4b): only batches below the last stable offset, with the aborted transactions that
    overlap what is returned (as one more element of `entries`, after the batches').
    """
    if offset < offsets.log_start_offset or offset > offsets.high_watermark:
        return pb.OFFSET_OUT_OF_RANGE, (
            f"offset {offset} is outside {offsets.log_start_offset}..{offsets.high_watermark} "
            "(log start..high watermark)"
        )
    if offset < offsets.local_log_start_offset:  # DESIGN §4a: the broker reads it from remote storage
        return pb.OFFSET_MOVED_TO_TIERED_STORAGE, (
            f"offset {offset} is in remote log segments: {offsets.log_start_offset}..{offsets.local_log_start_offset} "
            "(log start..local log start)"
        )
    # Read committed reads up to the LSO only: a batch of an open transaction, and everything after it, waits.
    upper = offsets.last_stable_offset if read_committed else offsets.high_watermark
    if offset >= upper or budget.spent:
        return NO_ERROR
    limit = budget.results_max - budget.total_batches
    if budget.max_batches_per_partition > 0:
        limit = min(limit, budget.max_batches_per_partition)
    # The loop runs once per batch returned, the bulk of a lagging consumer's call, so it does as little per batch
    # as the rules allow. Both byte bounds are one: the partition's bytes and the call's grow together, so the
    # partition stops at `room`, the fewer bytes left of either. Its first batch is read before the loop (the only
    # one that may end the call's first partition's budget check otherwise, and the only one holding `offset`).
    room = min(max_partition_bytes, budget.fetch_max_bytes - budget.total_bytes)
    high_watermark = offsets.high_watermark
    partition_key = offsets.partition_key
    partition_bytes = 0
    start = len(entries)
    add = entries.append
    rows = reads.batches_from(db, partition_key, offset, limit)
    # I3, checked on what is read: the first batch holds `offset`, each next one starts where the previous
    # ended, all below the high watermark. Damaged pages can hide rows without any error from SQLite.
    try:
        first = next(rows, None)
        if first is None:
            raise reads.StateDamaged(
                f"partition key {partition_key}: no batch holds offset {offset}, below the high watermark "
                f"{high_watermark}"
            )
        entry, size, base_offset, last_offset = first
        if budget.total_batches > 0 and room <= 0:
            return NO_ERROR
        if not base_offset <= offset <= last_offset or last_offset >= high_watermark:
            raise _broken(partition_key, base_offset, last_offset, offset, high_watermark)
        if last_offset >= upper:  # at or past the LSO (read committed); the high watermark is checked above
            return NO_ERROR
        expected = last_offset + 1
        add(entry if entry is not None else reads.batch_entry_of(db, partition_key, last_offset))
        partition_bytes = size
        for entry, size, base_offset, last_offset in rows:
            if partition_bytes >= room:
                break
            if base_offset != expected or last_offset >= upper:
                if base_offset != expected or last_offset >= high_watermark:
                    raise _broken(partition_key, base_offset, last_offset, expected, high_watermark)
                break  # at or past the LSO (read committed)
            expected = last_offset + 1
            add(entry if entry is not None else reads.batch_entry_of(db, partition_key, last_offset))
            partition_bytes += size
    finally:
        budget.total_bytes += partition_bytes
        budget.total_batches += len(entries) - start
    if read_committed and expected > offset:
        aborted = reads.aborted_entries(db, partition_key, offset, expected)
        if aborted:  # after the batches' entries: PartitionResult.aborted_transactions, stored serialized as they are
            entries.append(aborted)
    return NO_ERROR


def _broken(partition_key: int, base_offset: int, last_offset: int, expected: int, high_watermark: int) -> Exception:
    return reads.StateDamaged(
        f"partition key {partition_key}: batch {base_offset}..{last_offset} read where offset {expected} was "
        f"expected (high watermark {high_watermark})"
    )


def header_offsets(offsets: reads.PartitionOffsets) -> tuple[int, int, int, int]:
    """A read partition's offsets as its answer carries them (batch_entries.partition_header)."""
    return (
        offsets.log_start_offset,
        offsets.high_watermark,
        offsets.local_log_start_offset,
        offsets.last_stable_offset,
    )
