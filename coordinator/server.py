"""The gRPC edge: the DisklessCoordinator service, health, reflection, and `serve`.

Exceptions become gRPC statuses through one table (`errors.grpc_status_of`);
everything a caller can get wrong inside a well-formed call is answered per
item by the router.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.access import AccessControl
from coordinator.acl import Permission
from coordinator.admin import ADMIN_PERMISSIONS, ADMIN_SERVICE_NAME, CoordinatorAdminService
from coordinator.errors import CallRejected, PermissionDenied, ShuttingDown, Unauthenticated, grpc_status_of
from coordinator.metrics import GaugeCollector, Metrics, serve_metrics
from coordinator.node import Node
from coordinator.router import Endpoint, Router
from coordinator.security import is_loopback, server_credentials, tls_files
from coordinator.settings import Settings, SettingsError, property_name
from protos import admin_pb2_grpc, internal_pb2
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from protos import internal_pb2_grpc as internal_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["DisklessCoordinator"].full_name
Response = TypeVar("Response")
GC_YOUNG_THRESHOLD = 20_000  # allocations between young collections (CPython's default is 700)


class CallGate:
    """What every call of the node's services goes through: readiness, access, metrics, the error table."""

    def __init__(self, access: AccessControl, metrics: Metrics) -> None:
        self.access = access
        self.metrics = metrics
        self.ready = False
        self.stopping = False
        self._unexpected_logged: set[str] = set()

    async def call(
        self,
        method: str,
        context: grpc.aio.ServicerContext,
        handler: Callable[[], Awaitable[Response] | Response],
    ) -> Response:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            if self.stopping:
                raise ShuttingDown("the node is shutting down; retry on another node or later")
            self.access.admit(method, context.auth_context())
            if not self.ready:
                raise ShuttingDown("the node is still loading its coordinators; retry shortly")
            outcome = handler()
            if asyncio.iscoroutine(outcome):
                outcome = await outcome
            return outcome  # type: ignore[return-value]
        except CallRejected as error:
            code, message = grpc_status_of(error)
            if isinstance(error, Unauthenticated | PermissionDenied):
                self.metrics.denied_calls.labels(method, code.name).inc()
            await context.abort(code, message)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            name = type(error).__name__
            if name not in self._unexpected_logged:  # log a new kind of failure once, in full
                self._unexpected_logged.add(name)
                log.exception("unexpected error in a call")
            code, message = grpc_status_of(error)
            await context.abort(code, message)
        finally:
            self.metrics.rpc_requests.labels(method, code.name).inc()
            self.metrics.rpc_duration.labels(method).observe(time.perf_counter() - started)
        raise AssertionError("unreachable")


class DisklessCoordinatorService(pb_grpc.DisklessCoordinatorServicer):
    def __init__(self, router: Router, gate: CallGate) -> None:
        self._router = router
        self._gate = gate

    def _call(self, method: str, context: Any, handler: Callable[[], Any]) -> Awaitable[Any]:
        return self._gate.call(method, context, handler)

    async def CreatePartitions(self, request: Any, context: Any) -> pb.CreatePartitionsResponse:
        return await self._call("CreatePartitions", context, lambda: self._router.create_partitions(request))

    async def DeleteTopics(self, request: Any, context: Any) -> pb.DeleteTopicsResponse:
        return await self._call("DeleteTopics", context, lambda: self._router.delete_topics(request))

    async def CommitFile(self, request: Any, context: Any) -> pb.CommitFileResponse:
        return await self._call("CommitFile", context, lambda: self._router.commit_file(request))

    async def DeleteRecords(self, request: Any, context: Any) -> pb.DeleteRecordsResponse:
        return await self._call("DeleteRecords", context, lambda: self._router.delete_records(request))

    async def ListOffsets(self, request: Any, context: Any) -> pb.ListOffsetsResponse:
        return await self._call("ListOffsets", context, lambda: self._router.list_offsets(request))

    async def FindBatches(self, request: Any, context: Any) -> pb.FindBatchesResponse:
        return await self._call("FindBatches", context, lambda: self._router.find_batches(request))

    async def DescribeFiles(self, request: Any, context: Any) -> pb.DescribeFilesResponse:
        return await self._call("DescribeFiles", context, lambda: self._router.describe_files(request))

    async def FindCoordinator(self, request: Any, context: Any) -> pb.FindCoordinatorResponse:
        return await self._call("FindCoordinator", context, lambda: self._router.find_coordinator(request))

    async def DescribeCoordinators(self, request: Any, context: Any) -> pb.DescribeCoordinatorsResponse:
        return await self._call("DescribeCoordinators", context, lambda: self._router.describe_coordinators(request))


INTERNAL_SERVICE_NAME = internal_pb2.DESCRIPTOR.services_by_name["CoordinatorInternal"].full_name
INTERNAL_PERMISSIONS = {"HandOverFiles": Permission.INTERNAL, "KnownFiles": Permission.INTERNAL}


class CoordinatorInternalService(internal_grpc.CoordinatorInternalServicer):
    """Calls between coordinators (protos/internal.proto), through the same gate as every call."""

    def __init__(self, router: Router, gate: CallGate) -> None:
        self._router = router
        self._gate = gate

    async def HandOverFiles(self, request: Any, context: Any) -> internal_pb2.HandOverFilesResponse:
        return await self._gate.call("HandOverFiles", context, lambda: self._router.hand_over_files(request))

    async def KnownFiles(self, request: Any, context: Any) -> internal_pb2.KnownFilesResponse:
        return await self._gate.call("KnownFiles", context, lambda: self._router.known_files(request))


