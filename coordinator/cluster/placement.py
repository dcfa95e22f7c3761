"""Where coordinators' replicas live: the placement at formation and the rebalance plan (pure; DESIGN §6a).

Both keep two counts even over the nodes they are given, each differing by at most one between any two nodes:
the replicas a node holds, and the coordinators it is the preferred leader of (a coordinator's first replica,
the one leadership returns to). Kafka's controller spreads partitions the same way when a topic is created
(rack-unaware assignment), and `kafka-reassign-partitions --generate` plans moves; unlike `--generate`, the plan
here moves as few replicas as an even placement allows, since each move copies a coordinator's whole state.

Replica moves copy data (the new replica fetches a snapshot and the log); reordering a coordinator's replicas only
changes its preferred leader. The plan therefore first reaches even replica counts with the fewest moves, then
evens preferred leaders by reordering, which moves no data.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

Placement = dict[int, tuple[int, ...]]


def initial_placement(coordinators: int, nodes: Sequence[int], replication_factor: int) -> Placement:
    """Each coordinator's replicas over `nodes`, the preferred leader first; replicas and preferred leaders even.

    Replica slots are dealt round the node ring in one sequence (coordinator c takes slots c*R .. c*R+R-1), so
    every node holds the same number of replicas give or take one, and a coordinator's R slots are R distinct
    nodes. Preferred leaders are then evened by choosing which replica of each coordinator comes first.
    """
    ring = sorted(set(nodes))
    _check(ring, replication_factor)
    if coordinators < 0:
        raise ValueError(f"coordinators must be >= 0, got {coordinators}")
    placement = {
        c: tuple(ring[(c * replication_factor + j) % len(ring)] for j in range(replication_factor))
        for c in range(coordinators)
    }
    return even_preferred_leaders(placement, ring)


def place_added(
    current: Mapping[int, tuple[int, ...]], added: Sequence[int], nodes: Sequence[int], replication_factor: int
) -> Placement:
    """The replicas of coordinators added to a formed cluster (`diskless coordinators add`) over `nodes`, the others
    left where they are (moving them would copy their state; `plan_rebalance` is the operator's to run).

    Each new coordinator, in id order, takes the `replication_factor` nodes holding the fewest replicas (so replica
    counts that differed by at most one still do), and of those the one preferred leader of the fewest coordinators
    comes first, as Kafka's controller places a new partition of `__consumer_offsets` over the live brokers.
    """
    ring = sorted(set(nodes))
    _check(ring, replication_factor)
    replicas = dict.fromkeys(ring, 0)
    leaders = dict.fromkeys(ring, 0)
    for held in current.values():
        for position, n in enumerate(held):
            if n in replicas:
                replicas[n] += 1
                leaders[n] += 1 if position == 0 else 0
    placement: Placement = {}
    for c in sorted(set(added) - set(current)):
        chosen = sorted(ring, key=lambda n: (replicas[n], leaders[n], n))[:replication_factor]
        first = min(chosen, key=lambda n: (leaders[n], replicas[n], n))
        placement[c] = (first, *(n for n in chosen if n != first))
        for n in chosen:
            replicas[n] += 1
        leaders[first] += 1
    return placement


def plan_rebalance(current: Mapping[int, tuple[int, ...]], nodes: Sequence[int], replication_factor: int) -> Placement:
    """The coordinators whose replicas change, each with its new replicas (preferred leader first).

    `nodes` are the nodes that may hold replicas (the live ones, minus those being emptied). A replica on any
    other node must move; then replicas move one at a time from the fullest node to the emptiest until their
    counts differ by at most one, which takes exactly the fewest moves an even placement needs (each move lowers
    one node above its even share or raises one below it). A coordinator with fewer than `replication_factor`
    replicas gains the missing ones. A new replica takes the position of the one it replaces, so preferred
    leaders stay where they can; they are evened last, by reordering.
    """
    allowed = sorted(set(nodes))
    _check(allowed, replication_factor)
    plan: dict[int, list[int]] = {c: list(replicas) for c, replicas in current.items()}
    counts = {n: 0 for n in allowed}
    for replicas in plan.values():
        for n in replicas:
            if n in counts:
                counts[n] += 1
    for c in sorted(plan):  # replicas that must move: on nodes no longer allowed, or beyond the factor
        replicas = plan[c]
        kept = [n for n in replicas if n in counts][:replication_factor]
        for position, n in enumerate(replicas):
            if n in counts and n in kept:
                continue
            if n in counts:  # a replica beyond the factor: dropped
                counts[n] -= 1
                replicas[position] = -1
                continue
            target = _emptiest(counts, exclude=replicas)
            replicas[position] = target
            counts[target] += 1
        plan[c] = [n for n in replicas if n != -1]
        while len(plan[c]) < replication_factor:
            target = _emptiest(counts, exclude=plan[c])
            plan[c].append(target)
            counts[target] += 1
    while True:
        fullest = max(counts, key=lambda n: (counts[n], -n))
        emptiest = min(counts, key=lambda n: (counts[n], n))
        if counts[fullest] - counts[emptiest] <= 1:
            break
        # The fullest node is in more coordinators than the emptiest, so one of them holds the first, not the second.
        c = next(c for c in sorted(plan) if fullest in plan[c] and emptiest not in plan[c])
        plan[c][plan[c].index(fullest)] = emptiest
        counts[fullest] -= 1
        counts[emptiest] += 1
    evened = even_preferred_leaders({c: tuple(r) for c, r in plan.items()}, allowed)
    return {c: replicas for c, replicas in evened.items() if replicas != tuple(current[c])}


def even_preferred_leaders(placement: Mapping[int, tuple[int, ...]], nodes: Sequence[int]) -> Placement:
    """`placement` with replicas reordered so that preferred-leader counts over `nodes` differ by at most one.

    While the gap is larger, a chain of hand-overs moves one preferred leadership from the fullest node to the
    emptiest: node a gives coordinator c to b (another of c's replicas), b gives another to the next, and so on
    (a breadth-first search for the shortest chain); nodes inside the chain keep their counts. When no chain
    exists the replica sets themselves forbid an even split, and the placement is left as close as it got.
    """
    order = {c: list(r) for c, r in placement.items()}
    counts = {n: 0 for n in nodes}
    for replicas in order.values():
        if replicas and replicas[0] in counts:
            counts[replicas[0]] += 1
    while counts and max(counts.values()) - min(counts.values()) > 1:
        # From the fullest nodes first; each chain lowers the sum of squared counts, so this ends.
        starts = sorted(counts, key=lambda n: (-counts[n], n))
        chain = next((found for n in starts if (found := _hand_over_chain(order, counts, n)) is not None), None)
        if chain is None:
            break
        for c, giver, taker in chain:
            replicas = order[c]
            replicas.remove(taker)
            replicas.insert(0, taker)
            counts[giver] -= 1
            counts[taker] += 1
    return {c: tuple(r) for c, r in order.items()}


def replica_counts(placement: Mapping[int, tuple[int, ...]]) -> dict[int, int]:
    """How many replicas each node named in `placement` holds."""
    counts: dict[int, int] = {}
    for replicas in placement.values():
        for n in replicas:
            counts[n] = counts.get(n, 0) + 1
    return counts


def leader_counts(placement: Mapping[int, tuple[int, ...]]) -> dict[int, int]:
    """How many coordinators each node is the preferred leader of."""
    counts: dict[int, int] = {}
    for replicas in placement.values():
        if replicas:
            counts[replicas[0]] = counts.get(replicas[0], 0) + 1
    return counts


def _hand_over_chain(
    order: Mapping[int, list[int]], counts: Mapping[int, int], start: int
) -> list[tuple[int, int, int]] | None:
    """The shortest chain of (coordinator, giver, taker) from `start` to a node leading at least two fewer."""
    floor = counts[start] - 1
    came_from: dict[int, tuple[int, int, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        giver = queue.popleft()
        for c in sorted(order):
            replicas = order[c]
            if not replicas or replicas[0] != giver:
                continue
            for taker in replicas[1:]:
                if taker not in counts or taker in came_from:
                    continue
                came_from[taker] = (c, giver, taker)
                if counts[taker] < floor:
                    chain: list[tuple[int, int, int]] = []
                    step = came_from[taker]
                    while step is not None:
                        chain.append(step)
                        step = came_from[step[1]]
                    return chain  # distinct coordinators (each has one leader, each node gives once): any order
                queue.append(taker)
    return None


def _emptiest(counts: Mapping[int, int], exclude: Sequence[int]) -> int:
    candidates = [n for n in counts if n not in exclude]
    return min(candidates, key=lambda n: (counts[n], n))


def _check(nodes: Sequence[int], replication_factor: int) -> None:
    if replication_factor < 1:
        raise ValueError(f"the replication factor must be >= 1, got {replication_factor}")
    if len(nodes) < replication_factor:
        raise ValueError(
            f"{len(nodes)} nodes cannot hold {replication_factor} replicas of a coordinator: "
            f"need at least the replication factor"
        )
