"""What the nodes of a cluster say about their coordinators (DescribeCoordinators), read by pure rules.

Each node describes its own replica of every coordinator: role, lifecycle state, ISR (as etcd last said), log
end and high watermark. A node that did not answer (killed, restarting) is given as None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protos import coordinator_pb2 as pb

Descriptions = Mapping[int, Sequence[pb.CoordinatorDescription] | None]  # node id -> its answer, or None


def _leading(description: pb.CoordinatorDescription) -> bool:
    return description.error_code == pb.NONE and description.role == "LEADER" and description.state == "ACTIVE"


def leaders(described: Descriptions) -> dict[int, int]:
    """Coordinator id -> the node that leads it and says so (LEADER, ACTIVE)."""
    found = {}
    for node_id, descriptions in described.items():
        for description in descriptions or []:
            if _leading(description):
                found[description.coordinator_id] = node_id
    return found


def preferred_leaders(described: Descriptions) -> dict[int, int]:
    """Coordinator id -> its preferred leader (the first of its replicas), as the nodes that answered say."""
    found = {}
    for descriptions in described.values():
        for description in descriptions or []:
            if description.error_code == pb.NONE and description.replica_node_ids:
                found[description.coordinator_id] = description.replica_node_ids[0]
    return found


def preferred_share(described: Descriptions) -> float:
    """The share of coordinators led (LEADER, ACTIVE) by their preferred replica; 0.0 when none is known."""
    preferred = preferred_leaders(described)
    led = leaders(described)
    return sum(1 for c, node in preferred.items() if led.get(c) == node) / len(preferred) if preferred else 0.0


def replication_problem(described: Descriptions) -> str:
    """Why the cluster is not fully replicating yet ('' once it is): every node answers, every coordinator has an
    ACTIVE leader whose ISR is every replica and whose high watermark is its log end (every follower has fetched
    all of it), and every follower is ACTIVE at that log end."""
    silent = sorted(n for n, descriptions in described.items() if descriptions is None)
    if silent:
        return f"nodes {silent} do not answer"
    led = leaders(described)
    by_coordinator: dict[int, dict[int, pb.CoordinatorDescription]] = {}
    for node_id, descriptions in described.items():
        for description in descriptions or []:
            by_coordinator.setdefault(description.coordinator_id, {})[node_id] = description
    for coordinator_id, replicas in sorted(by_coordinator.items()):
        if coordinator_id not in led:
            return f"coordinator {coordinator_id}: no ACTIVE leader"
        leader = replicas[led[coordinator_id]]
        if sorted(leader.isr) != sorted(leader.replica_node_ids):
            return f"coordinator {coordinator_id}: ISR {list(leader.isr)} of replicas {list(leader.replica_node_ids)}"
        if leader.high_watermark != leader.log_end_offset:
            return (f"coordinator {coordinator_id}: high watermark {leader.high_watermark} below the log end "
                    f"{leader.log_end_offset}")  # fmt: skip
        for node_id, follower in sorted(replicas.items()):
            if follower.error_code != pb.NONE or follower.state != "ACTIVE":
                return f"coordinator {coordinator_id} on node {node_id}: {follower.role} {follower.state}"
            if follower.log_end_offset != leader.log_end_offset:
                return (f"coordinator {coordinator_id} on node {node_id}: log end {follower.log_end_offset} of the "
                        f"leader's {leader.log_end_offset}")  # fmt: skip
    return ""


def out_of_sync_problem(described: Descriptions, node_id: int) -> str:
    """Why the node is not back in every coordinator's ISR as every node says ('' once it is), itself ACTIVE."""
    for other, descriptions in sorted(described.items()):
        if descriptions is None:
            return f"node {other} does not answer"
        for d in descriptions:
            if d.error_code != pb.NONE or node_id not in d.isr or (other == node_id and d.state != "ACTIVE"):
                return (
                    f"node {other} coordinator {d.coordinator_id}: {pb.ErrorCode.Name(d.error_code)} {d.role} "
                    f"{d.state} ISR {list(d.isr)}"
                )
    return ""


def readers_problem(described: Descriptions) -> str:
    """Why some node does not name every replica's reader processes yet ('' once each does): a node learns the
    others' readers from etcd on its next refresh, and a client keeps the routes it learned first."""
    for node_id, descriptions in sorted(described.items()):
        for description in descriptions or []:
            unnamed = [r.node_id for r in description.leader.replicas if not r.read_addresses]
            if unnamed:
                return f"node {node_id}: coordinator {description.coordinator_id}: no readers named on {unnamed}"
    return ""
