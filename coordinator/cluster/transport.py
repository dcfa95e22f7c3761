"""How a node reaches the others (calls between nodes: log fetch, OffsetForLeaderEpoch, snapshot fetch, hand-over,
topic changes, a broker's call passed on): a Protocol with two implementations.

`GrpcTransport` dials real sockets, one channel per address, with the node's own TLS identity. The simulated
cluster (`memory_transport.MemoryNetwork`) answers the same stubs in this process, through the target node's
router, and can drop, delay, duplicate and partition calls. Callers see the same stubs and the same
`grpc.RpcError`s either way, so the replication and the file workers run unchanged on both.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import grpc

from coordinator.config.settings import Settings
from coordinator.edge.tls import tls_files
from protos import coordinator_pb2_grpc as pb_grpc
from protos import internal_pb2_grpc as internal_grpc


class Transport(Protocol):
    def internal_stub(self, target: str) -> internal_grpc.CoordinatorInternalAsyncStub:
        """A stub of the internal service of the node at HOST:PORT."""
        ...

    def coordinator_stub(self, target: str) -> pb_grpc.DisklessCoordinatorAsyncStub:
        """A stub of the brokers' service at HOST:PORT (a call passed on as a broker would make it)."""
        ...

    async def refuses_connections(self, target: str, timeout_ms: int) -> bool:
        """Whether the node at HOST:PORT refuses a new connection now: nothing listens there, its process is gone. A
        connect that times out or is accepted is no refusal (a partition, a stalled or a live node)."""
        ...

    async def close(self) -> None: ...


class GrpcTransport:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._channels: dict[str, grpc.aio.Channel] = {}

    def internal_stub(self, target: str) -> internal_grpc.CoordinatorInternalAsyncStub:
        return internal_grpc.CoordinatorInternalStub(self._channel(target))

    def coordinator_stub(self, target: str) -> pb_grpc.DisklessCoordinatorAsyncStub:
        return pb_grpc.DisklessCoordinatorStub(self._channel(target))

    def _channel(self, target: str) -> grpc.aio.Channel:
        channel = self._channels.get(target)
        if channel is None:
            credentials = self._credentials()
            options = [
                ("grpc.max_send_message_length", self._settings.request_max_bytes),
                ("grpc.max_receive_message_length", self._settings.request_max_bytes),  # followers' fetches
            ]
            channel = (
                grpc.aio.secure_channel(target, credentials, options=options)
                if credentials is not None
                else grpc.aio.insecure_channel(target, options=options)
            )
            self._channels[target] = channel
        return channel

    def _credentials(self) -> grpc.ChannelCredentials | None:
        files = tls_files(self._settings)
        if files is None:
            return None
        key, certificate, ca = files.read()
        return grpc.ssl_channel_credentials(
            root_certificates=ca if ca is not None else certificate, private_key=key, certificate_chain=certificate
        )

    async def refuses_connections(self, target: str, timeout_ms: int) -> bool:
        # A bare TCP connect, not a gRPC call: a channel in backoff answers from its last failure without dialling.
        host, _, port = target.rpartition(":")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), timeout_ms / 1000)
        except ConnectionRefusedError:
            return True
        except (OSError, TimeoutError, ValueError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return False

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
