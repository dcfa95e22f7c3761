"""What a coordinator answers its callers in each state and role: its lifecycle's states, and the refusals."""

from __future__ import annotations

import enum

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.runtime.replication.role import ReplicaRole, RoleKind


class ShardState(enum.Enum):
    LOADING = "LOADING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    CLOSED = "CLOSED"


TRANSITIONS = {
    ShardState.LOADING: {ShardState.ACTIVE, ShardState.FAILED, ShardState.CLOSED},
    ShardState.ACTIVE: {ShardState.FAILED, ShardState.CLOSED, ShardState.LOADING},  # LOADING: a new role
    ShardState.FAILED: {ShardState.LOADING, ShardState.CLOSED},
    ShardState.CLOSED: set(),
}


def unavailable(
    coordinator_id: int, state: ShardState, closing: bool, problem: str, role: ReplicaRole | None
) -> CoordinatorUnavailable | None:
    """Why the coordinator cannot answer a read here now (the code a caller retries on), or None."""
    if role is not None and role.kind is RoleKind.NOT_REPLICA:
        return CoordinatorUnavailable(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"node {role.node_id} holds no replica of coordinator {coordinator_id} (replicas {list(role.replicas)})",
        )
    if role is not None and role.kind is RoleKind.OFFLINE:
        return CoordinatorUnavailable(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"coordinator {coordinator_id} has no leader: none of its in-sync replicas {list(role.isr)} is alive",
        )
    if state is ShardState.ACTIVE and not closing:
        return None
    if closing or state is ShardState.CLOSED:
        return CoordinatorUnavailable(ErrorCode.NOT_COORDINATOR, f"coordinator {coordinator_id} is closing")
    if state is ShardState.LOADING:
        after = f" after a failure ({problem})" if problem else ""
        return CoordinatorUnavailable(
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"coordinator {coordinator_id} is loading{after}"
        )
    return CoordinatorUnavailable(
        ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {coordinator_id} is out of service: {problem}"
    )


def not_leading(
    coordinator_id: int, role: ReplicaRole | None, leading_as: ReplicaRole | None
) -> CoordinatorUnavailable | None:
    """Why an active coordinator takes no write here (NOT_COORDINATOR), or None.

    `leading_as`: the role its leader's pipeline was loaded in (None when none serves); etcd's role may be ahead
    of it while the coordinator reloads.
    """
    if role is None:
        return None  # alone: the leader of every coordinator
    if role.kind is RoleKind.LEADER and leading_as is not None and role.same_leadership(leading_as):
        return None
    return CoordinatorUnavailable(
        ErrorCode.NOT_COORDINATOR,
        f"node {role.node_id} follows coordinator {coordinator_id}; its leader is node {role.leader_node_id} at "
        f"{role.leader_address} (epoch {role.leader_epoch})",
    )
