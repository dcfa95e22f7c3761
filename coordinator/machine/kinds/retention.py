"""The record kind of retention (DESIGN §4a): one bounded step of the leader's, moving partitions' log starts.

The leader decides which oldest batches expired (coordinator.topics.retention) and writes the new log starts; a
follower and a replay apply the same values, never the clock. Like RecordsDeleted, per partition: the log start
only moves forward and never past the high watermark, and the batches wholly below it leave (their files follow
DESIGN §5: hand-over, then deletion).
"""

from __future__ import annotations

from coordinator.machine.kinds.kind import (
    NoCatalogEffects,
    RecordDescription,
    RecordNames,
)
from coordinator.machine.kinds.partitions import apply_log_start, replay_log_start
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec


class RetentionAppliedKind(NoCatalogEffects):
    # No partition changes for the catalog: log starts move; next offsets stay.
    name = "retention_applied"

    def replay(self, view: CoordinatorView, applied: rec.RetentionApplied, end_offset: int) -> None:
        for start in applied.starts:
            replay_log_start(view, start.partition_key, start.log_start_offset)

    def apply(self, transaction: StateTransaction, applied: rec.RetentionApplied) -> None:
        transaction.write_high_watermarks()  # the log starts are checked against the high watermarks
        for start in applied.starts:
            apply_log_start(transaction, start.partition_key, start.log_start_offset)

    def describe(self, applied: rec.RetentionApplied, names: RecordNames) -> RecordDescription:
        starts = [(names.partition(s.partition_key), s.log_start_offset) for s in applied.starts]
        return RecordDescription(
            "retention applied: "
            + "; ".join(f"{partition} log start offset moved to {at}" for partition, at in starts),
            {"starts": [{"partition": partition, "log_start_offset": at} for partition, at in starts]},
        )
