"""The CoordinatorAdmin RPCs' answers (protos/admin.proto): snapshots on demand, their listing, state checks.

The node's Router answers them (rows in coordinator/edge/rpcs.py) through the node's call gate, like the broker
contract's calls; each coordinator answers for itself, so one coordinator that is loading or failed does not fail
the call.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, MalformedRequest
from coordinator.config.settings import Settings
from coordinator.runtime.shard import CoordinatorShard
from protos import admin_pb2 as admin
from snapshot.snapshots import SnapshotManifest


def snapshot_info(manifest: SnapshotManifest) -> admin.SnapshotInfo:
    return admin.SnapshotInfo(
        end_offset=manifest.snapshot_id.end_offset,
        epoch=manifest.snapshot_id.epoch,
        size_bytes=manifest.size_bytes,
        crc32=manifest.crc32,
        applied_offset=manifest.applied_offset,
        created_at_ms=manifest.created_at_ms,
        path=str(manifest.data_path),
    )


def _shards_asked(
    shards: Sequence[CoordinatorShard], settings: Settings, coordinator_ids: Sequence[int]
) -> list[tuple[int, CoordinatorShard | None]]:
    if len(coordinator_ids) > settings.request_max_items:
        raise MalformedRequest(f"{len(coordinator_ids)} coordinator ids; at most request.max.items")
    wanted = list(coordinator_ids) or [s.coordinator_id for s in shards]
    return [(i, shards[i] if 0 <= i < len(shards) else None) for i in wanted]


async def check_state(
    shards: Sequence[CoordinatorShard], settings: Settings, request: admin.CheckStateRequest
) -> admin.CheckStateResponse:
    response = admin.CheckStateResponse()
    for coordinator_id, shard in _shards_asked(shards, settings, request.coordinator_ids):
        result = response.results.add(coordinator_id=coordinator_id)
        if shard is None:
            result.error_code, result.error_message = ErrorCode.NOT_COORDINATOR, _not_hosted(coordinator_id)
            continue
        try:
            report = await shard.check_state()
        except CoordinatorUnavailable as error:
            result.error_code, result.error_message = error.error_code, error.message
            continue
        result.sound = report.problem is None
        result.problem = report.problem or ""
        result.seconds = report.seconds
        result.state_bytes = report.size_bytes
    return response


async def create_snapshot(
    shards: Sequence[CoordinatorShard], settings: Settings, request: admin.CreateSnapshotRequest
) -> admin.CreateSnapshotResponse:
    response = admin.CreateSnapshotResponse()
    for coordinator_id, shard in _shards_asked(shards, settings, request.coordinator_ids):
        result = response.results.add(coordinator_id=coordinator_id, log_start_offset=-1)
        if shard is None:
            result.error_code, result.error_message = ErrorCode.NOT_COORDINATOR, _not_hosted(coordinator_id)
            continue
        try:
            taken = await shard.create_snapshot()
        except CoordinatorUnavailable as error:
            result.error_code, result.error_message = error.error_code, error.message
            continue
        except Exception as error:  # a failed copy is this coordinator's answer, not the call's
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            result.error_message = f"snapshot failed: {type(error).__name__}: {error}"
            continue
        result.snapshot.CopyFrom(snapshot_info(taken.manifest))
        result.log_start_offset = taken.pruned.log_start_offset
        result.deleted_segments = len(taken.pruned.deleted_segments)
        result.deleted_snapshots = len(taken.pruned.deleted_snapshots)
    return response


async def list_snapshots(
    shards: Sequence[CoordinatorShard], settings: Settings, request: admin.ListSnapshotsRequest
) -> admin.ListSnapshotsResponse:
    response = admin.ListSnapshotsResponse()
    for coordinator_id, shard in _shards_asked(shards, settings, request.coordinator_ids):
        entry = response.coordinators.add(coordinator_id=coordinator_id, log_start_offset=-1, log_end_offset=-1)
        if shard is None:
            entry.error_code, entry.error_message = ErrorCode.NOT_COORDINATOR, _not_hosted(coordinator_id)
            continue
        statistics = shard.statistics()
        entry.log_start_offset, entry.log_end_offset = statistics.log_start_offset, statistics.log_end_offset
        for check in await shard.list_snapshots(request.verify):
            entry.snapshots.add(
                info=snapshot_info(check.manifest),
                verified=request.verify and check.problem is None,
                problem=check.problem or "",
            )
    return response


def _not_hosted(coordinator_id: int) -> str:
    return f"coordinator {coordinator_id} is not hosted on this node"


# Each partition's live batches: one count over the batches' primary key (partition_key, last_offset) per partition.
_PARTITION_LOADS = (
    "SELECT topic_id, topic_name, partition, "
    "(SELECT COUNT(*) FROM batches b WHERE b.partition_key = p.partition_key) "
    "FROM partitions p ORDER BY topic_id, partition"
)


def describe_partition_loads(
    shards: Sequence[CoordinatorShard], settings: Settings, request: admin.DescribePartitionLoadsRequest
) -> admin.DescribePartitionLoadsResponse:
    """Each partition of the coordinators led here with its live batches (`diskless rebalance-partitions`).

    Only a leader answers, so that the plan is made from what the moves will start from. The counts are read in
    one read transaction per coordinator, on the node's loop: O(batches), an operator's occasional call.
    """
    response = admin.DescribePartitionLoadsResponse()
    asked = (
        _shards_asked(shards, settings, request.coordinator_ids)
        if request.coordinator_ids
        else [(s.coordinator_id, s) for s in shards if s.leads]
    )
    for coordinator_id, shard in asked:
        entry = response.coordinators.add(coordinator_id=coordinator_id)
        if shard is None or not shard.leads:
            entry.error_code = ErrorCode.NOT_COORDINATOR
            entry.error_message = f"coordinator {coordinator_id} is not led by this node"
            continue
        try:
            with shard.read_transaction() as db:
                rows = list(db.execute(_PARTITION_LOADS))
        except CoordinatorUnavailable as error:
            entry.error_code, entry.error_message = error.error_code, error.message
            continue
        for topic_id, topic_name, partition, live_batches in rows:
            entry.partitions.add(
                topic_id=topic_id, topic_name=topic_name, partition=partition, live_batches=live_batches
            )
    return response
