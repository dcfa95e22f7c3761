"""ISR changes asked of etcd are fenced by the leader epoch (coordinator/cluster/isr_changes.py; Kafka's AlterPartition
refuses a stale leader epoch): what the mutation run over coordinator/ found unpinned (issue #40, item 5;
docs/testing.md). Each test names the one-line break it kills."""

from __future__ import annotations

import asyncio

from coordinator.base.clock import ManualClock
from coordinator.cluster.assignment import CoordinatorAssignment
from coordinator.cluster.isr_changes import alter_isr
from coordinator.cluster.memory_store import MemoryClusterStore, MemoryEtcd

LEADER_EPOCH = 5


def test_a_leader_of_an_earlier_epoch_changes_no_isr() -> None:
    """Node 1 led at epoch 4, then was elected again (epoch 5): a shrink it decided at epoch 4 is refused and etcd
    keeps the ISR, though node 1 is the leader now. Kills `current is None or current.assignment.leader_epoch !=
    leader_epoch` made `and` in `alter_isr`."""

    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(ManualClock()))
        held = CoordinatorAssignment((1, 2, 3), 1, LEADER_EPOCH, 0, (1, 2, 3))
        assert await store.compare_and_set(0, 0, held)
        assert await alter_isr(store, 0, LEADER_EPOCH - 1, 1, (1, 2), {}) is None
        current = await store.assignment(0)
        assert current is not None and current.assignment == held
        # The same change at the current epoch is made: the refusal above was the epoch's, not the change's.
        assert await alter_isr(store, 0, LEADER_EPOCH, 1, (1, 2), {}) == (1, 2)
        # And a coordinator etcd holds nothing of is refused, not a crash.
        assert await alter_isr(store, 7, LEADER_EPOCH, 1, (1, 2), {}) is None

    asyncio.run(run())
