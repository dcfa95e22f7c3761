"""The CoordinatorAdmin gRPC service (protos/admin.proto): snapshots on demand and their listing.

Calls go through the node's call gate (readiness, access control, metrics,
the error table) like the broker contract's; each coordinator answers for
itself, so one coordinator that is loading or failed does not fail the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import grpc

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, MalformedRequest
from coordinator.edge.acl_file import Permission
from coordinator.node.router import Router
from coordinator.runtime.shard import CoordinatorShard
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc as admin_grpc
from snapshot.snapshots import SnapshotManifest

ADMIN_SERVICE_NAME = admin.DESCRIPTOR.services_by_name["CoordinatorAdmin"].full_name
# Taking a snapshot changes the node (files, log start): ALTER; listing is read-only.
# CheckState may take a coordinator out of service to rebuild it: an ALTER, like taking a snapshot.
ADMIN_PERMISSIONS = {
    "CreateSnapshot": Permission.ALTER,
    "ListSnapshots": Permission.DESCRIBE,
    "CheckState": Permission.ALTER,
}
Response = TypeVar("Response")


class Gate(Protocol):
    """edge.CallGate, as this service sees it."""

    def call(
        self,
        method: str,
        context: grpc.aio.ServicerContext[Any, Any],
        handler: Callable[[], Awaitable[Response] | Response],
    ) -> Awaitable[Response]: ...


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


class CoordinatorAdminService(admin_grpc.CoordinatorAdminServicer):
    def __init__(self, router: Router, gate: Gate) -> None:
        self._router = router
        self._gate = gate

    def _shards(self, coordinator_ids: Sequence[int]) -> list[tuple[int, CoordinatorShard | None]]:
        if len(coordinator_ids) > self._router.settings.request_max_items:
            raise MalformedRequest(f"{len(coordinator_ids)} coordinator ids; at most request.max.items")
        shards = self._router.shards
        wanted = list(coordinator_ids) or [s.coordinator_id for s in shards]
        return [(i, shards[i] if 0 <= i < len(shards) else None) for i in wanted]

    async def CreateSnapshot(self, request: Any, context: Any) -> admin.CreateSnapshotResponse:
        return await self._gate.call("CreateSnapshot", context, lambda: self._create(request))

    async def ListSnapshots(self, request: Any, context: Any) -> admin.ListSnapshotsResponse:
        return await self._gate.call("ListSnapshots", context, lambda: self._list(request))

    async def CheckState(self, request: Any, context: Any) -> admin.CheckStateResponse:
        return await self._gate.call("CheckState", context, lambda: self._check_state(request))

    async def _check_state(self, request: admin.CheckStateRequest) -> admin.CheckStateResponse:
        response = admin.CheckStateResponse()
        for coordinator_id, shard in self._shards(request.coordinator_ids):
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

    async def _create(self, request: admin.CreateSnapshotRequest) -> admin.CreateSnapshotResponse:
        response = admin.CreateSnapshotResponse()
        for coordinator_id, shard in self._shards(request.coordinator_ids):
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

    async def _list(self, request: admin.ListSnapshotsRequest) -> admin.ListSnapshotsResponse:
        response = admin.ListSnapshotsResponse()
        for coordinator_id, shard in self._shards(request.coordinator_ids):
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
