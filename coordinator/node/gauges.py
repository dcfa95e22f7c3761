"""What a scrape of the node's /metrics reads of each coordinator: its pipeline, log, state, replicas, files."""

from __future__ import annotations

import time
from collections.abc import Iterator

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.machine.state import reads
from coordinator.node.node import Node
from coordinator.node.worker_registry import RETENTION
from coordinator.runtime.shard import CoordinatorShard, ShardState
from coordinator.topics.retention_worker import RetentionWorker
from protos import coordinator_pb2 as pb


def coordinator_gauges(node: Node) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
    """Per-coordinator facts for a scrape, read on the event loop."""
    for shard in node.shards:
        statistics = shard.statistics()
        labels = {"coordinator": str(shard.coordinator_id)}
        yield ("diskless_coordinator_up", "1 when the coordinator is ACTIVE.", "gauge", labels,
               1.0 if statistics.state == "ACTIVE" else 0.0)  # fmt: skip
        yield ("diskless_coordinator_damaged", "1 while the replica here is damaged and no healthy replica is alive to "
               "repair from (state DAMAGED).", "gauge", labels, 1.0 if shard.damaged else 0.0)  # fmt: skip
        yield ("diskless_coordinator_queued_operations", "Operations waiting in the coordinator's queue.", "gauge",
               labels, statistics.queued_operations)  # fmt: skip
        yield ("diskless_coordinator_log_end_offset", "Next metadata-log offset to write (exclusive end).", "gauge",
               labels, statistics.log_end_offset)  # fmt: skip
        yield ("diskless_coordinator_high_watermark", "First metadata-log offset not yet durable.", "gauge", labels,
               statistics.high_watermark)  # fmt: skip
        yield ("diskless_coordinator_applied_offset", "First metadata-log offset not yet applied to SQLite.", "gauge",
               labels, statistics.applied_offset)  # fmt: skip
        yield ("diskless_coordinator_log_flushes", "Metadata-log fsyncs since the coordinator loaded.", "counter",
               labels, statistics.log_flush_count)  # fmt: skip
        yield ("diskless_coordinator_log_appends", "Operations appended to the metadata log since it loaded.",
               "counter", labels, statistics.log_append_count)  # fmt: skip
        yield ("diskless_coordinator_state_checkpoints", "WAL checkpoints of the SQLite state on its own thread since "
               "it loaded.", "counter", labels, statistics.state_checkpoints)  # fmt: skip
        yield ("diskless_coordinator_state_checkpoints_in_apply", "WAL checkpoints an apply ran itself, the WAL past "
               "eight thresholds (the thread found no moment to finish).", "counter", labels,
               statistics.state_checkpoints_in_apply)  # fmt: skip
        yield ("diskless_coordinator_producers", "Idempotent producers' states (one per partition) this replica keeps.",
               "gauge", labels, statistics.producer_count)  # fmt: skip
        role = shard.role
        yield ("diskless_coordinator_leader", "1 when this node leads the coordinator (always, alone).", "gauge",
               labels, 1.0 if shard.leads else 0.0)  # fmt: skip
        yield ("diskless_coordinator_isr_size", "In-sync replicas of the coordinator as etcd last said (1 alone).",
               "gauge", labels, float(len(role.isr)) if role is not None else 1.0)  # fmt: skip
        yield ("diskless_coordinator_leader_epoch", "The leader epoch this replica serves in.", "gauge", labels,
               statistics.leader_epoch)  # fmt: skip
        yield ("diskless_coordinator_leader_changes", "New leaderships this replica was told of since the node "
               "started.", "counter", labels, statistics.leader_changes)  # fmt: skip
        yield ("diskless_coordinator_replica_lag", "Offsets this follower is behind its leader's log end (0 on the "
               "leader).", "gauge", labels, statistics.replica_lag)  # fmt: skip
        for progress in shard.replica_progress():  # on the leader: each follower as it sees it
            if progress.node_id == node.settings.node_id:
                continue
            follower = {**labels, "replica": str(progress.node_id)}
            yield ("diskless_coordinator_follower_lag", "Offsets a follower is behind this leader's log end (-1 "
                   "before its first fetch in the epoch).", "gauge", follower, progress.lag)  # fmt: skip
            yield ("diskless_coordinator_follower_caught_up_age_seconds", "Seconds since a follower was last caught "
                   "up with this leader's log end.", "gauge", follower, progress.caught_up_age_ms / 1000)  # fmt: skip
        awaiting = _topics_awaiting_purge(shard)
        if awaiting is not None:
            yield ("diskless_coordinator_topics_awaiting_purge", "Deleted topics whose batches the purge passes have "
                   "not all removed yet.", "gauge", labels, awaiting)  # fmt: skip
        retention = node.running_workers(RETENTION.name).get(shard.coordinator_id)
        if isinstance(retention, RetentionWorker) and retention.leads():
            yield ("diskless_coordinator_retention_pass_age_seconds", "Seconds (node clock) since the leader's last "
                   "retention pass ended here (since it became the leader here, before the first).", "gauge", labels,
                   retention.last_pass_age_ms() / 1000)  # fmt: skip
        if statistics.last_snapshot_created_at_ms >= 0:
            age_s = max(0.0, time.time() - statistics.last_snapshot_created_at_ms / 1000)
            yield ("diskless_coordinator_snapshot_age_seconds", "Seconds since the newest snapshot was taken.",
                   "gauge", labels, age_s)  # fmt: skip
    yield from fetcher_gauges(node)
    for description in node.router.describe_coordinators(pb.DescribeCoordinatorsRequest()).coordinators:
        if description.error_code != pb.NONE:
            continue
        labels = {"coordinator": str(description.coordinator_id)}
        yield ("diskless_coordinator_live_batches", "Batches still served.", "gauge", labels,
               description.live_batch_count)  # fmt: skip
        yield ("diskless_coordinator_files_awaiting_handover", "Files with no live batch here, to hand over.", "gauge",
               labels, description.files_awaiting_handover)  # fmt: skip
        yield ("diskless_coordinator_files_awaiting_deletion", "Files with no live batch, to delete after grace.",
               "gauge", labels, description.files_awaiting_deletion)  # fmt: skip
        yield ("diskless_coordinator_state_bytes", "The SQLite state on this node (database and WAL).", "gauge",
               labels, description.state_bytes)  # fmt: skip
        yield ("diskless_coordinator_log_bytes", "The metadata-log segments on this node.", "gauge", labels,
               description.log_bytes)  # fmt: skip
        yield ("diskless_coordinator_snapshot_bytes", "Every snapshot kept on this node.", "gauge", labels,
               description.snapshot_bytes)  # fmt: skip


