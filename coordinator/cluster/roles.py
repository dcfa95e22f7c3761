"""What this node is for each coordinator, from the cluster's metadata (pure; DESIGN §6a)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from coordinator.cluster.assignment import NO_LEADER, CoordinatorAssignment
from coordinator.cluster.store import NodeEndpoint
from coordinator.runtime.replication.role import ReplicaRole, RoleKind
from protos import internal_pb2_grpc as internal_grpc


def role_of(
    node_id: int,
    assignment: CoordinatorAssignment | None,
    live: dict[int, NodeEndpoint],
    session_valid: bool,
    incarnation: str = "",
) -> ReplicaRole:
    """What this node is for a coordinator, from its assignment and the live nodes (pure)."""
    if assignment is None:
        return ReplicaRole(RoleKind.OFFLINE, node_id, NO_LEADER, -1, "", (), ())
    leader = live.get(assignment.leader)
    if node_id not in assignment.replicas:
        kind = RoleKind.NOT_REPLICA  # still told where the leader is: a node with no replica forwards to it
    elif assignment.leader == NO_LEADER or leader is None or (assignment.leader == node_id and not session_valid):
        kind = RoleKind.OFFLINE
    else:
        kind = RoleKind.LEADER if assignment.leader == node_id else RoleKind.FOLLOWER
    address = f"{leader.host}:{leader.port}" if leader is not None else ""
    addresses = tuple((n, f"{live[n].host}:{live[n].port}") for n in assignment.replicas if n in live)
    return ReplicaRole(
        kind, node_id, assignment.leader, assignment.leader_epoch, address, assignment.replicas, assignment.isr,
        addresses, incarnation, assignment.incarnations,
    )  # fmt: skip


def incarnations_of(live: Mapping[int, NodeEndpoint]) -> dict[int, str]:
    return {node_id: endpoint.incarnation for node_id, endpoint in live.items()}


class RoleHolder(Protocol):
    """A coordinator as the controller drives it (the shard)."""

    coordinator_id: int

    def set_role(self, role: ReplicaRole) -> None: ...


class StubSource(Protocol):
    def internal_stub(self, address: str) -> internal_grpc.CoordinatorInternalAsyncStub: ...

    async def refuses_connections(self, target: str, timeout_ms: int) -> bool: ...
