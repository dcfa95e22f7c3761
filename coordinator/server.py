"""The gRPC edge: the DisklessCoordinator service, health, reflection, and `serve`.

Exceptions become gRPC statuses through one table (`errors.grpc_status_of`);
everything a caller can get wrong inside a well-formed call is answered per
item by the router.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.errors import CallRejected, ShuttingDown, grpc_status_of
from coordinator.node import Node
from coordinator.router import Endpoint, Router
from coordinator.settings import Settings
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["DisklessCoordinator"].full_name
Response = TypeVar("Response")


class DisklessCoordinatorService(pb_grpc.DisklessCoordinatorServicer):
    def __init__(self, router: Router) -> None:
        self._router = router
        self.ready = False
        self.stopping = False
        self._unexpected_logged: set[str] = set()

    async def _call(
        self, context: grpc.aio.ServicerContext, handler: Callable[[], Awaitable[Response] | Response]
    ) -> Response:
        try:
            if self.stopping:
                raise ShuttingDown("the node is shutting down; retry on another node or later")
            if not self.ready:
                raise ShuttingDown("the node is still loading its coordinators; retry shortly")
            outcome = handler()
            if asyncio.iscoroutine(outcome):
                outcome = await outcome
            return outcome  # type: ignore[return-value]
        except CallRejected as error:
            status, message = grpc_status_of(error)
            await context.abort(status, message)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as error:
            name = type(error).__name__
            if name not in self._unexpected_logged:  # log a new kind of failure once, in full
                self._unexpected_logged.add(name)
                log.exception("unexpected error in a call")
            status, message = grpc_status_of(error)
            await context.abort(status, message)
        raise AssertionError("unreachable")

    async def CreatePartitions(self, request: Any, context: Any) -> pb.CreatePartitionsResponse:
        return await self._call(context, lambda: self._router.create_partitions(request))

    async def DeleteTopics(self, request: Any, context: Any) -> pb.DeleteTopicsResponse:
        return await self._call(context, lambda: self._router.delete_topics(request))

    async def CommitFile(self, request: Any, context: Any) -> pb.CommitFileResponse:
        return await self._call(context, lambda: self._router.commit_file(request))

    async def DeleteRecords(self, request: Any, context: Any) -> pb.DeleteRecordsResponse:
        return await self._call(context, lambda: self._router.delete_records(request))

    async def ListOffsets(self, request: Any, context: Any) -> pb.ListOffsetsResponse:
        return await self._call(context, lambda: self._router.list_offsets(request))

    async def FindBatches(self, request: Any, context: Any) -> pb.FindBatchesResponse:
        return await self._call(context, lambda: self._router.find_batches(request))

    async def DescribeFiles(self, request: Any, context: Any) -> pb.DescribeFilesResponse:
        return await self._call(context, lambda: self._router.describe_files(request))

    async def FindCoordinator(self, request: Any, context: Any) -> pb.FindCoordinatorResponse:
        return await self._call(context, lambda: self._router.find_coordinator(request))

    async def DescribeCoordinators(self, request: Any, context: Any) -> pb.DescribeCoordinatorsResponse:
        return await self._call(context, lambda: self._router.describe_coordinators(request))


async def serve(settings: Settings) -> int:
    """Runs one node until SIGTERM or SIGINT; drains in-flight calls and returns 0."""
    node = Node(settings)
    service = DisklessCoordinatorService(node.router)
    options = [
        ("grpc.max_receive_message_length", settings.request_max_bytes),
        ("grpc.max_send_message_length", settings.request_max_bytes),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=settings.max_concurrent_rpcs)
    pb_grpc.add_DisklessCoordinatorServicer_to_server(service, server)
    health_service = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_service, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    host = settings.listen.rpartition(":")[0]
    port = server.add_insecure_port(settings.listen)
    if port == 0:
        log.error("cannot listen on %s", settings.listen)
        return 1
    for name in ("", SERVICE_NAME):
        await health_service.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    node.router.endpoint = Endpoint(host.strip("[]"), port)
    print(
        f"diskless: node {settings.node_id} listening on {host}:{port}, data in {settings.data_dir.resolve()}, "
        f"{settings.coordinators} coordinators",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loaded = await node.load()
    service.ready = True
    if loaded:
        for name in ("", SERVICE_NAME):
            await health_service.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("all %d coordinators loaded: SERVING", settings.coordinators)
    else:
        log.error("some coordinators failed to load: NOT_SERVING (see above)")
    await stop.wait()
    log.info("stopping: draining in-flight calls for up to %d ms", settings.drain_timeout_ms)
    service.stopping = True
    await health_service.enter_graceful_shutdown()
    await server.stop(settings.drain_timeout_ms / 1000)
    await node.close()
    log.info("stopped")
    return 0
