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

from coordinator.state import reads
from protos import coordinator_pb2 as pb


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
    result: pb.FindBatchesResponse.PartitionResult,
) -> None:
    """Fills `result` for a known partition (error, watermarks, batches)."""
    result.log_start_offset = offsets.log_start_offset
    result.high_watermark = offsets.high_watermark
    if offset < offsets.log_start_offset or offset > offsets.high_watermark:
        result.error_code = pb.OFFSET_OUT_OF_RANGE
        result.error_message = (
            f"offset {offset} is outside {offsets.log_start_offset}..{offsets.high_watermark} "
            "(log start..high watermark)"
        )
        return
    if offset == offsets.high_watermark or budget.spent:
        return
    limit = budget.results_max - budget.total_batches
    if budget.max_batches_per_partition > 0:
        limit = min(limit, budget.max_batches_per_partition)
    partition_bytes = 0
    # I3, checked on what is read: the first batch holds `offset`, each next one starts where the previous
    # ended, all below the high watermark. Damaged pages can hide rows without any error from SQLite.
    expected = offset
    rows = 0
    for row in reads.batches_from(db, offsets.partition_key, offset, limit):
        rows += 1
        size = row[4]
        if budget.total_batches > 0 and (
            partition_bytes >= max_partition_bytes or budget.total_bytes >= budget.fetch_max_bytes
        ):
            break
        base_offset, last_offset = row[5], row[6]
        if not (base_offset <= expected <= last_offset if expected == offset else base_offset == expected) or (
            last_offset >= offsets.high_watermark
        ):
            raise reads.StateDamaged(
                f"partition key {offsets.partition_key}: batch {base_offset}..{last_offset} read where offset "
                f"{expected} was expected (high watermark {offsets.high_watermark})"
            )
        expected = last_offset + 1
        result.batches.add(
            batch_id=row[0],
            object_key=row[1],
            magic=row[2],
            byte_offset=row[3],
            byte_size=size,
            base_offset=row[5],
            last_offset=row[6],
            log_append_timestamp=row[7],
            batch_max_timestamp=row[8],
            timestamp_type=row[9],
        )
        partition_bytes += size
        budget.total_bytes += size
        budget.total_batches += 1
    if rows == 0:
        raise reads.StateDamaged(
            f"partition key {offsets.partition_key}: no batch holds offset {offset}, below the high watermark "
            f"{offsets.high_watermark}"
        )
