"""A replica that found its own files damaged leaves the ISR before it repairs (DESIGN §6a, TigerBeetle's storage
faults): the pure rule of that change.

A damaged replica is not the replica the ISR knew: it must never be elected nor counted toward
`min.insync.replicas` until it has fetched everything again. It leaves the ISR at once, handing leadership to the
first other member (in replica order) that is live as the incarnation the ISR knew. If there is no such member
there is no healthy copy to repair from: nothing changes, the coordinator stays unavailable (no unclean election),
and the damaged replica tries again when another member is back.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.cluster.assignment import CoordinatorAssignment


def without_damaged(
    assignment: CoordinatorAssignment, node: int, live: Mapping[int, str]
) -> CoordinatorAssignment | str | None:
    """The assignment once `node` (damaged) left the ISR; None when it is not in it (nothing to change); a sentence
    saying why not when no other in-sync replica is live as the replica the ISR knew (no healthy copy)."""
    if node not in assignment.isr:
        return None
    healthy = [n for n in assignment.replicas if n in assignment.isr and n != node and assignment.same_replica(n, live)]
    if not healthy:
        others = [n for n in assignment.isr if n != node]
        return f"no healthy copy: no other in-sync replica is alive (ISR {list(assignment.isr)}" + (
            f", nodes {others} not live as the replica the ISR knew)" if others else ", this node alone)"
        )
    isr = tuple(n for n in assignment.isr if n != node)
    leader = assignment.leader
    if leader not in isr:  # it led, or none did: the first healthy member leads
        leader = healthy[0]
    return assignment.changed(leader, isr)
