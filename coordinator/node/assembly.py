"""The node's gRPC server: the DisklessCoordinator service, health, reflection, and `serve`.

Exceptions become gRPC statuses through one table (`errors.grpc_status_of`);
everything a caller can get wrong inside a well-formed call is answered per
item by the router.

The node's services take their requests as bytes through the edge
(`coordinator/edge/gate.py`): admitted within the node's bounds, then parsed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar, final

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.base.child_processes import freeze_loaded_state
from coordinator.base.clock import Clock, SystemClock
from coordinator.base.metrics import GaugeCollector, Metrics, serve_metrics
from coordinator.base.workers import LoopWorker
from coordinator.cluster.controller import ClusterController
from coordinator.cluster.etcd_store import etcd_cluster_store
from coordinator.cluster.store import NodeEndpoint
from coordinator.config.settings import Settings, SettingsError, property_name
from coordinator.edge.access_control import AccessControl
from coordinator.edge.admission import Admission, admission_gauges
from coordinator.edge.gate import CallGate, add_service, grpc_call_counts, grpc_server
from coordinator.edge.loop import EdgeLoop, NodeHop
from coordinator.edge.tls import TlsFiles, is_loopback, server_credentials, tls_files
from coordinator.node import gauges
from coordinator.node.cluster_growth import follow_cluster_count
from coordinator.node.coordinator_count import with_recorded_count
from coordinator.node.growth import CoordinatorGrowth
from coordinator.node.node import Node, replica_on_disk
from coordinator.node.processes import commit_process
from coordinator.node.processes.commit_process import CommitProcessPlan
from coordinator.node.processes.front import NodeFront, node_layout
from coordinator.node.processes.layout import ProcessLayout
from coordinator.node.reader_advertising import ReaderAdvertising
from coordinator.node.router import Endpoint
from coordinator.node.services import SERVICE_NAME, servicers
from coordinator.node.worker_registry import (
    COMMIT_PROCESSES,
    HEALTH,
    READER_ADVERTISING,
    READER_PROCESSES,
    start_cluster_workers,
    stop_cluster_workers,
)
from coordinator.reads.find_batches import answer_bound
from coordinator.reads.readers.supervisor import ReadProcesses
from coordinator.runtime.replication.role import ReplicaRole
from coordinator.runtime.shard import CoordinatorShard, ShardState

log = logging.getLogger(__name__)
Response = TypeVar("Response")
T = TypeVar("T")


def advertised_endpoint(settings: Settings, listen_host: str, port: int) -> NodeEndpoint:
    """What etcd tells other nodes and brokers: `--advertise`, else the listen address with its bound port."""
    if settings.advertise:
        host, _, advertised_port = settings.advertise.rpartition(":")
        return NodeEndpoint(settings.node_id, host.strip("[]"), int(advertised_port))
    host = listen_host.strip("[]")
    return NodeEndpoint(settings.node_id, "127.0.0.1" if host in ("0.0.0.0", "::", "") else host, port)


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


async def set_health(health_service: health.aio.HealthServicer, status: Any) -> None:
    """The node's health as the standard health service tells it, for the server and for its main service."""
    for name in ("", SERVICE_NAME):
        await health_service.set(name, status)


