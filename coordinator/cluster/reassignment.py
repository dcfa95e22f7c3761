"""Moving a coordinator's replicas online, Kafka's way (KIP-455; DESIGN §6a "Placement over any number of nodes").

A reassignment is stored in the coordinator's assignment in etcd (`adding`, `removing`): while it runs the replicas
are the target followed by the replicas leaving, so the new ones follow the leader, catch up (snapshot, then log)
and join the ISR by the usual rules, while the old ones keep the ISR whole. The coordinator's leader drives it at
each refresh (`reassignment_step`, by compare-and-set): once every target replica is in the ISR, leadership first
moves into the target if the leader is leaving (the first target replica in the ISR that is live as the incarnation
the ISR knew, a new leader epoch), then the new leader writes the final replicas, the target, in the target's order.
A node that is no longer a replica deletes the coordinator's files. Since the state is in etcd, a reassignment
survives the restart of any node, the leader's included: whoever leads next picks it up.

As Kafka's `alterPartitionReassignments`: a new reassignment replaces the one running (replicas it no longer wants
are removed, even those still catching up), one back to the replicas before it cancels it, and one to the current
replicas when none runs changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.cluster.assignment import NO_LEADER, CoordinatorAssignment
from coordinator.cluster.store import ClusterStore, VersionedAssignment

log = logging.getLogger(__name__)
CAS_ATTEMPTS = 3  # a concurrent change moves the key's revision: read again, this many times at most


def reassignment_refusal(
    assignment: CoordinatorAssignment, target: Sequence[int], known_nodes: Collection[int], min_insync_replicas: int
) -> str:
    """Why a reassignment to `target` is refused (a one-line reason), or "" when it is valid.

    `known_nodes`: the nodes registered in the cluster (a live node, or a current replica that may be restarting).
    """
    if not target:
        return "the replica list is empty"
    repeated = sorted({n for n in target if list(target).count(n) > 1})
    if repeated:
        return f"node {repeated[0]} is named more than once in {list(target)}"
    unknown = sorted(n for n in target if n not in known_nodes and n not in assignment.replicas)
    if unknown:
        return f"node {unknown[0]} is not registered in the cluster (registered: {sorted(set(known_nodes))})"
    if len(target) < min_insync_replicas:
        return f"{len(target)} replicas {list(target)} are fewer than min.insync.replicas {min_insync_replicas}"
    return ""


def start_reassignment(assignment: CoordinatorAssignment, target: Sequence[int]) -> CoordinatorAssignment | None:
    """The assignment with a reassignment to `target` (validated) in progress; None when nothing changes.

    The original replicas are those before any reassignment running (the replicas less those it adds). Replicas
    leaving are every current replica not in the target, in their current order, after the target.
    """
    wanted = tuple(target)
    original = tuple(n for n in assignment.replicas if n not in assignment.adding)
    if not assignment.reassigning and wanted == assignment.replicas:
        return None
    removing = tuple(n for n in assignment.replicas if n not in wanted)
    replicas = wanted + removing
    if replicas == assignment.replicas and removing == assignment.removing:
        return None  # the same reassignment again
    isr = tuple(n for n in replicas if n in assignment.isr)
    adding = tuple(n for n in wanted if n not in original)
    return replace(
        assignment, replicas=replicas, isr=isr, adding=adding, removing=removing,
        partition_epoch=assignment.partition_epoch + 1,
    )  # fmt: skip


def reassignment_step(assignment: CoordinatorAssignment, live: Mapping[int, str]) -> CoordinatorAssignment | None:
    """The next step of the reassignment in progress, or None (none runs, or a target replica is still catching up).

    `live`: node -> the incarnation it runs. Every target replica in the ISR: if the leader leaves, leadership moves
    first to the first target replica in the ISR that is live as the incarnation the ISR knew (a new leader epoch);
    otherwise the replicas become the target (the ISR keeps the target's members, in the target's order).
    """
    if not assignment.reassigning:
        return None
    target = assignment.target
    if not set(target) <= set(assignment.isr):
        return None
    if assignment.leader not in target:
        electable = [n for n in target if n in assignment.isr and assignment.same_replica(n, live)]
        if not electable:
            return None
        return replace(
            assignment, leader=electable[0], leader_epoch=assignment.leader_epoch + 1,
            partition_epoch=assignment.partition_epoch + 1,
        )  # fmt: skip
    isr = tuple(n for n in target if n in assignment.isr)
    return replace(
        assignment, replicas=target, isr=isr, adding=(), removing=(), partition_epoch=assignment.partition_epoch + 1,
        incarnations=assignment.with_isr(isr),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    """What a reassignment request did for one coordinator: refused (a reason), started, or nothing to do."""

    coordinator_id: int
    refusal: str = ""
    assignment: VersionedAssignment | None = None  # as written (revision -1) or read
    retriable: bool = False  # refused for a reason that may pass (concurrent changes), not for the request itself


async def reassign(
    store: ClusterStore, coordinator_id: int, target: Sequence[int], known_nodes: Collection[int], min_isr: int
) -> ReassignmentResult:
    """Starts (or replaces, or cancels) one coordinator's reassignment in etcd, by compare-and-set."""
    for _ in range(CAS_ATTEMPTS):
        current = await store.assignment(coordinator_id)
        if current is None:
            return ReassignmentResult(coordinator_id, f"coordinator {coordinator_id} does not exist")
        refusal = reassignment_refusal(current.assignment, target, known_nodes, min_isr)
        if refusal:
            return ReassignmentResult(coordinator_id, refusal, current)
        started = start_reassignment(current.assignment, target)
        if started is None:
            return ReassignmentResult(coordinator_id, "", current)
        if await store.compare_and_set(coordinator_id, current.revision, started):
            log.info(
                "coordinator %d: reassignment to %s started (replicas %s, adding %s, removing %s)",
                coordinator_id, list(target), list(started.replicas), list(started.adding), list(started.removing),
            )  # fmt: skip
            return ReassignmentResult(coordinator_id, "", VersionedAssignment(started, -1))
    return ReassignmentResult(
        coordinator_id,
        f"the coordinator's assignment changed {CAS_ATTEMPTS} times under the request: try again",
        retriable=True,
    )


