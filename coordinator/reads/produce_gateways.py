"""Produce gateways (KIP-1164 "Reducing multi-DC commit operations", DESIGN §2): per coordinator and rack, the
brokers of that rack that producers send the coordinator's partitions to, so that a broker commits its files to
few coordinators and few nodes.

A pure function of the brokers (with their racks) and the coordinators (with the node leading each): the same input
in any order gives the same answer.

Per rack of b brokers and n coordinators, each coordinator gets `per = max(1, b // n)` gateways of the rack; the
n * per gateway slots are laid out coordinator by coordinator, the coordinators in groups by their leader node, and
cut into b contiguous runs, one per broker (by id), of ⌊n * per / b⌋ or ⌈…⌉ slots. When per > 1, n * per <= b, so
each broker has at most one slot and a coordinator's gateways are distinct brokers. When per == 1, a broker's run
is a contiguous stretch of coordinators: which runs take the extra slot is chosen to cut the sequence where one
leader's coordinators end and the next's begin as often as possible, so that a broker follows few leader nodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import final

NO_RACK = ""  # brokers without a rack form one rack


@final
@dataclass(frozen=True, slots=True)
class Broker:
    broker_id: int
    rack: str = NO_RACK


@final
@dataclass(frozen=True, slots=True)
class Gateway:
    coordinator_id: int
    rack: str
    broker_ids: tuple[int, ...]  # ascending


def duplicate_broker_problem(brokers: Iterable[Broker]) -> str | None:
    """Why the brokers cannot be placed (a broker id given twice), or None."""
    counts = Counter(broker.broker_id for broker in brokers)
    twice = sorted(broker_id for broker_id, count in counts.items() if count > 1)
    return f"broker ids given more than once: {twice}" if twice else None


def gateways_per_rack(brokers: int, coordinators: int) -> int:
    """How many brokers of a rack of `brokers` are gateways for each coordinator."""
    return max(1, brokers // coordinators)


def produce_gateways(brokers: Iterable[Broker], leaders: Mapping[int, int]) -> list[Gateway]:
    """Each coordinator's gateways in each rack, by coordinator then rack.

    `leaders`: coordinator id -> the node leading it (-1 when none is known: those form one group). Raises
    ValueError for a broker id given twice (see `duplicate_broker_problem`).
    """
    brokers = list(brokers)
    problem = duplicate_broker_problem(brokers)
    if problem is not None:
        raise ValueError(problem)
    if not leaders:
        return []
    racks: dict[str, list[int]] = {}
    for broker in brokers:
        racks.setdefault(broker.rack, []).append(broker.broker_id)
    sequence = _leader_sequence(leaders)
    by_coordinator: dict[tuple[int, str], tuple[int, ...]] = {}
    for rack, broker_ids in racks.items():
        for coordinator_id, gateways in _rack_gateways(sorted(broker_ids), sequence, leaders).items():
            by_coordinator[coordinator_id, rack] = gateways
    return [Gateway(c, rack, by_coordinator[c, rack]) for c in sorted(leaders) for rack in sorted(racks)]


def _leader_sequence(leaders: Mapping[int, int]) -> list[int]:
    """The coordinators grouped by leader node (ascending), each group by coordinator id."""
    return sorted(leaders, key=lambda coordinator_id: (leaders[coordinator_id], coordinator_id))


def _rack_gateways(
    broker_ids: Sequence[int], sequence: Sequence[int], leaders: Mapping[int, int]
) -> dict[int, tuple[int, ...]]:
    """One rack: each coordinator's gateways among `broker_ids` (ascending)."""
    count = len(sequence)
    per = gateways_per_rack(len(broker_ids), count)
    slots = [coordinator_id for coordinator_id in sequence for _ in range(per)]
    if per == 1:
        sizes = run_sizes([leaders[c] for c in sequence], len(broker_ids))
    else:  # at most one slot per broker: every cut lies between coordinators or within one's distinct brokers
        sizes = _even_sizes(len(slots), len(broker_ids))
    gateways: dict[int, list[int]] = {c: [] for c in sequence}
    start = 0
    for broker_id, size in zip(broker_ids, sizes, strict=True):
        for coordinator_id in slots[start : start + size]:
            gateways[coordinator_id].append(broker_id)
        start += size
    return {c: tuple(sorted(ids)) for c, ids in gateways.items()}


def _even_sizes(slots: int, runs: int) -> list[int]:
    """`runs` sizes of ⌊slots / runs⌋ or ⌈…⌉, the larger first."""
    small, larger = divmod(slots, runs)
    return [small + 1] * larger + [small] * (runs - larger)


def run_sizes(groups: Sequence[int], runs: int) -> list[int]:
    """Cuts a sequence (each element's group; a group's elements adjacent) into `runs` contiguous runs of
    ⌊len / runs⌋ or ⌈…⌉ elements spanning as few groups in total as possible.

    Which runs take the extra element is the only choice; a dynamic program over (runs placed, larger runs used)
    picks it (O(runs * larger runs)); a tie keeps the first way found, a larger run tried first, so the answer is
    deterministic.
    """
    small, larger = divmod(len(groups), runs)
    # The index of each element's group run, so that a contiguous run [start, end) spans index[end-1] - index[start]
    # + 1 groups.
    index: list[int] = []
    for position, group in enumerate(groups):
        index.append(0 if position == 0 else index[-1] + (group != groups[position - 1]))

    def span(start: int, size: int) -> int:
        return 0 if size == 0 else index[start + size - 1] - index[start] + 1

    # cost[used] after k runs: the fewest groups spanned with `used` larger runs among the k; chosen[k][used]: the
    # larger run count before the k-th run on that best way (back-pointers, read backwards at the end).
    cost: dict[int, int] = {0: 0}
    chosen: list[dict[int, int]] = []
    for placed in range(runs):
        following: dict[int, int] = {}
        previous: dict[int, int] = {}
        for used, spanned in cost.items():
            start = placed * small + used
            for extra in (1, 0):
                used_after = used + extra
                if used_after > larger or runs - placed - 1 < larger - used_after:
                    continue  # too many larger runs, or too few runs left for the ones still due
                candidate = spanned + span(start, small + extra)
                if used_after not in following or candidate < following[used_after]:
                    following[used_after] = candidate
                    previous[used_after] = used
        cost = following
        chosen.append(previous)
    sizes: list[int] = []
    used = larger
    for previous in reversed(chosen):
        before = previous[used]
        sizes.append(small + used - before)
        used = before
    return sizes[::-1]
