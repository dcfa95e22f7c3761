"""Preferred leader elections (DESIGN §6a; Kafka's `auto.leader.rebalance.enable` and `kafka-leader-election
--election-type PREFERRED`): leadership goes back to each coordinator's first replica once it is in the ISR.

The rule is `assignment.preferred_leader_election`; here it is applied to etcd, each coordinator by its own
compare-and-set, so that concurrent attempts (two nodes, an election after a loss, an ISR change) are safe: a
stale writer loses, reads again and decides again. The old leader learns of the new leader epoch at its next
refresh and steps down to follow through the usual role change; until then it acknowledges nothing, since the
new leader, in its ISR, no longer fetches from it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from coordinator.base.clock import Clock
from coordinator.cluster.assignment import NO_LEADER, preferred_leader_election, why_not_preferred
from coordinator.cluster.store import ClusterStore, VersionedAssignment

log = logging.getLogger(__name__)
CAS_ATTEMPTS = 3  # a concurrent change moves the key's revision: read again, this many times at most


class ElectionOutcome(enum.Enum):
    ELECTED = "elected"
    ALREADY_PREFERRED = "already preferred"
    NOT_POSSIBLE = "not possible"


@dataclass(frozen=True, slots=True)
class PreferredElection:
    """What a preferred election did for one coordinator, and its leader after it."""

    coordinator_id: int
    outcome: ElectionOutcome
    preferred: int  # the first replica; NO_LEADER when the coordinator is unknown
    leader: int
    leader_epoch: int
    reason: str = ""  # why not possible
    assignment: VersionedAssignment | None = None  # as written (revision -1: not read back) or last read


class ElectionRefused(Exception):
    """This node cannot elect now (its etcd session is not valid): the call fails whole, retriable elsewhere."""


async def elect_preferred_leaders(
    store: ClusterStore, coordinator_ids: Iterable[int], live: Mapping[int, str]
) -> list[PreferredElection]:
    """Each coordinator's preferred election, by compare-and-set; `live`: node -> the incarnation it runs."""
    return [await _elect_one(store, coordinator_id, live) for coordinator_id in coordinator_ids]


async def _elect_one(store: ClusterStore, coordinator_id: int, live: Mapping[int, str]) -> PreferredElection:
    current: VersionedAssignment | None = None
    for _ in range(CAS_ATTEMPTS):
        current = await store.assignment(coordinator_id)
        if current is None:
            return PreferredElection(
                coordinator_id, ElectionOutcome.NOT_POSSIBLE, NO_LEADER, NO_LEADER, -1, "no such coordinator"
            )
        before = current.assignment
        preferred = before.replicas[0]
        if before.leader == preferred:
            return PreferredElection(
                coordinator_id, ElectionOutcome.ALREADY_PREFERRED, preferred, preferred, before.leader_epoch,
                assignment=current,
            )  # fmt: skip
        elected = preferred_leader_election(before, live)
        if elected is None:
            return PreferredElection(
                coordinator_id, ElectionOutcome.NOT_POSSIBLE, preferred, before.leader, before.leader_epoch,
                why_not_preferred(before, live), current,
            )  # fmt: skip
        if await store.compare_and_set(coordinator_id, current.revision, elected):
            log.info(
                "coordinator %d: leadership back to its preferred replica, node %d, in epoch %d (from node %d)",
                coordinator_id, preferred, elected.leader_epoch, before.leader,
            )  # fmt: skip
            return PreferredElection(
                coordinator_id, ElectionOutcome.ELECTED, preferred, preferred, elected.leader_epoch,
                assignment=VersionedAssignment(elected, -1),
            )  # fmt: skip
    assert current is not None  # read at least once: CAS_ATTEMPTS > 0
    last = current.assignment
    return PreferredElection(
        coordinator_id, ElectionOutcome.NOT_POSSIBLE, last.replicas[0], last.leader, last.leader_epoch,
        f"the coordinator's assignment changed {CAS_ATTEMPTS} times under the election: try again", current,
    )  # fmt: skip


class LeaderBalancer(Protocol):
    """The node's controller as the periodic elections use it."""

    def balances_leaders(self) -> bool: ...

    async def elect_preferred_leaders(self) -> Sequence[PreferredElection]: ...


async def balance_leaders(balancer: LeaderBalancer, clock: Clock, interval_ms: int) -> None:
    """Every `interval_ms`, where this node runs them (`balances_leaders`), preferred elections of every coordinator
    (Kafka's `leader.imbalance.check.interval.ms`)."""
    while True:
        await clock.sleep_ms(interval_ms)
        if not balancer.balances_leaders():
            continue
        try:
            results = await balancer.elect_preferred_leaders()
        except Exception as error:  # etcd unreachable, the session lapsed: the next check tries again
            log.warning("preferred leader elections failed: %s", error)
            continue
        waiting = [r for r in results if r.outcome is ElectionOutcome.NOT_POSSIBLE]
        if waiting:
            log.info(
                "preferred leaders: %d coordinators not led by their preferred replica, which cannot lead yet (%s)",
                len(waiting), "; ".join(f"coordinator {r.coordinator_id}: {r.reason}" for r in waiting[:4]),
            )  # fmt: skip
