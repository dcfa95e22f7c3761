"""The node's first process when the node is spread over commit processes: it routes, the others commit.

It leads no coordinator. A client that routes (coordinator/client/routing_client.py) learns from FindCoordinator
where each coordinator is led and calls that commit process directly; this process answers FindCoordinator
from the whole catalog (read from the commit processes' state files) and names its reader processes for
FindBatches. A client that sends everything to the listen address keeps working: CommitFile, ListOffsets,
DeleteRecords and DescribeFiles are passed on by this process's own routing client, split by coordinator
under the same rules as a broker's; FindBatches is read here from the state files, as a reader reads them.
CreatePartitions and DeleteTopics run here (every commit process sends them here), each coordinator's part
sent to the process leading it; the catalog is read again once they are done.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar, cast, final

import grpc

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, PassedOn, PeerUnreachable
from coordinator.client.channels import channel_credentials
from coordinator.client.routing_client import RoutingClient, RoutingError
from coordinator.cluster.store import NodeEndpoint
from coordinator.config.settings import Settings
from coordinator.edge.tls import tls_files
from coordinator.node.node import Node
from coordinator.node.processes.commit_process import CommitProcessPlan
from coordinator.node.processes.layout import ProcessLayout, fixed_ports
from coordinator.node.processes.supervisor import CommitProcesses
from coordinator.node.router import Router
from coordinator.node.services import PASSED_ON
from coordinator.reads.find_batches import find_batches
from coordinator.reads.readers.board import StatusBoard
from coordinator.reads.readers.state_files import ReaderCoordinators, unavailable_for
from protos import coordinator_pb2 as pb

T = TypeVar("T")


async def _passed_on(call: Awaitable[T]) -> T:
    """A commit process's gRPC status reaches the caller as it was; a part that reached no process is UNAVAILABLE."""
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        raise PassedOn(error.code(), error.details() or "") from None
    except RoutingError as error:
        raise PeerUnreachable(str(error)) from None


def board_elsewhere(board: StatusBoard) -> Callable[[int], CoordinatorUnavailable | None]:
    """Why a coordinator led by a commit process cannot serve now, as that process publishes it."""

    def elsewhere(coordinator_id: int) -> CoordinatorUnavailable | None:
        status = board.status(coordinator_id)
        return None if status.readable else unavailable_for(coordinator_id, status)

    return elsewhere


def forwarding_client(node: Node, layout: ProcessLayout) -> RoutingClient:
    """The first process's client of its commit processes: bootstrapped from itself, with the node's identity."""
    settings = node.settings
    credentials = None
    files = tls_files(settings)
    if files is not None:
        key, certificate, ca = files.read()
        credentials = channel_credentials(ca if ca is not None else certificate, certificate, key)
    return RoutingClient(
        [layout.front_address],
        credentials=credentials,
        deadline_ms=settings.request_timeout_ms,
        rpc_timeout_ms=settings.request_timeout_ms,
        message_max_bytes=settings.request_max_bytes,
        retry=False,  # a retriable answer goes back to the caller at once, as the node alone answers it
        metadata=[PASSED_ON],  # an item with no route is sent here for its error: answered here, not passed on
    )


