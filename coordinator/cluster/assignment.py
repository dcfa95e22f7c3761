"""A coordinator's replicas, leader and ISR, and the pure rules that change them (KRaft's partition changes).

Each change returns a new assignment with `partition_epoch` bumped (Kafka's
AlterPartition), and `leader_epoch` bumped when the leader changes; the shell
writes it to etcd only if the key still has the revision it read, so a stale
writer always loses. Unclean election is off: a coordinator none of whose ISR
members is alive stays without a leader rather than lose acknowledged records.

Incarnations (Kafka's KIP-903/KIP-966): the ISR records, for each member, the
incarnation of the node it was in sync as (`incarnation.py`: a node's data
directory's identity and how many times it started). A live member whose node
now runs another incarnation (an emptied data directory, a restored backup) is
not the replica the ISR knew: it is never elected, and it leaves the ISR as soon
as it or the leader sees it, to join again once caught up. An empty recorded
incarnation (an ISR written before incarnations existed) matches any.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from coordinator.cluster.placement import initial_placement, place_added

NO_LEADER = -1
NO_INCARNATIONS: Mapping[int, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class CoordinatorAssignment:
    replicas: tuple[int, ...]  # node ids, the preferred leader first; fixed when the cluster forms
    leader: int  # a node id, or NO_LEADER
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]  # in-sync replicas, in `replicas` order; the leader is one of them
    # (node, incarnation) of ISR members, by node: the incarnation each was in sync as ("" or absent: unknown)
    incarnations: tuple[tuple[int, str], ...] = ()
    # A reassignment in progress (KIP-455, `reassignment.py`): `replicas` is then the target followed by the
    # replicas leaving; `adding` are target replicas that were not replicas before, `removing` those leaving.
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.replicas or len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"replicas must be distinct node ids, got {self.replicas}")
        if not set(self.isr) <= set(self.replicas) or not self.isr:
            raise ValueError(f"the ISR {self.isr} must be a non-empty subset of the replicas {self.replicas}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} must be in the ISR {self.isr}")
        if not {n for n, _ in self.incarnations} <= set(self.isr) or list(self.incarnations) != sorted(
            dict(self.incarnations).items()
        ):
            raise ValueError(f"incarnations {self.incarnations} must name ISR members {self.isr} once each, by node")
        if not set(self.adding) | set(self.removing) <= set(self.replicas) or set(self.adding) & set(self.removing):
            raise ValueError(f"adding {self.adding} and removing {self.removing} must be distinct replicas")
        if len(self.removing) >= len(self.replicas) or self.replicas[len(self.replicas) - len(self.removing) :] != (
            self.removing
        ):
            raise ValueError(f"the replicas {self.replicas} must end with those removed {self.removing}, once each")

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress is done (the replicas when none is)."""
        return self.replicas[: len(self.replicas) - len(self.removing)]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def incarnation_of(self, node: int) -> str:
        """The incarnation `node` was in sync as; "" when unknown (matches any)."""
        return dict(self.incarnations).get(node, "")

    def same_replica(self, node: int, live: Mapping[int, str]) -> bool:
        """Whether `node` is live and runs the incarnation the ISR knew (the replica that was in sync)."""
        recorded = self.incarnation_of(node)
        return node in live and (recorded == "" or recorded == live[node])

    def changed(self, leader: int, isr: tuple[int, ...]) -> CoordinatorAssignment:
        """This assignment with a new leader and ISR (Kafka's AlterPartition): the partition epoch bumped, the leader
        epoch too when the leader changes, and the ISR members kept keeping their incarnations."""
        return replace(
            self,
            leader=leader,
            leader_epoch=self.leader_epoch + (1 if leader != self.leader else 0),
            partition_epoch=self.partition_epoch + 1,
            isr=isr,
            incarnations=self.with_isr(isr),
        )

    def with_isr(
        self, isr: tuple[int, ...], joined: Mapping[int, str] = NO_INCARNATIONS
    ) -> tuple[tuple[int, str], ...]:
        """The incarnations for a new ISR: members kept keep theirs, members in `joined` take the given one."""
        known = {**dict(self.incarnations), **joined}
        return tuple(sorted((n, known[n]) for n in isr if known.get(n)))

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "replicas": list(self.replicas),
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "partition_epoch": self.partition_epoch,
                "isr": list(self.isr),
                "incarnations": {str(n): incarnation for n, incarnation in self.incarnations},
                **({"adding": list(self.adding), "removing": list(self.removing)} if self.reassigning else {}),
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
            incarnations=tuple(sorted((int(n), str(i)) for n, i in value.get("incarnations", {}).items())),
            adding=tuple(int(n) for n in value.get("adding", ())),
            removing=tuple(int(n) for n in value.get("removing", ())),
        )


