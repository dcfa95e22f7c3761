"""The LeaderChange record: a coordinator's new leadership term, durable in its log (KRaft's LeaderChangeMessage)."""

from __future__ import annotations

from coordinator.machine.kinds.kind import check_epoch_rises
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec


class LeaderChangeKind:
    name = "leader_change"

    def replay(self, view: CoordinatorView, change: rec.LeaderChange, end_offset: int) -> None:
        check_epoch_rises(view.leader_epoch, change.leader_epoch)
        view.leader_epoch = change.leader_epoch

    def apply(self, transaction: StateTransaction, change: rec.LeaderChange) -> None:
        check_epoch_rises(transaction.leader_epoch, change.leader_epoch)
        transaction.leader_epoch = change.leader_epoch
