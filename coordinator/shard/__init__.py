"""One coordinator (a shard): its lifecycle, loading, write pipeline and snapshots, behind `CoordinatorShard`."""

from coordinator.shard.availability import ShardState
from coordinator.shard.facade import CoordinatorShard, PartitionName, ShardStatistics
from coordinator.shard.loading import NEEDS_OPERATOR, failure_kind
from coordinator.shard.operation import Check, Operation
from coordinator.shard.ports import TopicRecordsApplied
from coordinator.shard.snapshots import SnapshotTaken
from coordinator.state.opening import LoadFailed

__all__ = [
    "NEEDS_OPERATOR",
    "Check",
    "CoordinatorShard",
    "LoadFailed",
    "Operation",
    "PartitionName",
    "ShardState",
    "ShardStatistics",
    "SnapshotTaken",
    "TopicRecordsApplied",
    "failure_kind",
]