def assign_replicas(
    coordinators: int, nodes: Sequence[int], replication_factor: int, incarnations: Mapping[int, str] = NO_INCARNATIONS
) -> dict[int, CoordinatorAssignment]:
    """The first assignment of a forming cluster over `nodes`: `placement.initial_placement` (replicas and preferred
    leaders even per node, as Kafka's replica assignment spreads a topic's partitions); the first replica leads."""
    return _first_assignments(initial_placement(coordinators, nodes, replication_factor), incarnations)


def assign_added(
    current: Mapping[int, CoordinatorAssignment],
    added: Sequence[int],
    nodes: Sequence[int],
    replication_factor: int,
    incarnations: Mapping[int, str] = NO_INCARNATIONS,
) -> dict[int, CoordinatorAssignment]:
    """The first assignment of coordinators added to a formed cluster, over the live `nodes` (`placement.place_added`):
    as at formation, the first replica leads and every replica is in the ISR (an empty log is in sync)."""
    placement = place_added({c: a.target for c, a in current.items()}, added, nodes, replication_factor)
    return _first_assignments(placement, incarnations)


def _first_assignments(
    placement: Mapping[int, tuple[int, ...]], incarnations: Mapping[int, str]
) -> dict[int, CoordinatorAssignment]:
    assignments = {}
    for coordinator_id, replicas in placement.items():
        # Epoch 1: the first leader's epoch rises above the 0 of an empty log, as every later one does.
        known = tuple(sorted((n, incarnations[n]) for n in replicas if incarnations.get(n)))
        assignments[coordinator_id] = CoordinatorAssignment(replicas, replicas[0], 1, 0, replicas, known)
    return assignments


def _in_replica_order(assignment: CoordinatorAssignment, members: Collection[int]) -> tuple[int, ...]:
    return tuple(node for node in assignment.replicas if node in members)


def after_nodes_lost(assignment: CoordinatorAssignment, live: Mapping[int, str]) -> CoordinatorAssignment | None:
    """The assignment once the nodes not in `live` (node -> the incarnation it runs) are gone; None when nothing
    changes.

    Dead members leave the ISR, except that the ISR never empties: its last member stays, so
    that it alone may lead again when it returns (no unclean election). A leader that is dead, or
    live as another incarnation than the ISR knew, is replaced by the first ISR member in replica
    order that is live as the incarnation the ISR knew, with a new leader epoch; if there is none
    the coordinator has no leader until one returns. A live member of another incarnation is not
    removed here: the node itself or the leader removes it (it may be restarting as itself).
    """
    live_isr = _in_replica_order(assignment, [n for n in assignment.isr if n in live])
    isr = live_isr or assignment.isr
    leader = assignment.leader
    if leader == NO_LEADER or not assignment.same_replica(leader, live):
        electable = [n for n in live_isr if assignment.same_replica(n, live)]
        leader = electable[0] if electable else NO_LEADER
    if leader == assignment.leader and isr == assignment.isr:
        return None
    return assignment.changed(leader, isr)


def after_restart(
    assignment: CoordinatorAssignment, node: int, previous: str, current: str, replica_on_disk: bool
) -> CoordinatorAssignment | None:
    """What a node starting as incarnation `current` (`previous`: the one its data directory held, "" if none) does
    to a coordinator's ISR; None when nothing changes.

    It is the replica the ISR knew if its log is on disk and the ISR recorded `previous` (or nothing) for it: then
    the ISR records `current`. Otherwise it leaves the ISR, unless it is the last member (then it stays, never
    electable, and the coordinator waits for the replica that was in sync); a leader leaving loses leadership.
    """
    recorded = assignment.incarnation_of(node)
    if node not in assignment.isr or recorded == current:  # not a member, or recorded as this start (formation)
        return None
    # An ISR written before incarnations (recorded "") knew whatever log is on disk; else it knew `previous`.
    if replica_on_disk and (recorded == "" or recorded == previous):
        return replace(
            assignment, partition_epoch=assignment.partition_epoch + 1,
            incarnations=assignment.with_isr(assignment.isr, {node: current}),
        )  # fmt: skip
    isr = tuple(n for n in assignment.isr if n != node)
    if not isr:
        return None
    leader = NO_LEADER if assignment.leader == node else assignment.leader
    return assignment.changed(leader, isr)


