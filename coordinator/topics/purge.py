"""Which batches of deleted topics one purge pass removes (DESIGN §4a), and the check that records them.

DeleteTopics takes a topic away from every caller at once; its partitions that still hold batches wait
in the state, and each coordinator's leader removes their batches in passes (coordinator.topics.purge_worker).
A pass is bounded by `diskless.coordinator.topic.purge.batch.max`: it takes partitions in key order and,
from each, its oldest batches, until the budget is spent. A partition costs its batches, and at least one
(so a pass also reaches a bounded number of partitions); it is finished in the pass that takes its last
batch, and the rest of it is left to the next pass otherwise. With batches b_k per partition, the purge
therefore takes exactly ceil(sum(max(1, b_k)) / batch max) passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import final

from coordinator.base.invariants import check_invariant
from coordinator.base.result import Result
from coordinator.machine import records
from coordinator.machine.view import CoordinatorView

# The bound of a range that takes every batch left: no last offset reaches it.
EVERY_BATCH = 2**63 - 1

# (partition key, count) -> the last offsets of the partition's oldest `count` batches, ascending.
FirstLastOffsets = Callable[[int, int], Sequence[int]]


@final
@dataclass(frozen=True, slots=True)
class PurgeRange:
    partition_key: int
    below_offset: int  # its batches whose last offset is below this leave; EVERY_BATCH: all, and the partition
    batches: int  # how many that is, as read when chosen


@final
@dataclass(frozen=True, slots=True)
class PurgePlan:
    ranges: tuple[PurgeRange, ...]


def select_purge(awaiting: Sequence[int], first_last_offsets: FirstLastOffsets, batch_max: int) -> PurgePlan:
    """One pass over the partitions awaiting purge (keys ascending): at most `batch_max` batches."""
    ranges = []
    budget = batch_max
    for key in awaiting:
        if budget <= 0:
            break
        last_offsets = first_last_offsets(key, budget + 1)  # one more than the budget: is anything left after?
        if len(last_offsets) <= budget:
            ranges.append(PurgeRange(key, EVERY_BATCH, len(last_offsets)))
            budget -= max(1, len(last_offsets))
        else:
            ranges.append(PurgeRange(key, last_offsets[budget - 1] + 1, budget))
            budget = 0
    return PurgePlan(tuple(ranges))


def finishes(plan: PurgePlan, awaiting: Sequence[int]) -> bool:
    """Whether the pass leaves nothing awaiting purge (of what was awaiting when it was chosen)."""
    return len(plan.ranges) == len(awaiting) and all(r.below_offset == EVERY_BATCH for r in plan.ranges)


def check_purge(view: CoordinatorView, plan: PurgePlan, now_ms: int) -> Result[int]:
    """Records the pass; its answer is the batches it removes. A served partition is never purged."""
    for purge_range in plan.ranges:
        check_invariant(
            purge_range.partition_key not in view.partitions_by_key,
            f"a purge chose partition {purge_range.partition_key}, which is served",
        )
    if not plan.ranges:
        return Result([], 0)
    record = records.batches_purged([(r.partition_key, r.below_offset) for r in plan.ranges])
    return Result([record], sum(r.batches for r in plan.ranges))
