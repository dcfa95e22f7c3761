"""What a coordinator tells about itself (statistics, disk usage, a file in flight, a partition's name), and the
statistics gathered from its lifecycle's parts: the figures `CoordinatorShard` answers with, kept apart from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, final

from coordinator.config.settings import Settings
from coordinator.runtime.shard.lifecycle import Lifecycle
from protos import records_pb2 as rec
from snapshot.snapshots import SnapshotManifest


@final
@dataclass(frozen=True, slots=True)
class ShardStatistics:
    coordinator_id: int
    state: str
    leader_epoch: int
    queued_operations: int
    queue_max_operations: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    applied_offset: int
    log_flush_count: int
    log_append_count: int
    last_snapshot_end_offset: int = -1
    last_snapshot_created_at_ms: int = -1  # -1 when the coordinator has no snapshot
    problem: str = ""  # why it is not serving (empty while ACTIVE)
    replica_lag: int = 0  # a follower's offsets behind its leader's log end, as last fetched (0 on the leader)
    leader_changes: int = 0  # new leaderships this replica was told of since the node started
    state_checkpoints: int = 0  # WAL checkpoints of the state on its own thread since it loaded
    state_checkpoints_in_apply: int = 0  # those an apply ran itself, the WAL past its hard bound
    producer_count: int = 0  # idempotent producers' states (one per partition) its committed state keeps


@final
@dataclass(frozen=True, slots=True)
class DiskUsage:
    """Bytes a coordinator's replica takes on this node's disk."""

    state_bytes: int  # the SQLite state: database and its WAL
    log_bytes: int  # the metadata-log segments
    snapshot_bytes: int  # every snapshot kept


@final
@dataclass(frozen=True, slots=True)
class FileInFlight:
    """A file this replica will hold once what is in flight lands: a record not yet applied adds it, or (on the
    leader) a commit naming it waits in the queue, not yet checked."""

    committed: rec.FileCommitted | None  # the commit's record, checked and not yet applied; else None
    queued: bool = False  # only a queued commit names it: how it will be recorded is not decided yet


class PartitionName(NamedTuple):
    topic_id: bytes
    topic_name: str
    partition: int


def shard_statistics(
    coordinator_id: int,
    lifecycle: Lifecycle,
    last_snapshot: SnapshotManifest | None,
    settings: Settings,
    state: str,
    leader_epoch: int,
) -> ShardStatistics:
    # After a failure the last pipeline's figures stay (log end, high watermark); the files are closed.
    loaded = lifecycle.loaded
    pipeline = lifecycle.pipeline
    flow = pipeline.statistics() if pipeline is not None else None
    follower = lifecycle.follower.statistics() if lifecycle.follower is not None else None
    leader = lifecycle.leader
    high_watermark = (
        follower.high_watermark if follower else leader.high_watermark if leader else flow.high_watermark if flow else 0
    )
    return ShardStatistics(
        coordinator_id=coordinator_id,
        state=state,
        leader_epoch=leader_epoch,
        queued_operations=flow.queued_operations if flow else 0,
        queue_max_operations=settings.queue_max_operations,
        log_start_offset=loaded.metadata_log.position().start_offset if loaded else -1,
        log_end_offset=follower.log_end_offset if follower else flow.log_end_offset if flow else 0,
        high_watermark=high_watermark,
        applied_offset=loaded.store.applied_offset if loaded else -1,
        log_flush_count=loaded.metadata_log.flush_count - loaded.flush_count_at_load if loaded else 0,
        log_append_count=lifecycle.append_count,
        last_snapshot_end_offset=last_snapshot.snapshot_id.end_offset if last_snapshot else -1,
        last_snapshot_created_at_ms=last_snapshot.created_at_ms if last_snapshot else -1,
        problem=lifecycle.problem,
        replica_lag=follower.lag if follower else 0,
        leader_changes=lifecycle.leader_changes,
        state_checkpoints=loaded.store.checkpoints_completed if loaded else 0,
        state_checkpoints_in_apply=loaded.store.checkpoints_in_apply if loaded else 0,
        producer_count=loaded.store.producer_count if loaded else 0,
    )


def file_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