def isr_changed(
    assignment: CoordinatorAssignment,
    requested_by: int,
    new_isr: Collection[int],
    joined: Mapping[int, str] = NO_INCARNATIONS,
    live: Mapping[int, str] | None = None,
) -> CoordinatorAssignment | str:
    """The leader's ISR change (AlterPartition), or why it is refused.

    Only the current leader may change the ISR, it stays in it, and only replicas may join. A member joining
    carries the incarnation it fetched as (`joined`); when `live` (node -> incarnation now registered) is given, a
    joining incarnation that is not the node's current one is refused (KIP-903: a fetch of an earlier life).
    """
    if requested_by != assignment.leader:
        return f"node {requested_by} is not the leader (node {assignment.leader}, epoch {assignment.leader_epoch})"
    if requested_by not in new_isr:
        return f"the leader {requested_by} must stay in the ISR"
    strangers = set(new_isr) - set(assignment.replicas)
    if strangers:
        return f"nodes {sorted(strangers)} are not replicas of this coordinator ({list(assignment.replicas)})"
    unexplained = sorted(set(new_isr) - set(assignment.isr) - set(joined))
    if unexplained:  # an ISR read before another change (a damaged member that left) must not bring it back
        return f"nodes {unexplained} are not in the ISR {list(assignment.isr)} and did not fetch to join it"
    if live is not None:
        stale = sorted(n for n, i in joined.items() if n in new_isr and n not in assignment.isr and live.get(n) != i)
        if stale:
            return f"nodes {stale} joined as an incarnation they no longer run"
    isr = _in_replica_order(assignment, new_isr)
    incarnations = assignment.with_isr(isr, {n: i for n, i in joined.items() if n not in assignment.isr})
    if isr == assignment.isr and incarnations == assignment.incarnations:
        return assignment
    return replace(assignment, isr=isr, partition_epoch=assignment.partition_epoch + 1, incarnations=incarnations)


def preferred_leader_election(
    assignment: CoordinatorAssignment, live: Mapping[int, str]
) -> CoordinatorAssignment | None:
    """Leadership back to the preferred replica (the first), Kafka's preferred election; None when not wanted or
    not possible.

    The preferred replica takes over only while it is in the ISR and live as the incarnation the ISR knew: then it
    holds every acknowledged record, as any elected member does. The ISR stays as it is; the old leader, still in
    it, steps down to follow when it sees the new leader epoch (and truncates what it alone appended).
    """
    preferred = assignment.replicas[0]
    if assignment.leader == preferred or not electable_as_preferred(assignment, live):
        return None
    return replace(
        assignment,
        leader=preferred,
        leader_epoch=assignment.leader_epoch + 1,
        partition_epoch=assignment.partition_epoch + 1,
    )


def electable_as_preferred(assignment: CoordinatorAssignment, live: Mapping[int, str]) -> bool:
    preferred = assignment.replicas[0]
    return preferred in assignment.isr and assignment.same_replica(preferred, live)


def why_not_preferred(assignment: CoordinatorAssignment, live: Mapping[int, str]) -> str:
    """Why the preferred replica cannot lead now ("" when it can, or leads already): an operator's answer."""
    preferred = assignment.replicas[0]
    if assignment.leader == preferred or electable_as_preferred(assignment, live):
        return ""
    if preferred not in live:
        return f"the preferred replica, node {preferred}, is not live"
    if preferred not in assignment.isr:
        return f"the preferred replica, node {preferred}, is not in the ISR {list(assignment.isr)} (catching up)"
    return (
        f"the preferred replica, node {preferred}, runs incarnation {live[preferred]}, not the "
        f"{assignment.incarnation_of(preferred)} the ISR knew"
    )
