"""ISR changes a coordinator's replica asks of etcd (Kafka's AlterPartition), each by compare-and-set: the pure rules
(`assignment.isr_changed`, `damaged_replica.without_damaged`) applied to what etcd holds now, read again when a
concurrent change (an election, a dead follower removed, a reassignment step) moved the revision."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import replace

from coordinator.cluster.assignment import after_nodes_lost, isr_changed
from coordinator.cluster.damaged_replica import without_damaged
from coordinator.cluster.roles import incarnations_of
from coordinator.cluster.store import ClusterStore, VersionedAssignment

log = logging.getLogger(__name__)
CAS_ATTEMPTS = 3  # a concurrent change moves the key's revision: read again, this many times at most


async def alter_isr(
    store: ClusterStore,
    coordinator_id: int,
    leader_epoch: int,
    node_id: int,
    isr: tuple[int, ...],
    joined: Mapping[int, str],
) -> tuple[int, ...] | None:
    """The leader `node_id` of `leader_epoch` sets the ISR (`joined`: the incarnations members joined as); the ISR
    etcd then holds, or None when refused or the epoch is over."""
    for _ in range(CAS_ATTEMPTS):
        current = await store.assignment(coordinator_id)
        if current is None or current.assignment.leader_epoch != leader_epoch:
            return None
        live = incarnations_of(await store.live_nodes()) if set(joined) - set(current.assignment.isr) else None
        changed = isr_changed(current.assignment, node_id, isr, joined, live)
        if isinstance(changed, str):
            log.warning("coordinator %d: ISR change refused: %s", coordinator_id, changed)
            return None
        if changed == current.assignment:
            return changed.isr
        if await store.compare_and_set(coordinator_id, current.revision, changed):
            return changed.isr
    return None


async def leave_isr_damaged(store: ClusterStore, coordinator_id: int, node_id: int) -> VersionedAssignment | str:
    """`node_id`'s damaged replica leaves the ISR, handing leadership on: the assignment as etcd now holds it (revision
    -1 when written here), or why it cannot leave yet (no other in-sync replica alive: no healthy copy)."""
    for _ in range(CAS_ATTEMPTS):
        current = await store.assignment(coordinator_id)
        if current is None:
            return f"coordinator {coordinator_id} has no assignment in etcd"
        changed = without_damaged(current.assignment, node_id, incarnations_of(await store.live_nodes()))
        if isinstance(changed, str):
            return changed
        if changed is None:
            return current  # not in the ISR: nothing to change
        if await store.compare_and_set(coordinator_id, current.revision, changed):
            log.warning(
                "coordinator %d: node %d is damaged: left the ISR %s; leader node %d (epoch %d)",
                coordinator_id, node_id, list(changed.isr), changed.leader, changed.leader_epoch,
            )  # fmt: skip
            return replace(current, assignment=changed, revision=-1)
    return f"coordinator {coordinator_id}: its assignment kept changing in etcd"


async def elect_where_leaders_lost(
    store: ClusterStore, assignments: dict[int, VersionedAssignment], live: Mapping[int, str], damaged: Collection[int]
) -> int:
    """Each coordinator whose leader or ISR members are gone changes by compare-and-set (`assignment.after_nodes_lost`:
    the first live in-sync replica leads); `assignments` takes each change written. The leaders changed."""
    changes = 0
    for coordinator_id, versioned in assignments.items():
        if coordinator_id in damaged:
            continue  # a damaged replica does not shrink the ISR to itself: it waits for the others to return
        elected = after_nodes_lost(versioned.assignment, live)
        if elected is None or not await store.compare_and_set(coordinator_id, versioned.revision, elected):
            continue
        if elected.leader != versioned.assignment.leader:
            changes += 1
            log.info(
                "coordinator %d: node %d elected leader in epoch %d (node %s gone); ISR %s",
                coordinator_id, elected.leader, elected.leader_epoch, versioned.assignment.leader, list(elected.isr),
            )  # fmt: skip
        assignments[coordinator_id] = replace(versioned, assignment=elected, revision=-1)
    return changes
