"""The record kind of retention (DESIGN §4a): one bounded step of the leader's, moving partitions' log starts.

The leader decides which oldest batches expired (coordinator.topics.retention) and writes the new log starts; a
follower and a replay apply the same values, never the clock. Like RecordsDeleted, per partition: the log start
only moves forward and never past the high watermark, and the batches wholly below it leave (their files follow
DESIGN §5: hand-over, then deletion).
"""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    NO_NAMES,
    NO_PARTITION_CHANGES,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordNames,
    check_log_start_moves,
)
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec


class RetentionAppliedKind:
    name = "retention_applied"
    changes_catalog = False

    def replay(self, view: CoordinatorView, applied: rec.RetentionApplied, end_offset: int) -> None:
        for start in applied.starts:
            partition = view.partitions_by_key.get(start.partition_key)
            check_invariant(partition is not None, f"retention in partition {start.partition_key}, which is not here")
            assert partition is not None
            check_log_start_moves(
                start.partition_key, partition.log_start_offset, start.log_start_offset, partition.high_watermark
            )
            partition.log_start_offset = start.log_start_offset

    def apply(self, transaction: StateTransaction, applied: rec.RetentionApplied) -> None:
        transaction.write_high_watermarks()  # the log starts are checked against the high watermarks
        db = transaction.db
        for start in applied.starts:
            key = start.partition_key
            row = db.execute(
                "SELECT log_start_offset, high_watermark FROM partitions WHERE partition_key = ?", (key,)
            ).fetchone()
            check_invariant(row is not None, f"retention in partition {key}, which is not here")
            assert row is not None
            check_log_start_moves(key, row[0], start.log_start_offset, row[1])
            db.execute(
                "UPDATE partitions SET log_start_offset = ? WHERE partition_key = ?", (start.log_start_offset, key)
            )
            transaction.remove_batches_below(key, start.log_start_offset)

    def partition_changes(self, applied: rec.RetentionApplied) -> PartitionChanges:
        return NO_PARTITION_CHANGES  # log starts move; next offsets stay

    def names_given(self, applied: rec.RetentionApplied) -> NamesGiven:
        return NO_NAMES

    def describe(self, applied: rec.RetentionApplied, names: RecordNames) -> RecordDescription:
        starts = [(names.partition(s.partition_key), s.log_start_offset) for s in applied.starts]
        return RecordDescription(
            "retention applied: "
            + "; ".join(f"{partition} log start offset moved to {at}" for partition, at in starts),
            {"starts": [{"partition": partition, "log_start_offset": at} for partition, at in starts]},
        )
