"""The client side of calls between coordinators (protos/internal.proto), over a transport (gRPC, or in memory).

Every call goes through a socket to the node that leads the target
coordinator, even when that node is this one, so one code path serves both:
alone, every coordinator's endpoint is this node's listen address; in a
cluster, its leader's as etcd says. A node holding no replica (a node added
after the cluster formed) also forwards brokers' catalog calls (`forward_call`).

The node's own TLS set-up is its client identity: it trusts
`diskless.ssl.ca.location` (or, without a CA, its own certificate) and shows
its own certificate, whose principal needs the INTERNAL permission. A broker's call passed on goes in the caller's
name (`forward_call`): the node's principal needs no broker permission for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from coordinator.base.errors import PeerUnreachable, PermissionDenied
from coordinator.cluster.transport import GrpcTransport, Transport
from coordinator.config.settings import Settings
from coordinator.edge.access_control import CALLER, FORWARDED_FOR
from coordinator.machine.view import FileFacts
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from protos import internal_pb2 as internal
from protos import internal_pb2_grpc as internal_grpc

RequestT = TypeVar("RequestT")


class PeerError(Exception):
    """A call to another coordinator failed or was refused; the caller retries with backoff."""


@dataclass(frozen=True, slots=True)
class PeerAddress:
    host: str
    port: int

    @property
    def target(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"{host}:{self.port}"


class PeerClient:
    def __init__(
        self, settings: Settings, address_of: Callable[[int], PeerAddress], transport: Transport | None = None
    ) -> None:
        self._settings = settings
        self._address_of = address_of
        self._transport: Transport = transport if transport is not None else GrpcTransport(settings)

    def _stub(self, coordinator_id: int) -> internal_grpc.CoordinatorInternalAsyncStub:
        address = self._address_of(coordinator_id)
        if address.host in ("0.0.0.0", "::", ""):  # a wildcard listen address is reached on loopback
            address = PeerAddress("127.0.0.1", address.port)
        return self.internal_stub(address.target)

    def internal_stub(self, target: str) -> internal_grpc.CoordinatorInternalAsyncStub:
        """A stub of the internal service at HOST:PORT (one channel per address over gRPC)."""
        return self._transport.internal_stub(target)

    def coordinator_stub(self, target: str) -> pb_grpc.DisklessCoordinatorAsyncStub:
        """A stub of the brokers' service at HOST:PORT (a call forwarded as a broker would make it)."""
        return self._transport.coordinator_stub(target)

    async def refuses_connections(self, target: str, timeout_ms: int) -> bool:
        """Whether HOST:PORT refuses a new connection now (`transport.Transport.refuses_connections`)."""
        return await self._transport.refuses_connections(target, timeout_ms)

    async def hand_over(self, from_id: int, to_id: int, files: Sequence[FileFacts], timeout_s: float) -> None:
        """Makes `to_id` the owner of `files`; returns once it recorded them, raises PeerError otherwise."""
        request = internal.HandOverFilesRequest(
            from_coordinator_id=from_id,
            to_coordinator_id=to_id,
            timeout_ms=int(timeout_s * 1000),
            files=[
                internal.HandedOverFile(
                    object_key=f.object_key,
                    file_size=f.file_size,
                    uploader_broker_id=f.uploader_broker_id,
                    owner_ids=f.owner_ids,
                    committed_at_ms=f.committed_at_ms,
                )
                for f in files
            ],
        )
        try:
            response = await self._stub(to_id).HandOverFiles(request, timeout=timeout_s)
        except grpc.RpcError as error:
            raise PeerError(f"hand-over to coordinator {to_id}: {_describe(error)}") from None
        if response.error_code != pb.NONE:
            raise PeerError(
                f"hand-over to coordinator {to_id}: {pb.ErrorCode.Name(response.error_code)}: {response.error_message}"
            )

    async def known_files(
        self, coordinator_ids: Sequence[int], object_keys: Sequence[str], timeout_s: float
    ) -> dict[str, dict[int, int]]:
        """For each key, which of `coordinator_ids` know it and its FileState in each (commits in flight counted), as
        their leaders say; raises PeerError unless every one answered."""
        by_target: dict[str, list[int]] = {}
        for coordinator_id in coordinator_ids:
            by_target.setdefault(self._address_of(coordinator_id).target, []).append(coordinator_id)
        known: dict[str, dict[int, int]] = {key: {} for key in object_keys}
        for group in by_target.values():
            request = internal.KnownFilesRequest(coordinator_ids=group, object_keys=object_keys)
            try:
                response = await self._stub(group[0]).KnownFiles(request, timeout=timeout_s)
            except grpc.RpcError as error:
                raise PeerError(f"asking coordinators {group} for files: {_describe(error)}") from None
            if response.error_code != pb.NONE:
                raise PeerError(
                    f"asking coordinators {group} for files: {pb.ErrorCode.Name(response.error_code)}: "
                    f"{response.error_message}"
                )
            for found in response.files:
                if found.object_key in known:
                    states: list[int] = list(found.states)
                    if len(states) != len(found.coordinator_ids):  # a leader from before states were sent: known
                        states = [pb.FILE_STATE_LIVE] * len(found.coordinator_ids)
                    known[found.object_key].update(zip(found.coordinator_ids, states, strict=True))
        return known

    async def _ask(self, method: str, target: int, request: RequestT, timeout_s: float, what: str) -> Any:
        """One internal call to coordinator `target`'s leader; its answer, refusals included; PeerError, naming
        `what` was asked, when it could not be asked."""
        try:
            return await getattr(self._stub(target), method)(request, timeout=timeout_s)
        except grpc.RpcError as error:
            raise PeerError(f"{what}: {_describe(error)}") from None

    async def adopt_partition_chunk(
        self, request: internal.AdoptPartitionChunkRequest, timeout_s: float
    ) -> internal.AdoptPartitionChunkResponse:
        """A move's chunk (or, index -1, the question where the target is) sent to the target's leader (design §5a)."""
        target = request.to_coordinator_id
        response: internal.AdoptPartitionChunkResponse = await self._ask(
            "AdoptPartitionChunk", target, request, timeout_s, f"move {request.move_id} to coordinator {target}"
        )
        return response

    async def adopt_partition(
        self, request: internal.AdoptPartitionRequest, timeout_s: float
    ) -> internal.AdoptPartitionResponse:
        """A move's cut-over asked of the target's leader."""
        target = request.to_coordinator_id
        response: internal.AdoptPartitionResponse = await self._ask(
            "AdoptPartition", target, request, timeout_s, f"adoption of move {request.move_id} by coordinator {target}"
        )
        return response

    async def abandon_adoption(
        self, request: internal.AbandonAdoptionRequest, timeout_s: float
    ) -> internal.AbandonAdoptionResponse:
        """A move given up, asked of the target's leader."""
        target = request.to_coordinator_id
        response: internal.AbandonAdoptionResponse = await self._ask(
            "AbandonAdoption", target, request, timeout_s, f"abandon of move {request.move_id} at coordinator {target}"
        )
        return response

    async def return_files(
        self, request: internal.ReturnFilesRequest, timeout_s: float
    ) -> internal.ReturnFilesResponse:
        """Borrowed WAL files given back to their lender's leader (design §5a)."""
        lender = request.to_coordinator_id
        response: internal.ReturnFilesResponse = await self._ask(
            "ReturnFiles", lender, request, timeout_s, f"returning files to coordinator {lender}"
        )
        return response

    async def close(self) -> None:
        await self._transport.close()


