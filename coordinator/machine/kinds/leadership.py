"""The LeaderChange record: a coordinator's new leadership term, durable in its log (KRaft's LeaderChangeMessage)."""

from __future__ import annotations

from coordinator.machine.kinds.kind import (
    NO_PARTITION_CHANGES,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordNames,
    check_epoch_rises,
)
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec


class LeaderChangeKind:
    name = "leader_change"
    changes_catalog = False

    def replay(self, view: CoordinatorView, change: rec.LeaderChange, end_offset: int) -> None:
        check_epoch_rises(view.leader_epoch, change.leader_epoch)
        view.leader_epoch = change.leader_epoch

    def apply(self, transaction: StateTransaction, change: rec.LeaderChange) -> None:
        check_epoch_rises(transaction.leader_epoch, change.leader_epoch)
        transaction.leader_epoch = change.leader_epoch

    def partition_changes(self, change: rec.LeaderChange) -> PartitionChanges:
        return NO_PARTITION_CHANGES

    def names_given(self, change: rec.LeaderChange) -> NamesGiven:
        # A recovery's plan names the node of the newest leader change it saw.
        return NamesGiven(leader_node_id=change.node_id)

    def describe(self, change: rec.LeaderChange, names: RecordNames) -> RecordDescription:
        return RecordDescription(
            f"leader change: epoch {change.leader_epoch} on node {change.node_id}",
            {"leader_epoch": change.leader_epoch, "node_id": change.node_id},
        )