def check_exposure(settings: Settings, tls: bool) -> None:
    """Safe by default: plaintext only on loopback, and no ACL only in plaintext on loopback."""
    host = settings.listen.rpartition(":")[0]
    loopback = is_loopback(host)
    if not tls and not loopback and not settings.allow_plaintext:
        raise SettingsError(
            f"refusing to serve plaintext on {host}, which is not a loopback address: configure TLS "
            f"({property_name('ssl_certificate_location')}, {property_name('ssl_key_location')}) or pass "
            "--allow-plaintext"
        )
    if not settings.acl_file and not (loopback and not tls):
        raise SettingsError(
            f"refusing to serve {'TLS' if tls else 'plaintext'} on {host} without authorisation: set "
            f"{property_name('acl_file')} (serving without an ACL is allowed only in plaintext on loopback)"
        )


def coordinator_gauges(node: Node) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
    """Per-coordinator facts for a scrape, read on the event loop."""
    for shard in node.shards:
        statistics = shard.statistics()
        labels = {"coordinator": str(shard.coordinator_id)}
        yield ("diskless_coordinator_up", "1 when the coordinator is ACTIVE.", "gauge", labels,
               1.0 if statistics.state == "ACTIVE" else 0.0)  # fmt: skip
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
        if statistics.last_snapshot_created_at_ms >= 0:
            age_s = max(0.0, time.time() - statistics.last_snapshot_created_at_ms / 1000)
            yield ("diskless_coordinator_snapshot_age_seconds", "Seconds since the newest snapshot was taken.",
                   "gauge", labels, age_s)  # fmt: skip
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


async def serve(settings: Settings) -> int:
    """Runs one node until SIGTERM or SIGINT; drains in-flight calls and returns 0."""
    tls = tls_files(settings)
    check_exposure(settings, tls is not None)
    metrics = Metrics()
    node = Node(settings, metrics=metrics)
    metrics.watch(GaugeCollector(lambda: list(coordinator_gauges(node))))
    access = AccessControl(
        Path(settings.acl_file) if settings.acl_file else None,
        tls is not None,
        settings.ssl_client_auth,
        settings.acl_reload_interval_ms / 1000,
    )
    gate = CallGate(access, metrics)
    service = DisklessCoordinatorService(node.router, gate)
    options = [
        ("grpc.max_receive_message_length", settings.request_max_bytes),
        ("grpc.max_send_message_length", settings.request_max_bytes),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=settings.max_concurrent_rpcs)
    pb_grpc.add_DisklessCoordinatorServicer_to_server(service, server)
    access.permissions.update(ADMIN_PERMISSIONS)
    admin_pb2_grpc.add_CoordinatorAdminServicer_to_server(CoordinatorAdminService(node.router, gate), server)
    access.permissions.update(INTERNAL_PERMISSIONS)
    internal_grpc.add_CoordinatorInternalServicer_to_server(CoordinatorInternalService(node.router, gate), server)
    health_service = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_service, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, ADMIN_SERVICE_NAME, INTERNAL_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    host = settings.listen.rpartition(":")[0]
    if tls is None:
        port = server.add_insecure_port(settings.listen)
    else:
        port = server.add_secure_port(settings.listen, server_credentials(tls, settings.ssl_client_auth))
    if port == 0:
        log.error("cannot listen on %s", settings.listen)
        return 1
    for name in ("", SERVICE_NAME):
        await health_service.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    node.router.endpoint = Endpoint(host.strip("[]"), port)
    metrics_server = None
    if settings.metrics_listen:
        metrics_host, _, metrics_port = settings.metrics_listen.rpartition(":")
        metrics_server = await serve_metrics(metrics_host.strip("[]"), int(metrics_port), metrics.render)
        bound = metrics_server.sockets[0].getsockname()
        log.info("metrics at http://%s:%d/metrics", bound[0], bound[1])
    security = f"TLS (client auth {settings.ssl_client_auth})" if tls else "plaintext"
    print(
        f"diskless: node {settings.node_id} listening on {host}:{port}, data in {settings.data_dir.resolve()}, "
        f"{settings.coordinators} coordinators, {security}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loaded = await node.load()
    # The loaded state is long-lived: kept out of the collector's scans, and young collections made rarer,
    # because the commit path allocates many short-lived tuples (a few percent of its time went to the GC).
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    gate.ready = True
    node.start_file_workers()
    if loaded:
        for name in ("", SERVICE_NAME):
            await health_service.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("all %d coordinators loaded: SERVING", settings.coordinators)
    else:
        log.error("some coordinators failed to load: NOT_SERVING (see above)")
    await stop.wait()
    log.info("stopping: draining in-flight calls for up to %d ms", settings.drain_timeout_ms)
    gate.stopping = True
    await health_service.enter_graceful_shutdown()
    await server.stop(settings.drain_timeout_ms / 1000)
    if metrics_server is not None:
        metrics_server.close()
        await metrics_server.wait_closed()
    await node.close()
    log.info("stopped")
    return 0