@final
class FrontRouter(Router):
    def __init__(
        self, node: Node, clock: Clock, layout: ProcessLayout, board: StatusBoard, view: ReaderCoordinators
    ) -> None:
        super().__init__(
            node.shards, node.settings, clock, node.metrics, node.catalog, node.peers, elsewhere=board_elsewhere(board)
        )
        self.local = Router(
            node.shards, node.settings, clock, node.metrics, node.catalog, node.peers, elsewhere=board_elsewhere(board)
        )
        self._node = node
        self._layout = layout
        self._view = view
        self._client = forwarding_client(node, layout)

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ passed on to the commit processes

    async def commit_file(self, request: pb.CommitFileRequest) -> pb.CommitFileResponse:
        return await _passed_on(self._client.commit_file(request))

    async def delete_records(self, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
        return await _passed_on(self._client.delete_records(request))

    async def list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        return await _passed_on(self._client.list_offsets(request))

    async def describe_files(self, request: pb.DescribeFilesRequest) -> pb.DescribeFilesResponse:  # type: ignore[override]
        return await _passed_on(self._client.describe_files(request))

    def find_batches(self, request: pb.FindBatchesRequest) -> bytes:
        """Read here from the state files, as the reader processes read them."""
        return find_batches(self._view, request)

    # ------------------------------------------------------------------ the catalog, held here

    async def create_partitions(self, request: pb.CreatePartitionsRequest) -> pb.CreatePartitionsResponse:
        try:
            return await super().create_partitions(request)
        finally:
            self._node.rebuild_catalog()

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        try:
            return await super().delete_topics(request)
        finally:
            self._node.rebuild_catalog()

    def find_coordinator(self, request: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
        response = cast(pb.FindCoordinatorResponse, super().find_coordinator(request))
        readers = self.endpoint.read_addresses
        for endpoint in response.coordinators:
            for replica in endpoint.replicas:
                replica.read_addresses[:] = readers
        return response

    async def describe_coordinators(  # type: ignore[override]
        self, request: pb.DescribeCoordinatorsRequest
    ) -> pb.DescribeCoordinatorsResponse:
        """Each commit process describes the coordinators it leads; merged in the order asked."""
        self._coordinators.limit_items(len(request.coordinator_ids), "coordinator ids")
        count = len(self.shards)
        wanted = list(request.coordinator_ids) or list(range(count))
        by_process: dict[int, list[int]] = {}
        for coordinator_id in wanted:
            if 0 <= coordinator_id < count:
                by_process.setdefault(self._layout.owner(coordinator_id), []).append(coordinator_id)
        answers = await asyncio.gather(*(self._describe_at(i, ids) for i, ids in by_process.items()))
        described: dict[int, pb.CoordinatorDescription] = {}
        for answer in answers:
            for description in answer:
                described.setdefault(description.coordinator_id, description)
        response = pb.DescribeCoordinatorsResponse()
        readers = self.endpoint.read_addresses
        for coordinator_id in wanted:
            found = described.get(coordinator_id)
            if found is not None:
                for replica in found.leader.replicas:  # this process's readers serve every coordinator
                    replica.read_addresses[:] = readers
                response.coordinators.append(found)
                continue
            response.coordinators.add(
                coordinator_id=coordinator_id,
                last_snapshot_end_offset=-1,
                error_code=pb.NOT_COORDINATOR,
                error_message=f"coordinator {coordinator_id} is not hosted on this node",
            )
        return response

    async def _describe_at(self, index: int, coordinator_ids: Sequence[int]) -> list[pb.CoordinatorDescription]:
        address = self._layout.address(index)
        request = pb.DescribeCoordinatorsRequest(coordinator_ids=coordinator_ids)
        timeout_s = self._coordinators.timeout_s(0)
        try:
            answer = await self._node.peers.coordinator_stub(address).DescribeCoordinators(request, timeout=timeout_s)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
            message = (
                f"commit process {index} ({address}) did not answer: {code.name if code else 'error'}; it is "
                "started again when it died"
            )
            return [
                pb.CoordinatorDescription(
                    coordinator_id=c,
                    last_snapshot_end_offset=-1,
                    oldest_live_file_timestamp=-1,
                    error_code=pb.COORDINATOR_NOT_AVAILABLE,
                    error_message=message,
                )
                for c in coordinator_ids
            ]
        return list(answer.coordinators)


@final
class NodeFront:
    """The first process's part of a node spread over commit processes: their supervisor, the board, the view."""

    def __init__(
        self,
        node: Node,
        clock: Clock,
        layout: ProcessLayout,
        target: Callable[[CommitProcessPlan, Any, Connection], None],
    ) -> None:
        settings = node.settings
        self.layout = layout
        self.board = StatusBoard.create(settings.coordinators)

        def changed() -> None:
            node.health_changed()
            node.rebuild_catalog()  # a commit process (re)loaded: its partitions are read again

        self.processes = CommitProcesses(settings, layout, self.board, changed, target)
        self._view = ReaderCoordinators(
            settings, [shard.directory for shard in node.shards], self.board, self.processes.report_damage
        )
        self.router = FrontRouter(node, clock, layout, self.board, self._view)
        node.router = self.router
        node.outside_partitions = self._view.placed_partitions
        node.others_serving = self.processes.all_serving

    async def stop(self) -> None:
        """Stops the commit processes (each drains its calls), then closes what reads their state."""
        await self.processes.stop()
        await self.router.close()
        self._view.close()


def node_layout(settings: Settings, listen_host: str, advertised: NodeEndpoint) -> ProcessLayout:
    """Where the commit processes listen (after a fixed listen port, else on ports free now), reached at the
    node's advertised host."""
    listen_port = int(settings.listen.rpartition(":")[2] or 0)
    ports = fixed_ports(listen_port, settings.node_processes) or free_ports(listen_host, settings.node_processes)
    return ProcessLayout(settings.node_id, advertised.host, advertised.port, ports)


def free_ports(host: str, count: int) -> tuple[int, ...]:
    """Ports nothing listens on now (each commit process binds its own soon after)."""
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets = [socket.socket(family, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return tuple(sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()
