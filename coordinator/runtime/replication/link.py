"""What a coordinator's replication needs of its node in a cluster: the session, etcd's ISR, the other nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from protos import internal_pb2_grpc as internal_grpc


class ClusterLink(Protocol):
    def session_valid(self) -> bool:
        """Whether this node's etcd lease is surely still alive: a leader answers nothing once it may not be."""
        ...

    async def alter_isr(
        self, coordinator_id: int, leader_epoch: int, isr: tuple[int, ...], joined: Mapping[int, str]
    ) -> tuple[int, ...] | None:
        """The leader's ISR change, by compare-and-set in etcd; the stored ISR, or None when refused. `joined`: the
        incarnation each joining member fetched as."""
        ...

    async def leave_isr_damaged(self, coordinator_id: int) -> str:
        """This node's replica is damaged: it leaves the ISR (handing leadership on) and this node's role follows;
        "" once it is out, else why it cannot leave yet (no healthy copy)."""
        ...

    def internal_stub(self, address: str) -> internal_grpc.CoordinatorInternalAsyncStub:
        """A stub of another node's internal service (one channel per address)."""
        ...

    def peer_unreachable(self, node_id: int) -> None:
        """A call to `node_id` failed as unreachable (UNAVAILABLE): the node checks whether its process is gone."""
        ...
