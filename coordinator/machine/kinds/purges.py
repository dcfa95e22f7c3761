"""The record kind of the purge of deleted topics' batches (DESIGN §4a): one bounded pass of the leader's.

A deleted topic's partitions that still have batches wait in `partitions_awaiting_purge`, gone for every
caller (coordinator.machine.kinds.partitions.TopicDeletedKind). Each BatchesPurged removes, per partition,
the batches below an offset the leader chose; a partition with no batch left leaves with them. Applying a
range whose batches are gone already removes nothing, so a pass the leader repeats after a failover
(its first try still unapplied in the log it took over) is harmless.
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
from protos import records_pb2 as rec


class BatchesPurgedKind(NoCatalogEffects):
    # No partition changes for the catalog: its partitions left the catalog with their topic.
    name = "batches_purged"

    def replay(self, view: CoordinatorView, purged: rec.BatchesPurged, end_offset: int) -> None:
        for purged_range in purged.ranges:  # the view holds no batch; a served partition is never purged
            check_invariant(
                purged_range.partition_key not in view.partitions_by_key,
                f"batches purged from partition {purged_range.partition_key}, which is served",
            )

    def apply(self, transaction: StateTransaction, purged: rec.BatchesPurged) -> None:
        db = transaction.db
        for purged_range in purged.ranges:
            key = purged_range.partition_key
            served = db.execute("SELECT 1 FROM partitions WHERE partition_key = ?", (key,)).fetchone()
            check_invariant(served is None, f"batches purged from partition {key}, which is served")
            transaction.remove_batches_below(key, purged_range.below_offset)
            if not transaction.has_batches(key):
                db.execute("DELETE FROM partitions_awaiting_purge WHERE partition_key = ?", (key,))

    def describe(self, purged: rec.BatchesPurged, names: RecordNames) -> RecordDescription:
        ranges = [(names.partition(r.partition_key), r.below_offset) for r in purged.ranges]
        return RecordDescription(
            "batches purged: " + "; ".join(f"{partition} below offset {below}" for partition, below in ranges),
            {"ranges": [{"partition": partition, "below_offset": below} for partition, below in ranges]},
        )
