"""A coordinator's replicas, leader and ISR, and the pure rules that change them (KRaft's partition changes).

Each change returns a new assignment with `partition_epoch` bumped (Kafka's
AlterPartition), and `leader_epoch` bumped when the leader changes; the shell
writes it to etcd only if the key still has the revision it read, so a stale
writer always loses. Unclean election is off: a coordinator none of whose ISR
members is alive stays without a leader rather than lose acknowledged records.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class CoordinatorAssignment:
    replicas: tuple[int, ...]  # node ids, the preferred leader first; fixed when the cluster forms
    leader: int  # a node id, or NO_LEADER
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]  # in-sync replicas, in `replicas` order; the leader is one of them

    def __post_init__(self) -> None:
        if not self.replicas or len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"replicas must be distinct node ids, got {self.replicas}")
        if not set(self.isr) <= set(self.replicas) or not self.isr:
            raise ValueError(f"the ISR {self.isr} must be a non-empty subset of the replicas {self.replicas}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} must be in the ISR {self.isr}")

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "replicas": list(self.replicas),
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "partition_epoch": self.partition_epoch,
                "isr": list(self.isr),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CoordinatorAssignment:
        value = json.loads(data)
        return cls(
            replicas=tuple(int(n) for n in value["replicas"]),
            leader=int(value["leader"]),
            leader_epoch=int(value["leader_epoch"]),
            partition_epoch=int(value["partition_epoch"]),
            isr=tuple(int(n) for n in value["isr"]),
        )


def assign_replicas(
    coordinators: int, nodes: Sequence[int], replication_factor: int
) -> dict[int, CoordinatorAssignment]:
    """The first assignment of a forming cluster: replicas spread round-robin, the first replica leads.

    As Kafka's replica assignment: coordinator c takes `replication_factor` consecutive nodes
    starting at node index c, so leadership and replicas spread evenly.
    """
    ordered = sorted(set(nodes))
    if replication_factor < 1 or replication_factor > len(ordered):
        raise ValueError(f"replication factor {replication_factor} needs that many nodes, {len(ordered)} registered")
    assignments = {}
    for coordinator_id in range(coordinators):
        replicas = tuple(ordered[(coordinator_id + i) % len(ordered)] for i in range(replication_factor))
        # Epoch 1: the first leader's epoch rises above the 0 of an empty log, as every later one does.
        assignments[coordinator_id] = CoordinatorAssignment(replicas, replicas[0], 1, 0, replicas)
    return assignments


def _in_replica_order(assignment: CoordinatorAssignment, members: Collection[int]) -> tuple[int, ...]:
    return tuple(node for node in assignment.replicas if node in members)


def after_nodes_lost(assignment: CoordinatorAssignment, live: Collection[int]) -> CoordinatorAssignment | None:
    """The assignment once the nodes not in `live` are gone; None when nothing changes.

    Dead members leave the ISR, except that the ISR never empties: its last member stays, so
    that it alone may lead again when it returns (no unclean election). A dead leader is
    replaced by the first live ISR member in replica order, with a new leader epoch; if none
    is alive the coordinator has no leader until one returns.
    """
    live_isr = _in_replica_order(assignment, [n for n in assignment.isr if n in live])
    isr = live_isr or assignment.isr
    leader = assignment.leader
    if leader == NO_LEADER or leader not in live:
        leader = live_isr[0] if live_isr else NO_LEADER
    if leader == assignment.leader and isr == assignment.isr:
        return None
    return replace(
        assignment,
        leader=leader,
        leader_epoch=assignment.leader_epoch + (1 if leader != assignment.leader else 0),
        partition_epoch=assignment.partition_epoch + 1,
        isr=isr,
    )


def isr_changed(
    assignment: CoordinatorAssignment, requested_by: int, new_isr: Collection[int]
) -> CoordinatorAssignment | str:
    """The leader's ISR change (AlterPartition), or why it is refused.

    Only the current leader may change the ISR, it stays in it, and only replicas may join.
    """
    if requested_by != assignment.leader:
        return f"node {requested_by} is not the leader (node {assignment.leader}, epoch {assignment.leader_epoch})"
    if requested_by not in new_isr:
        return f"the leader {requested_by} must stay in the ISR"
    strangers = set(new_isr) - set(assignment.replicas)
    if strangers:
        return f"nodes {sorted(strangers)} are not replicas of this coordinator ({list(assignment.replicas)})"
    isr = _in_replica_order(assignment, new_isr)
    if isr == assignment.isr:
        return assignment
    return replace(assignment, isr=isr, partition_epoch=assignment.partition_epoch + 1)
