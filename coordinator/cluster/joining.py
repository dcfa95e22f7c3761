"""A node joining the cluster, and coordinators getting their first replicas (DESIGN §6a; split from controller.py).

- **Registering.** The node's key under a lease (its session), once its previous lease, if any, is gone.
- **Placing.** Each coordinator of the stored count without an assignment gets one, written by compare-and-set on
  its absent key, so that of nodes doing it at once one wins. Coordinators the cluster formed with are placed over
  the nodes stored as the formation's (`placement.initial_placement`); coordinators added later
  (`diskless coordinators add` raised the count) over the live nodes, the others left where they are
  (`placement.place_added`). Any node does it, at its join or its next refresh: an add whose node crashed after
  raising the count is completed by the others.
- **Incarnations.** Once registered, the node tells each ISR it is in whether it is the replica the ISR knew
  (`assignment.after_restart`): the ISR records its new incarnation, or it leaves the ISR before anyone could elect
  it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from coordinator.base.clock import Clock
from coordinator.cluster.assignment import after_restart, assign_added, assign_replicas
from coordinator.cluster.incarnation import Incarnation
from coordinator.cluster.roles import incarnations_of
from coordinator.cluster.store import (
    ClusterConfig,
    ClusterStore,
    NodeEndpoint,
    NodeIdTaken,
    NodeSession,
    SessionExpired,
    VersionedAssignment,
)

log = logging.getLogger(__name__)
REGISTER_WAIT_EXTRA_MS = 5_000  # beyond two session timeouts, for a previous lease of this node to expire
REGISTER_RETRY_MS = 500
RECONCILE_TRIES = 3  # a concurrent change moves the key's revision: read again, this many times


async def register(store: ClusterStore, endpoint: NodeEndpoint, ttl_s: int, clock: Clock) -> NodeSession:
    """The node's session: its key under a new lease, once no live lease holds its id (after a crash, the node's
    previous lease may live until its time to live ends)."""
    deadline_ms = clock.monotonic_ms() + 2 * ttl_s * 1000 + REGISTER_WAIT_EXTRA_MS
    while True:
        try:
            return NodeSession(await store.register_node(endpoint, ttl_s), ttl_s, clock)
        except NodeIdTaken as error:
            if clock.monotonic_ms() > deadline_ms:
                raise
            log.info("%s; waiting for its lease to expire", error)
            await clock.sleep_ms(REGISTER_RETRY_MS)


async def renew_while_forming(
    session: NodeSession, register_again: Callable[[], Awaitable[NodeSession]], node_id: int
) -> NodeSession:
    """Keeps the session alive while the cluster forms (the keep-alive starts only once it has): a node waiting
    longer than its session for the others would otherwise vanish from etcd and wait for ever. The session to go on
    with: this one, or a new one where etcd let it expire."""
    try:
        await session.renew()
    except SessionExpired:
        log.warning("node %d: its session expired while the cluster formed; registering again", node_id)
        return await register_again()
    except Exception as error:  # etcd unreachable: the next round tries again
        log.warning("node %d: session not renewed while the cluster forms (%s)", node_id, error)
    return session


def missing_coordinators(config: ClusterConfig, assignments: Mapping[int, VersionedAssignment]) -> list[int]:
    return [c for c in range(config.coordinators) if c not in assignments]


async def place_missing(
    store: ClusterStore,
    config: ClusterConfig,
    assignments: Mapping[int, VersionedAssignment],
    live: Mapping[int, NodeEndpoint],
) -> bool:
    """Stores an assignment for each coordinator of the count that has none; False when there are too few live nodes
    for the replication factor (nothing written), else True."""
    missing = missing_coordinators(config, assignments)
    if not missing:
        return True
    if len(live) < config.replication_factor:
        return False
    incarnations = incarnations_of(live)
    factor = config.replication_factor
    fresh = {}
    formed = [c for c in missing if c < config.formed_count]
    if formed:
        # Over the nodes registered when the first former looked, stored once in etcd, so that concurrent formers
        # write one placement.
        formers = await store.formation_nodes(sorted(live))
        fresh.update(assign_replicas(config.formed_count, formers, factor, incarnations))
    added = [c for c in missing if c >= config.formed_count]
    if added:
        current = {c: v.assignment for c, v in assignments.items()}
        current.update({c: fresh[c] for c in formed})
        fresh.update(assign_added(current, added, sorted(live), factor, incarnations))
        log.info("placing the replicas of added coordinators %s over nodes %s", added, sorted(live))
    for coordinator_id in missing:
        await store.compare_and_set(coordinator_id, 0, fresh[coordinator_id])
    return True


async def reconcile_incarnation(
    store: ClusterStore,
    assignments: dict[int, VersionedAssignment],
    node_id: int,
    incarnation: Incarnation,
    replica_on_disk: Callable[[int], bool],
) -> None:
    """Each ISR holding this node records its new incarnation, or loses it (`assignment.after_restart`);
    `assignments` is updated with what the node read or wrote."""
    for coordinator_id in sorted(assignments):
        for _ in range(RECONCILE_TRIES):
            current = await store.assignment(coordinator_id)
            if current is None:
                break
            changed = after_restart(
                current.assignment, node_id, incarnation.previous, incarnation.current, replica_on_disk(coordinator_id)
            )
            if changed is None:
                assignments[coordinator_id] = current
                break
            if await store.compare_and_set(coordinator_id, current.revision, changed):
                if node_id not in changed.isr:
                    log.warning(
                        "coordinator %d: node %d is not the replica its ISR knew (incarnation %s, the ISR's %s): "
                        "left the ISR %s until it has caught up again",
                        coordinator_id, node_id, incarnation.current,
                        current.assignment.incarnation_of(node_id) or "unknown", list(changed.isr),
                    )  # fmt: skip
                assignments[coordinator_id] = replace(current, assignment=changed, revision=-1)
                break