async def track_health(node: Node, publish: Callable[[Any], Awaitable[None]]) -> None:
    """Health is SERVING while every coordinator serves and no background worker keeps failing, NOT_SERVING while
    any is out or failing (a load balancer's cue)."""
    serving: bool | None = None
    while True:
        now_serving = node.serving()
        if now_serving != serving:
            status = (
                health_pb2.HealthCheckResponse.SERVING if now_serving else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            await publish(status)
            if now_serving:
                log.info("all %d coordinators loaded: SERVING", len(node.shards))
            elif serving is not None:
                down = [str(shard.coordinator_id) for shard in node.shards if shard.state is not ShardState.ACTIVE]
                failing = [f"{w.name} ({w.coordinator_id})" for w in node.workers.failing()]
                log.error(
                    "NOT_SERVING: coordinators out of service: %s; workers failing: %s",
                    ", ".join(down) or "none",
                    ", ".join(failing) or "none",
                )
            serving = now_serving
        await node.wait_health_change()


class CannotListen(OSError):
    """The node's address could not be bound."""


@final
class RunningServer:
    """A node behind its gRPC server, in this process: listening once made, serving after `load()`.

    `serve` runs one until a signal; tests start several side by side on one event loop (with a
    clock they move) and stop them as `serve` would on SIGTERM.
    """

    def __init__(
        self,
        settings: Settings,
        node: Node,
        server: grpc.aio.Server,
        gate: CallGate,
        health_service: health.aio.HealthServicer,
        metrics_server: asyncio.Server | None,
        host: str,
        port: int,
        tls: bool,
        cluster: ClusterController | None = None,
        edge: EdgeLoop | None = None,
        front: NodeFront | None = None,
    ) -> None:
        self.settings = settings
        self.front = front
        self.edge = edge
        self.cluster = cluster
        self.node = node
        self.server = server
        self.host = host
        self.port = port
        self.tls = tls
        self._gate = gate
        self.admission = gate.admission  # what the edge works on at once (its gauges; tests read it)
        self._health_service = health_service
        self._metrics_server = metrics_server
        self.readers: ReadProcesses | None = None
        # Told of every role etcd sets for a coordinator here (the readers' board refuses a removed replica at once).
        self.role_listeners: list[Callable[[CoordinatorShard], None]] = []
        self.reader_advertising: ReaderAdvertising | None = None  # in a cluster: the readers named in etcd

    async def load(self) -> bool:
        """Loads every coordinator, then takes calls, starts the file workers and readers; True when all are ACTIVE."""
        await self.node.workers.open()  # the readers' and commit processes' workers start before the node loads
        self._start_readers()  # they start while the coordinators load; the board says LOADING until then
        if self.front is not None:
            self.front.processes.start(self.node.workers, COMMIT_PROCESSES)
        loaded = await self.node.load()
        if self.front is not None:  # the commit processes load their coordinators meanwhile
            await self.front.processes.wait_first_starts()
            self.node.rebuild_catalog()
            loaded = self.front.processes.all_serving()
        self._gate.ready = True
        if self.cluster is not None:
            start_cluster_workers(self.node.workers, self.cluster)
        await self.node.start_workers()
        advertising = self.reader_advertising
        if advertising is not None:
            self.node.workers.start(READER_ADVERTISING, lambda: advertising)
        if self.readers is not None:  # SERVING means FindCoordinator names the readers: clients learn them at once
            await self.readers.wait_first_starts()
        if not loaded:
            log.error("some coordinators failed to load: NOT_SERVING until every coordinator serves (see above)")
        self.node.workers.start(HEALTH, lambda: LoopWorker(partial(track_health, self.node, self._publish_health)))
        return loaded

    async def _publish_health(self, status: Any) -> None:
        await on_edge(self.edge, set_health(self._health_service, status))

    def _start_readers(self) -> None:
        """Reader processes for FindBatches (diskless.server.read.processes); in a cluster they serve the replicas
        this node hosts, leaders and followers, and are named in the node's registration in etcd."""
        if self.settings.read_processes == 0:
            return
        router = self.node.router
        advertising = self.reader_advertising

        def advertise(addresses: tuple[str, ...]) -> None:
            router.endpoint = dataclasses.replace(router.endpoint, read_addresses=addresses)
            if advertising is not None:
                advertising.set(addresses)

        if self.front is not None:  # the commit processes publish their coordinators' states on the front's board
            readers = ReadProcesses(
                self.settings, self.node.shards, self.host, advertise, self.front.board,
                self.front.processes.report_damage,
            )  # fmt: skip
        else:
            readers = ReadProcesses(self.settings, self.node.shards, self.host, advertise)
            self.node.state_listeners.append(readers.publish)
            self.role_listeners.append(readers.role_set)
        self.readers = readers
        self.node.metrics.watch(GaugeCollector(lambda: list(readers.gauges())))
        readers.start(self.node.workers, READER_PROCESSES)

    async def stop(self) -> None:
        """Drains in-flight calls for up to the drain timeout (readers' too), then closes the node."""
        await self.node.workers.stop_waiting(HEALTH.name)  # the graceful shutdown's NOT_SERVING is the last word
        log.info("stopping: draining in-flight calls for up to %d ms", self.settings.drain_timeout_ms)
        self._gate.stopping = True
        await on_edge(self.edge, self._health_service.enter_graceful_shutdown())
        await self.node.workers.stop_waiting(READER_ADVERTISING.name)
        # The readers stop before the coordinators close: none reads a state file being closed.
        readers_stopped = self.readers.stop() if self.readers is not None else asyncio.sleep(0)
        server_stopped = on_edge(self.edge, self.server.stop(self.settings.drain_timeout_ms / 1000))
        await asyncio.gather(readers_stopped, server_stopped)
        if self.edge is not None:
            self.edge.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
            await self._metrics_server.wait_closed()
        if self.cluster is not None:  # the lease is revoked: other nodes elect new leaders at once
            await stop_cluster_workers(self.node.workers)
            await self.cluster.close()
        if self.front is not None:
            await self.front.stop()
        await self.node.close()
        log.info("stopped")


@final
class RolesTold:
    """A coordinator as the cluster's controller drives it, with listeners told of each role it sets."""

    def __init__(self, shard: CoordinatorShard, listeners: list[Callable[[CoordinatorShard], None]]) -> None:
        self.coordinator_id = shard.coordinator_id
        self._shard = shard
        self._listeners = listeners

    def set_role(self, role: ReplicaRole) -> None:
        self._shard.set_role(role)
        for listener in self._listeners:
            listener(self._shard)


async def on_edge(edge: EdgeLoop | None, work: Coroutine[Any, Any, T]) -> T:
    """Runs `work` where the gRPC server lives: on its edge loop, or here when it shares the node's loop."""
    return await (edge.run(work) if edge is not None else work)


async def _listen(settings: Settings, tls: TlsFiles | None) -> tuple[grpc.aio.Server, int]:
    """The gRPC server, bound (made on the loop it will run on: grpc.aio binds a server to its loop)."""
    server = grpc_server(settings)
    try:
        if tls is None:
            port = server.add_insecure_port(settings.listen)
        else:
            port = server.add_secure_port(settings.listen, server_credentials(tls, settings.ssl_client_auth))
    except RuntimeError as error:  # grpcio raises this when the address cannot be bound (in use, not local)
        raise CannotListen(f"cannot listen on {settings.listen}: {error}") from None
    return server, port


async def _open(server: grpc.aio.Server, services: list[tuple[ServiceDescriptor, object]], gate: CallGate) -> Any:
    """Adds the services, health (NOT_SERVING) and reflection, and starts serving; returns the health servicer."""
    for service, servicer in services:
        add_service(server, service, servicer, gate)
    health_service = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_service, server)
    names = (*(service.full_name for service, _ in services), health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    await set_health(health_service, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    return health_service


async def start_server(
    settings: Settings, clock: Clock | None = None, commit_process: CommitProcessPlan | None = None
) -> RunningServer:
    """Builds the node and its services and starts listening (health NOT_SERVING until `load()`).

    Raises SettingsError for an unsafe exposure and CannotListen when the address cannot be bound.
    """
    tls = tls_files(settings)
    check_exposure(settings, tls is not None)
    metrics = Metrics()
    edge = EdgeLoop() if settings.edge_loop else None
    try:
        return await _start(settings, clock, tls, metrics, edge, commit_process)
    except BaseException:
        if edge is not None:
            edge.close()
        raise


async def _start(
    settings: Settings,
    clock: Clock | None,
    tls: TlsFiles | None,
    metrics: Metrics,
    edge: EdgeLoop | None,
    commit_process: CommitProcessPlan | None,
) -> RunningServer:
    server, port = await on_edge(edge, _listen(settings, tls))
    host = settings.listen.rpartition(":")[0]
    if port == 0:
        raise CannotListen(f"cannot listen on {settings.listen}")
    cluster: ClusterController | None = None
    roles: dict[int, ReplicaRole | None] | None = None
    layout: ProcessLayout | None = None
    if settings.clustered:
        # The port is bound before joining: the address registered in etcd is the one that will answer.
        cluster = ClusterController(
            settings, advertised_endpoint(settings, host, port), etcd_cluster_store(settings), clock or SystemClock(),
            replica_on_disk=partial(replica_on_disk, settings.data_dir),
        )  # fmt: skip
        config = await cluster.join()
        settings = dataclasses.replace(settings, coordinators=config.coordinators)
        roles = dict(cluster.initial_roles())
    else:  # a lone node: the count an add recorded wins over --coordinators (coordinator/node/coordinator_count.py)
        settings = with_recorded_count(settings)
        if commit_process is not None:  # one of a node's commit processes: it leads its share of the coordinators
            roles = commit_process.layout.roles(settings.coordinators, commit_process.index)
        elif settings.node_processes > 1:  # the first process of a node spread over commit processes: it leads none
            layout = node_layout(settings, host, advertised_endpoint(settings, host, port))
            roles = layout.roles(settings.coordinators, None)
    catalog_address = commit_process.layout.front_address if commit_process is not None else None
    node = Node(settings, clock=clock, metrics=metrics, roles=roles, link=cluster, catalog_address=catalog_address)
    front = NodeFront(node, clock or SystemClock(), layout, run_commit_process) if layout is not None else None
    if front is not None:
        metrics.watch(GaugeCollector(lambda: list(front.processes.gauges())))
    role_listeners: list[Callable[[CoordinatorShard], None]] = []
    if cluster is not None:
        cluster.attach(node.peers, [RolesTold(shard, role_listeners) for shard in node.shards])
        node.router.elector = cluster
    metrics.watch(GaugeCollector(lambda: list(gauges.coordinator_gauges(node))))
    access = AccessControl(
        Path(settings.acl_file) if settings.acl_file else None,
        tls is not None,
        settings.ssl_client_auth,
        settings.acl_reload_interval_ms / 1000,
    )
    admission = Admission(
        settings.max_concurrent_rpcs, settings.max_inflight_request_bytes, settings.min_remaining_deadline_ms,
        settings.max_inflight_response_bytes,
    )  # fmt: skip
    metrics.watch(GaugeCollector(lambda: [*admission_gauges(admission), *grpc_call_counts()]))
    hop = NodeHop(asyncio.get_running_loop()) if edge is not None else None
    # FindBatches' answers are bounded too: a small request can ask for up to the message bound.
    gate = CallGate(access, metrics, admission, hop=hop, answer_bounds={"FindBatches": partial(answer_bound, settings)})
    services = servicers(node.router, gate)  # one method per row of coordinator/edge/rpcs.py
    health_service = await on_edge(edge, _open(server, services, gate))
    node.router.endpoint = Endpoint(host.strip("[]"), port)
    if cluster is not None:
        node.router.endpoint = dataclasses.replace(node.router.endpoint, peer_read_addresses=cluster.read_addresses_of)
    metrics_server = None
    if settings.metrics_listen:
        metrics_host, _, metrics_port = settings.metrics_listen.rpartition(":")
        metrics_server = await serve_metrics(metrics_host.strip("[]"), int(metrics_port), metrics.render)
        bound = metrics_server.sockets[0].getsockname()
        log.info("metrics at http://%s:%d/metrics", bound[0], bound[1])
    running = RunningServer(
        settings, node, server, gate, health_service, metrics_server, host, port, tls is not None, cluster, edge, front
    )
    running.role_listeners = role_listeners
    if cluster is None and commit_process is None and front is None:  # a lone node of one process adds online
        node.router.growth = CoordinatorGrowth(node, lambda: running.readers)
    if cluster is not None:  # any node of a cluster adds online, and follows every add (the count is etcd's)
        follow_cluster_count(node, cluster, lambda shard: RolesTold(shard, role_listeners), lambda: running.readers)
    if cluster is not None and settings.read_processes > 0:
        running.reader_advertising = ReaderAdvertising(
            cluster, clock or SystemClock(), settings.cluster_refresh_interval_ms
        )
    return running


def _spread(running: RunningServer) -> str:
    """How the node's coordinators are spread over its commit processes, for the start-up line."""
    if running.front is None:
        return ""
    layout = running.front.layout
    return f" led by {layout.count} commit processes on " + ", ".join(layout.address(i) for i in range(layout.count))


def run_commit_process(plan: CommitProcessPlan, board_words: Any, connection: Connection) -> None:
    """A commit process's entry point (spawned by coordinator/node/processes/supervisor.py)."""
    set_thread_switch_interval(plan.settings)
    commit_process.run(
        plan, board_words, connection, lambda p: start_server(p.settings, commit_process=p), freeze_loaded_state
    )


def set_thread_switch_interval(settings: Settings) -> None:
    """The interpreter's GIL switch interval, for the whole process: set by a node process's entry point only (a
    node started inside a test's process leaves the test's interpreter as it is)."""
    sys.setswitchinterval(settings.thread_switch_interval_us / 1_000_000)


async def serve(settings: Settings) -> int:
    """Runs one node until SIGTERM or SIGINT; drains in-flight calls and returns 0."""
    set_thread_switch_interval(settings)
    try:
        running = await start_server(settings)
    except CannotListen as error:
        log.error("%s", error)
        return 1
    security = f"TLS (client auth {settings.ssl_client_auth})" if running.tls else "plaintext"
    print(
        f"diskless: node {settings.node_id} listening on {running.host}:{running.port}, data in "
        f"{settings.data_dir.resolve()}, {len(running.node.shards)} coordinators{_spread(running)}, {security}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await running.load()
    freeze_loaded_state()
    await stop.wait()
    await running.stop()
    return 0
