"""Which user partitions to move so that coordinators hold even loads (`diskless rebalance-partitions`), pure.

A coordinator's load is the live batches of its partitions: what its state, its log's replay and its
FindBatches answers grow with. Moving a partition copies its metadata to another coordinator's log
(docs/design.md §5a), so the plan moves as few partitions as it can: while the most loaded coordinator is above
the mean by more than the tolerance (or the least loaded below it), one partition goes from the most loaded to
the least loaded, the one whose move brings that pair closest to the mean; ties go to the larger partition
(fewer moves after it), then to the lowest topic id and partition, so the same loads give the same plan in any
order. A move of s batches from a coordinator holding a to one holding b < a lowers the sum of squared
distances from the mean by 2s(a - b - s), so only partitions with 0 < s < a - b are taken: each move lowers it,
and the plan ends. No partition moves twice. Evening weights exactly is a partition problem (NP-hard); this is
the greedy largest-fitting-first, which takes one move per coordinator when one move can even it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import final

# A coordinator within this fraction of the mean load (live batches) is even.
DEFAULT_TOLERANCE_RATIO = 0.1
# The most moves one plan proposes: each is a hand-over between two logs.
DEFAULT_MAX_MOVES = 100


@final
@dataclass(frozen=True, slots=True)
class PartitionLoad:
    coordinator_id: int
    topic_id: bytes
    partition: int
    live_batches: int


@final
@dataclass(frozen=True, slots=True)
class PartitionMove:
    topic_id: bytes
    partition: int
    from_coordinator: int
    to_coordinator: int
    live_batches: int


def coordinator_loads(partitions: Iterable[PartitionLoad], coordinators: Sequence[int]) -> dict[int, int]:
    """Live batches per coordinator; coordinators holding nothing count 0."""
    loads = dict.fromkeys(coordinators, 0)
    for held in partitions:
        if held.coordinator_id not in loads:
            raise ValueError(
                f"partition {held.partition} is on coordinator {held.coordinator_id}, not one of {sorted(loads)}"
            )
        if held.live_batches < 0:
            raise ValueError(f"live batches must be >= 0, got {held.live_batches}")
        loads[held.coordinator_id] += held.live_batches
    return loads


def plan_partition_moves(
    partitions: Sequence[PartitionLoad],
    coordinators: Sequence[int],
    tolerance_ratio: float = DEFAULT_TOLERANCE_RATIO,
    max_moves: int = DEFAULT_MAX_MOVES,
) -> tuple[PartitionMove, ...]:
    """The moves, in order, that even live batches over `coordinators` (the ones that may hold partitions)."""
    if not coordinators:
        raise ValueError("no coordinator to place partitions on")
    if tolerance_ratio < 0 or max_moves < 0:
        raise ValueError(f"tolerance_ratio and max_moves must be >= 0, got {tolerance_ratio} and {max_moves}")
    loads = coordinator_loads(partitions, coordinators)
    mean = sum(loads.values()) / len(loads)
    allowed = tolerance_ratio * mean
    held: dict[int, list[PartitionLoad]] = {c: [] for c in loads}
    for partition in sorted(partitions, key=lambda p: (p.topic_id, p.partition)):
        held[partition.coordinator_id].append(partition)
    moved: set[tuple[bytes, int]] = set()
    moves: list[PartitionMove] = []
    while len(moves) < max_moves:
        hot = max(loads, key=lambda c: (loads[c], -c))
        cold = min(loads, key=lambda c: (loads[c], c))
        if loads[hot] - mean <= allowed and mean - loads[cold] <= allowed:
            break
        chosen = _best_move(held[hot], loads[hot], loads[cold], mean, moved)
        if chosen is None:
            break  # no single partition of the most loaded coordinator brings the pair closer
        held[hot].remove(chosen)
        held[cold].append(chosen)
        moved.add((chosen.topic_id, chosen.partition))
        loads[hot] -= chosen.live_batches
        loads[cold] += chosen.live_batches
        moves.append(PartitionMove(chosen.topic_id, chosen.partition, hot, cold, chosen.live_batches))
    return tuple(moves)


def _best_move(
    candidates: Sequence[PartitionLoad], hot_load: int, cold_load: int, mean: float, moved: set[tuple[bytes, int]]
) -> PartitionLoad | None:
    best: PartitionLoad | None = None
    best_key: tuple[float, int] | None = None
    for partition in candidates:
        size = partition.live_batches
        if (partition.topic_id, partition.partition) in moved or not 0 < size < hot_load - cold_load:
            continue
        key = (max(abs(hot_load - size - mean), abs(cold_load + size - mean)), -size)
        if best_key is None or key < best_key:
            best, best_key = partition, key
    return best