def _describe(error: grpc.RpcError) -> str:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    return f"{code.name if code else 'error'}: {details}"


async def change_topic_at(
    peers: PeerClient, leader_address: str, request: internal.ChangeTopicRequest, timeout_s: float
) -> internal.ChangeTopicResponse:
    """Sends one coordinator's part of a topic change to its leader; its answer (COORDINATOR_NOT_AVAILABLE if none)."""
    try:
        response: internal.ChangeTopicResponse = await peers.internal_stub(leader_address).ChangeTopic(
            request, timeout=timeout_s
        )
    except grpc.RpcError as error:
        return internal.ChangeTopicResponse(
            error_code=pb.COORDINATOR_NOT_AVAILABLE,
            error_message=f"coordinator {request.coordinator_id}'s leader: {_describe(error)}",
        )
    return response


async def forward_call(peers: PeerClient, target: str, method: str, request: RequestT, timeout_s: float) -> Any:
    """A broker's call passed on whole to the node at `target` (from a node that holds no replica), in the caller's
    name: this node admitted the caller already (its gate), and the node at `target` authorises the call as that
    caller again (`FORWARDED_FOR`, which it takes from this node's principal only if that holds INTERNAL).

    A refusal there reaches the caller as the refusal it is; any other failure as this node's PeerUnreachable.
    """
    caller = CALLER.get()
    metadata = ((FORWARDED_FOR, caller),) if caller is not None else None
    try:
        return await getattr(peers.coordinator_stub(target), method)(request, timeout=timeout_s, metadata=metadata)
    except grpc.RpcError as error:
        code = error.code() if hasattr(error, "code") else None
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            raise PermissionDenied(f"{method} passed on to {target}: {_describe(error)}") from None
        raise PeerUnreachable(f"{method} forwarded to {target}: {_describe(error)}") from error


async def known_partitions_at(
    peers: PeerClient, address: str, request: internal.KnownPartitionsRequest, timeout_s: float
) -> internal.KnownPartitionsResponse:
    """Which of a topic's partitions the node at `address` knows; PeerError when it cannot be asked."""
    try:
        response: internal.KnownPartitionsResponse = await peers.internal_stub(address).KnownPartitions(
            request, timeout=timeout_s
        )
    except grpc.RpcError as error:
        raise PeerError(f"asking {address} which partitions it knows: {_describe(error)}") from None
    return response
