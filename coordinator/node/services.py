"""The node's own gRPC services: the DisklessCoordinator contract and the calls between coordinators.

Each method hands its call to the gate (coordinator/edge/gate.py: readiness, access, metrics, the error table)
with the router's operation to run; the router answers per item.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from coordinator.base.errors import CallRejected, grpc_status_of
from coordinator.edge.acl_file import Permission
from coordinator.edge.gate import CallGate
from coordinator.node.router import Router
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from protos import internal_pb2
from protos import internal_pb2_grpc as internal_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["DisklessCoordinator"].full_name
# Marks a call a node's first process passed on to its own processes (coordinator/node/processes/front.py).
PASSED_ON = ("x-diskless-passed-on", "1")
Response = TypeVar("Response")


class DisklessCoordinatorService(pb_grpc.DisklessCoordinatorServicer):
    def __init__(self, router: Router, gate: CallGate) -> None:
        self._router = router
        self._gate = gate

    def _call(
        self, method: str, context: Any, handler: Callable[[], Awaitable[Response] | Response]
    ) -> Awaitable[Response]:
        return self._gate.call(method, context, handler)

    def _answering(self, context: Any) -> Router:
        """The router, or its local part for a call the node passed on to itself (never passed on again)."""
        local = self._router.local
        if local is self._router or PASSED_ON not in (context.invocation_metadata() or ()):
            return self._router
        return local

    async def CreatePartitions(self, request: pb.CreatePartitionsRequest, context: Any) -> pb.CreatePartitionsResponse:
        return await self._call("CreatePartitions", context, lambda: self._router.create_partitions(request))

    async def DeleteTopics(self, request: pb.DeleteTopicsRequest, context: Any) -> pb.DeleteTopicsResponse:
        return await self._call("DeleteTopics", context, lambda: self._router.delete_topics(request))

    async def CommitFile(self, request: pb.CommitFileRequest, context: Any) -> pb.CommitFileResponse:
        return await self._call("CommitFile", context, lambda: self._answering(context).commit_file(request))

    async def DeleteRecords(self, request: pb.DeleteRecordsRequest, context: Any) -> pb.DeleteRecordsResponse:
        return await self._call("DeleteRecords", context, lambda: self._answering(context).delete_records(request))

    async def ListOffsets(self, request: pb.ListOffsetsRequest, context: Any) -> pb.ListOffsetsResponse:
        return await self._call("ListOffsets", context, lambda: self._answering(context).list_offsets(request))

    # The answer is serialized already (coordinator/machine/batch_entries.py); the edge sends bytes as they are.
    async def FindBatches(self, request: pb.FindBatchesRequest, context: Any) -> bytes:  # type: ignore[override]
        return await self._call("FindBatches", context, lambda: self._router.find_batches(request))

    async def DescribeFiles(self, request: pb.DescribeFilesRequest, context: Any) -> pb.DescribeFilesResponse:
        return await self._call("DescribeFiles", context, lambda: self._answering(context).describe_files(request))

    async def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: Any) -> pb.FindCoordinatorResponse:
        return await self._call("FindCoordinator", context, lambda: self._router.find_coordinator(request))

    async def DescribeCoordinators(
        self, request: pb.DescribeCoordinatorsRequest, context: Any
    ) -> pb.DescribeCoordinatorsResponse:
        return await self._call("DescribeCoordinators", context, lambda: self._router.describe_coordinators(request))

    async def ListFileKeys(self, request: pb.ListFileKeysRequest, context: Any) -> AsyncIterator[pb.ListFileKeysPage]:
        pages = self._gate.stream("ListFileKeys", context, lambda: self._router.list_file_keys(request))
        async with contextlib.aclosing(pages) as stream:
            async for page in stream:
                yield page


INTERNAL_SERVICE_NAME = internal_pb2.DESCRIPTOR.services_by_name["CoordinatorInternal"].full_name
INTERNAL_PERMISSIONS = {
    name: Permission.INTERNAL
    for name in ("HandOverFiles", "KnownFiles", "FetchLog", "OffsetForLeaderEpoch", "FetchSnapshot", "ChangeTopic")
}


class CoordinatorInternalService(internal_grpc.CoordinatorInternalServicer):
    """Calls between coordinators (protos/internal.proto), through the same gate as every call."""

    def __init__(self, router: Router, gate: CallGate) -> None:
        self._router = router
        self._gate = gate

    async def HandOverFiles(self, request: Any, context: Any) -> internal_pb2.HandOverFilesResponse:
        return await self._gate.call("HandOverFiles", context, lambda: self._router.hand_over_files(request))

    async def KnownFiles(self, request: Any, context: Any) -> internal_pb2.KnownFilesResponse:
        return await self._gate.call("KnownFiles", context, lambda: self._router.known_files(request))

    async def FetchLog(self, request: Any, context: Any) -> internal_pb2.FetchLogResponse:
        return await self._gate.call("FetchLog", context, lambda: self._router.fetch_log(request))

    async def OffsetForLeaderEpoch(self, request: Any, context: Any) -> internal_pb2.OffsetForLeaderEpochResponse:
        return await self._gate.call(
            "OffsetForLeaderEpoch", context, lambda: self._router.offset_for_leader_epoch(request)
        )

    async def ChangeTopic(self, request: Any, context: Any) -> internal_pb2.ChangeTopicResponse:
        return await self._gate.call("ChangeTopic", context, lambda: self._router.change_topic(request))

    async def FetchSnapshot(self, request: Any, context: Any) -> AsyncIterator[internal_pb2.FetchSnapshotChunk]:
        # A stream: admitted here by the same ACL as every internal call, outside the unary gate.
        try:
            self._gate.access.admit("FetchSnapshot", context.auth_context())
        except CallRejected as error:
            code, message = grpc_status_of(error)
            await context.abort(code, message)
        async with contextlib.aclosing(self._gate.node_items(lambda: self._router.fetch_snapshot(request))) as chunks:
            async for chunk in chunks:
                yield chunk
