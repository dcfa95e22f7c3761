"""The append ticks: the lingering groups of every coordinator of a process are written at the same tick.

A commit reaching two coordinators is answered when both parts are applied. With a linger per group, a
part joining a group that had just begun waiting was written a whole linger after a part joining one
that had nearly waited its time; with one tick for both, they are written together.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from coordinator.base.clock import SystemClock
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.shard import Operation
from coordinator.runtime.shard.append_ticks import AppendTicks
from coordinator.runtime.shard.pipeline import Pipeline
from coordinator.topics import partition_checks
from tests.test_operation_seam import MemoryLog, MemoryState

LINGER_MS = 400
SECOND_PART_AFTER_S = 0.25  # the second coordinator's group begins waiting this long after the first's
TOPIC = bytes(range(1, 17))


class TimedLog(MemoryLog):
    """Records when each append happened, and after how many ticks of the shared timer."""

    def __init__(self, ticks: AppendTicks) -> None:
        super().__init__()
        self._ticks = ticks
        self.appended_at: list[float] = []
        self.appended_after_ticks: list[int] = []

    def append(self, frames: bytes, end_offset: int, last_epoch: int) -> None:
        super().append(frames, end_offset, last_epoch)
        self.appended_at.append(time.monotonic())
        self.appended_after_ticks.append(next(t for t in range(1000) if not self._ticks.passed(t + 1)))


async def write_two_parts(shared_ticks: bool) -> tuple[float, float, float, list[int]]:
    """Two coordinators' lingering groups, the second begun later; (start, first append, second append, the shared
    timer's ticks fired at each append)."""
    settings = Settings(append_linger_ms=LINGER_MS)
    ticks = AppendTicks(settings.append_linger_ms)
    logs = [TimedLog(ticks), TimedLog(ticks)]
    with ThreadPoolExecutor(max_workers=2) as executor:
        pipelines = [
            Pipeline(
                coordinator_id,
                settings,
                SystemClock(),
                Metrics(),
                logs[coordinator_id],
                MemoryState(),
                CoordinatorView(coordinator_id, lambda key: None),
                0,
                executor,
                lambda: None,
                None,
                ticks=ticks if shared_ticks else None,
            )
            for coordinator_id in (0, 1)
        ]
        running = [asyncio.create_task(pipeline.run()) for pipeline in pipelines]
        started = time.monotonic()
        answers = []
        for partition, pipeline in enumerate(pipelines):
            create = partition_checks.CreatePartitions(TOPIC, "orders", (partition,))
            answers.append(
                pipeline.submit(Operation(partition_checks.check_create_partitions, create), may_linger=True)
            )
            if partition == 0:
                await asyncio.sleep(SECOND_PART_AFTER_S)
        await asyncio.wait_for(asyncio.gather(*answers), 10)
        for pipeline in pipelines:
            pipeline.close()
        assert await asyncio.wait_for(asyncio.gather(*running), 10) == [None, None]
    return started, logs[0].appended_at[0], logs[1].appended_at[0], [log.appended_after_ticks[0] for log in logs]


def test_two_coordinators_lingering_groups_are_written_at_the_same_tick() -> None:
    started, first, _, fired = asyncio.run(write_two_parts(shared_ticks=True))
    # The linger still holds the first group back (a timer may fire a hair early) ...
    assert first - started >= LINGER_MS / 1000 - 0.02, f"written {first - started:.3f} s after its submission"
    # ... and the second group, begun later, is written at the same tick (the first the timer fired) rather than
    # at a tick of its own a linger later: counted in ticks, not seconds, so a loaded machine cannot break it.
    assert fired == [1, 1], f"the two parts were written after ticks {fired}"


def test_without_a_shared_tick_each_group_lingers_from_its_own_start() -> None:
    """The contrast the ticks remove: each pipeline alone waits a linger from its own group's start."""
    _, first, second, _ = asyncio.run(write_two_parts(shared_ticks=False))
    assert second - first >= SECOND_PART_AFTER_S - 0.05, f"the parts were written {second - first:.3f} s apart"


def test_ticks_come_on_a_new_event_loop_after_the_old_one_ended_with_a_tick_armed() -> None:
    """A node's tests run it on one loop, then another: the timer armed on the first never fires, so the
    second loop arms its own (and drops the first loop's waiters)."""
    ticks = AppendTicks(50)

    async def wait_for_a_tick(started_tick_only: bool) -> bool:
        wakeup = asyncio.Event()
        tick = ticks.next_tick(wakeup)
        if started_tick_only:
            return False  # the loop ends with its timer armed and this event waiting
        await asyncio.wait_for(wakeup.wait(), 5)
        return ticks.passed(tick)

    asyncio.run(wait_for_a_tick(started_tick_only=True))
    assert asyncio.run(wait_for_a_tick(started_tick_only=False))