def fetcher_gauges(node: Node) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
    """The node's replica fetcher (replication per node pair): calls against coordinators' parts tell how many
    coordinators one FetchLogs carries; calls per commit, how many round trips replication costs."""
    if node.replica_fetcher is None:
        return
    statistics = node.replica_fetcher.statistics()
    yield ("diskless_replica_fetcher_calls", "FetchLogs calls this node's replica fetcher had answered (every "
           "coordinator it follows on one leader node in each).", "counter", {}, statistics.calls)  # fmt: skip
    yield ("diskless_replica_fetcher_partitions", "Coordinators' parts of those calls.", "counter", {},
           statistics.partitions_fetched)  # fmt: skip
    yield ("diskless_replica_fetcher_sessions", "Leader nodes this node fetches from (idle ones included).", "gauge",
           {}, statistics.sessions)  # fmt: skip
    yield ("diskless_replica_fetcher_members", "Coordinators this node follows through its fetcher.", "gauge", {},
           statistics.members)  # fmt: skip


def _topics_awaiting_purge(shard: CoordinatorShard) -> float | None:
    """Read from the committed state (the same on every replica); None where the coordinator does not serve."""
    if shard.state is not ShardState.ACTIVE:
        return None
    try:
        with shard.read_transaction() as db:
            return float(reads.topics_awaiting_purge(db))
    except (CoordinatorUnavailable, *reads.DAMAGE_ERRORS):
        return None  # a scrape never fails for one coordinator: the damage is the coordinator's to report
