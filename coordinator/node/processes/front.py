"""The node's first process when the node is spread over commit processes: it routes, the others commit.

It leads no coordinator. A client that routes (coordinator/client/routing_client.py) learns from FindCoordinator
where each coordinator is led and calls that commit process directly; this process answers FindCoordinator
from the whole catalog (read from the commit processes' state files) and names its reader processes for
FindBatches. A client that sends everything to the listen address keeps working: CommitFile, ListOffsets,
DeleteRecords and DescribeFiles are passed on by this process's own routing client, split by coordinator
under the same rules as a broker's; FindBatches is read here from the state files, as a reader reads them.
CreatePartitions and DeleteTopics run here (every commit process sends them here), each coordinator's part
sent to the process leading it; the catalog is read again once they are done.

Each RPC's row (coordinator/edge/rpcs.py) says which of these it gets (`Front`); this process's Router is made with
that placement, and a row this process cannot serve as it says stops the node at start-up (`front_route_problem`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar, final

import grpc

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, PassedOn, PeerUnreachable
from coordinator.client.channels import channel_credentials
from coordinator.client.routing_client import RoutingClient, RoutingError
from coordinator.cluster.store import NodeEndpoint
from coordinator.config.settings import Settings
from coordinator.edge.access_control import CALLER
from coordinator.edge.loop import outcome_of
from coordinator.edge.rpcs import RPCS, Front, Rpc
from coordinator.edge.tls import tls_files
from coordinator.node.node import Node
from coordinator.node.processes.commit_process import CommitProcessPlan
from coordinator.node.processes.layout import ProcessLayout, fixed_ports
from coordinator.node.processes.supervisor import CommitProcesses
from coordinator.node.router import Answer, Placed, Router
from coordinator.node.services import PASSED_ON
from coordinator.reads.find_batches import find_batches
from coordinator.reads.readers.board import StatusBoard
from coordinator.reads.readers.state_files import ReaderCoordinators, unavailable_for
from coordinator.topics.move_admin import FINAL_STEPS
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb

T = TypeVar("T")
# How this process reads a call from the commit processes' state files (Front.STATE_FILES), by method.
STATE_FILE_READS: Mapping[str, Callable[[ReaderCoordinators, Any], Any]] = {"FindBatches": find_batches}
# The calls answered here from the catalog naming this process's readers (Front.CATALOG): the answer's endpoints are
# FindCoordinator's.
CATALOG_READS = frozenset({"FindCoordinator"})
# The calls asked of every commit process and merged (Front.EVERY_PROCESS): the merge is DescribeCoordinators'.
MERGED = frozenset({"DescribeCoordinators"})


class FrontRouteMissing(ValueError):
    """A row's `front` that this process has no way to serve for the row's method."""


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
    """The first process's client of its commit processes: bootstrapped from itself, with the node's identity, each
    call passed on in its caller's name."""
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
        caller=CALLER.get,  # in the caller's name: the node's principal needs INTERNAL only (access_control.py)
    )


def front_route_problem(rpc: Rpc) -> str | None:
    """Why this process could not serve `rpc` as its row's `front` says, or None."""
    if rpc.front is Front.LEADING_PROCESS and not callable(getattr(RoutingClient, rpc.handler, None)):
        return f"{rpc.method}: the routing client has no {rpc.handler} to pass it on with"
    if rpc.front is Front.STATE_FILES and rpc.method not in STATE_FILE_READS:
        return f"{rpc.method}: no read of it from the state files (STATE_FILE_READS)"
    if rpc.front is Front.CATALOG and rpc.method not in CATALOG_READS:
        return f"{rpc.method}: its answer has no endpoints to name the readers in (CATALOG_READS)"
    if rpc.front is Front.EVERY_PROCESS and rpc.method not in MERGED:
        return f"{rpc.method}: no merge of the commit processes' answers to it (MERGED)"
    return None


