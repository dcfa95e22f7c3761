"""One coordinator (a shard): its lifecycle, loading, write pipeline and snapshots, behind `CoordinatorShard`."""

from coordinator.runtime.operation import Check, Operation
from coordinator.runtime.ports import TopicRecordsApplied
from coordinator.runtime.shard.availability import ShardState
from coordinator.runtime.shard.facade import CoordinatorShard
from coordinator.runtime.shard.facts import FileInFlight, PartitionName, ShardStatistics
from coordinator.runtime.shard.loading import NEEDS_OPERATOR, failure_kind
from coordinator.runtime.shard.snapshots import SnapshotTaken
from coordinator.runtime.shard.state_opening import LoadFailed

__all__ = [
    "NEEDS_OPERATOR",
    "Check",
    "CoordinatorShard",
    "FileInFlight",
    "LoadFailed",
    "Operation",
    "PartitionName",
    "ShardState",
    "ShardStatistics",
    "SnapshotTaken",
    "TopicRecordsApplied",
    "failure_kind",
]