async def drive_reassignment(
    store: ClusterStore, coordinator_id: int, versioned: VersionedAssignment, node_id: int, live: Mapping[int, str]
) -> CoordinatorAssignment | None:
    """The leader's step of a coordinator's reassignment (`reassignment_step`), written by CAS; what it wrote."""
    before = versioned.assignment
    if before.leader != node_id or before.leader == NO_LEADER:
        return None
    step = reassignment_step(before, live)
    if step is None or not await store.compare_and_set(coordinator_id, versioned.revision, step):
        return None
    if step.leader != before.leader:
        log.info(
            "coordinator %d: reassignment: leadership moves from node %d to node %d (epoch %d) before node %d leaves",
            coordinator_id, before.leader, step.leader, step.leader_epoch, before.leader,
        )  # fmt: skip
    else:
        log.info(
            "coordinator %d: reassignment done: replicas %s (were %s), ISR %s",
            coordinator_id, list(step.replicas), list(before.replicas), list(step.isr),
        )  # fmt: skip
    return step


async def drive_reassignments(
    store: ClusterStore, assignments: dict[int, VersionedAssignment], node_id: int, live: Mapping[int, str]
) -> int:
    """The next step of each reassignment of a coordinator `node_id` leads, as the leader drives it (so that a new
    leader picks it up from etcd after any restart); `assignments` takes what was written (revision -1). Returns how
    many leaderships moved."""
    moved = 0
    for coordinator_id, versioned in list(assignments.items()):
        if versioned.revision < 0 or not versioned.assignment.reassigning:
            continue  # written just now: read again at the next refresh
        step = await drive_reassignment(store, coordinator_id, versioned, node_id, live)
        if step is not None:
            moved += step.leader != versioned.assignment.leader
            assignments[coordinator_id] = VersionedAssignment(step, -1)
    return moved