@final
class FrontAnswers:
    """What answers here each call this process does not answer as any process does (each row's `front`)."""

    def __init__(self, node: Node, layout: ProcessLayout, view: ReaderCoordinators, client: RoutingClient) -> None:
        self._node = node
        self._layout = layout
        self._view = view
        self._client = client

    def placement(self, router: Router) -> dict[str, Placed]:
        """By method, the answers of every row not answered HERE; raises FrontRouteMissing for a row it cannot."""
        problems = [problem for problem in map(front_route_problem, RPCS) if problem is not None]
        if problems:
            raise FrontRouteMissing(
                "the first process of a node spread over processes cannot serve " + "; ".join(problems)
            )
        return {rpc.method: self._placed(rpc, router) for rpc in RPCS if rpc.front is not Front.HERE}

    def _placed(self, rpc: Rpc, router: Router) -> Placed:
        # The Router method itself where the catalog is held here: such a call is never passed on to a holder.
        here: Answer = getattr(router, rpc.handler)
        if rpc.front is Front.LEADING_PROCESS:
            send: Answer = getattr(self._client, rpc.handler)  # split by coordinator as a broker's call
            if rpc.method == "DescribePartitionMove":
                return Placed(lambda request: self._move_then_read_catalog(send, request), passes_on=True)
            return Placed(lambda request: _passed_on(send(request)), passes_on=True)
        if rpc.front is Front.STATE_FILES:
            read = STATE_FILE_READS[rpc.method]
            return Placed(lambda request: read(self._view, request))
        if rpc.front is Front.CATALOG_CHANGE:
            return Placed(lambda request: self._then_read_catalog(here, request))
        if rpc.front is Front.CATALOG:
            return Placed(lambda request: self._naming_readers(router, here, request))
        if rpc.front is Front.EVERY_PROCESS:
            return Placed(lambda request: self._describe_coordinators(router, request))
        raise FrontRouteMissing(f"{rpc.method}: {rpc.front} is answered by the Router method itself")

    async def _move_then_read_catalog(
        self, send: Answer, request: admin.DescribePartitionMoveRequest
    ) -> admin.DescribePartitionMoveResponse:
        """A move's cut-over changes the catalog in the commit processes only: this process, which holds the one
        FindCoordinator answers from, reads it again once it sees a move ended (as `move-partition --wait` asks)."""
        answer: admin.DescribePartitionMoveResponse = await _passed_on(send(request))
        if answer.error_code == pb.NONE and answer.step in FINAL_STEPS:
            self._node.rebuild_catalog()
            self._client.forget_route(request.topic_id, request.partition)  # passed-on calls find the target
        return answer

    async def _then_read_catalog(self, here: Answer, request: Any) -> Any:
        try:
            return await outcome_of(lambda: here(request))
        finally:
            self._node.rebuild_catalog()

    async def _naming_readers(self, router: Router, here: Answer, request: Any) -> pb.FindCoordinatorResponse:
        response: pb.FindCoordinatorResponse = await outcome_of(lambda: here(request))
        readers = router.endpoint.read_addresses
        for endpoint in response.coordinators:
            for replica in endpoint.replicas:
                replica.read_addresses[:] = readers
        return response

    async def _describe_coordinators(
        self, router: Router, request: pb.DescribeCoordinatorsRequest
    ) -> pb.DescribeCoordinatorsResponse:
        """Each commit process describes the coordinators it leads; merged in the order asked."""
        router.coordinators.limit_items(len(request.coordinator_ids), "coordinator ids")
        count = len(router.shards)
        wanted = list(request.coordinator_ids) or list(range(count))
        by_process: dict[int, list[int]] = {}
        for coordinator_id in wanted:
            if 0 <= coordinator_id < count:
                by_process.setdefault(self._layout.owner(coordinator_id), []).append(coordinator_id)
        timeout_s = router.coordinators.timeout_s(0)
        answers = await asyncio.gather(*(self._describe_at(i, ids, timeout_s) for i, ids in by_process.items()))
        described: dict[int, pb.CoordinatorDescription] = {}
        for answer in answers:
            for description in answer:
                described.setdefault(description.coordinator_id, description)
        response = pb.DescribeCoordinatorsResponse()
        readers = router.endpoint.read_addresses
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

    async def _describe_at(
        self, index: int, coordinator_ids: Sequence[int], timeout_s: float
    ) -> list[pb.CoordinatorDescription]:
        address = self._layout.address(index)
        request = pb.DescribeCoordinatorsRequest(coordinator_ids=coordinator_ids)
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
class CoalescedCall:
    """Calls `call` once on the event loop for any number of asks before it runs: a burst of the commit processes'
    catalog changes (a topic of many partitions created) reads the state files once, not once per message."""

    def __init__(self, call: Callable[[], None]) -> None:
        self._call = call
        self._asked = False

    def __call__(self) -> None:
        if not self._asked:
            self._asked = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._asked = False
        self._call()


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

        self._client = forwarding_client(node, layout)

        def read_catalog() -> None:
            node.rebuild_catalog()
            # Calls passed on from here find each partition's coordinator again, from the catalog just read: the
            # same callback, so no call can learn a route from the old catalog after it is forgotten.
            self._client.forget_partitions()

        def changed() -> None:
            node.health_changed()
            read_catalog()  # a commit process (re)loaded: its partitions are read again

        self.processes = CommitProcesses(settings, layout, self.board, changed, target, CoalescedCall(read_catalog))
        self._view = ReaderCoordinators(
            settings, [shard.directory for shard in node.shards], self.board, self.processes.report_damage
        )
        answers = FrontAnswers(node, layout, self._view, self._client)
        self.router = Router(
            node.shards,
            settings,
            clock,
            node.metrics,
            node.catalog,
            node.peers,
            elsewhere=board_elsewhere(self.board),
            placement=answers.placement,
        )
        node.router = self.router
        node.outside_partitions = self._view.placed_partitions
        node.others_serving = self.processes.all_serving

    async def stop(self) -> None:
        """Stops the commit processes (each drains its calls), then closes what reads their state."""
        await self.processes.stop()
        await self._client.close()
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
