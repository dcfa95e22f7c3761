"""The record kind of tiered-storage offloads (DESIGN §4a, KIP-405): RemoteLogSegmentsCommitted.

A broker's copier uploaded a partition's batches below an offset into remote log segments
(coordinator.topics.remote_segments checked it, and bounded how many batches it names); the
batches leave the coordinator, their files following DESIGN §5 like DeleteRecords' removed ones,
and the local log start moves to the segment's end. The log start stays: the records are still
readable, from remote storage. The highest effective timestamp of what left is kept with the
partition (computed here from the rows removed, so replay gives the same), for the timestamp
queries that remote data may answer.
"""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    NoCatalogEffects,
    RecordDescription,
    RecordNames,
)
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec

# Kafka's effective timestamp (as coordinator.machine.state.reads has it): the append time for LOG_APPEND_TIME
# batches, else the batch's max.
_EFFECTIVE_TIMESTAMP = f"CASE timestamp_type WHEN {pb.LOG_APPEND_TIME} THEN append_time_ms ELSE max_timestamp END"


def check_local_start_moves(partition_key: int, before: int, after: int, high_watermark: int) -> None:
    """A local log start only moves forward, and never past the high watermark."""
    check_invariant(
        before < after <= high_watermark,
        f"local log start of partition {partition_key} moves from {before} to {after} "
        f"(high watermark {high_watermark})",
    )


class RemoteLogSegmentsCommittedKind(NoCatalogEffects):
    # No partition changes for the catalog: the local start moves; the next offset stays.
    name = "remote_log_segments_committed"

    def replay(self, view: CoordinatorView, committed: rec.RemoteLogSegmentsCommitted, end_offset: int) -> None:
        partition = view.partitions_by_key.get(committed.partition_key)
        check_invariant(partition is not None, f"offload from partition {committed.partition_key}, not here")
        assert partition is not None
        check_local_start_moves(
            committed.partition_key,
            partition.local_log_start_offset,
            committed.local_log_start_offset,
            partition.high_watermark,
        )
        partition.local_log_start_offset = committed.local_log_start_offset

    def apply(self, transaction: StateTransaction, committed: rec.RemoteLogSegmentsCommitted) -> None:
        transaction.write_high_watermarks()  # the local start is checked against the high watermark
        db = transaction.db
        key, local_start = committed.partition_key, committed.local_log_start_offset
        row = db.execute(
            "SELECT local_log_start_offset, high_watermark, remote_max_timestamp FROM partitions "
            "WHERE partition_key = ?",
            (key,),
        ).fetchone()
        check_invariant(row is not None, f"offload from partition {key}, which is not here")
        assert row is not None
        before, high_watermark, remote_max_timestamp = row
        check_local_start_moves(key, before, local_start, high_watermark)
        found = db.execute(
            f"SELECT coalesce(max({_EFFECTIVE_TIMESTAMP}), -1) FROM batches "
            "WHERE partition_key = ? AND last_offset < ?",
            (key, local_start),
        ).fetchone()
        offloaded_max = -1 if found is None else int(found[0])  # an aggregate always yields its row
        db.execute(
            "UPDATE partitions SET local_log_start_offset = ?, remote_max_timestamp = ? WHERE partition_key = ?",
            (local_start, max(remote_max_timestamp, offloaded_max), key),
        )
        transaction.remove_batches_below(key, local_start)

    def describe(self, committed: rec.RemoteLogSegmentsCommitted, names: RecordNames) -> RecordDescription:
        partition = names.partition(committed.partition_key)
        return RecordDescription(
            f"remote log segments committed: {partition} local log start offset moved to "
            f"{committed.local_log_start_offset}",
            {"partition": partition, "local_log_start_offset": committed.local_log_start_offset},
        )
