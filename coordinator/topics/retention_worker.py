"""One coordinator's retention worker (DESIGN §4a): its leader removes expired batches, a bounded step at a time.

Every `diskless.coordinator.retention.check.interval.ms` of the node's clock (Kafka's
log.retention.check.interval.ms), while its coordinator is ACTIVE and led here, it makes a pass over the committed
partitions in key order. Each step reads partitions and their oldest batches from the committed state, chooses at
most `diskless.coordinator.retention.batch.max` expired batches (coordinator.topics.retention) and submits them as
one operation whose pure check decides again on the speculative view and writes one RetentionApplied record;
followers and replays apply the same record. Commits run between steps, so a backlog (a retention.ms lowered on a
large topic) drains within one pass without stalling them. Files left without live batches go on to hand-over and
deletion (DESIGN §5) as after DeleteRecords. Nothing is kept between passes: a new leader starts with its next one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import apsw

from coordinator.base.clock import Clock
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.machine.state import reads
from coordinator.runtime.shard import CoordinatorShard, Operation
from coordinator.runtime.shard.worker import PeriodicWorker
from coordinator.topics.retention import RetentionStep, StoredBatch, check_retention, select_retention
from coordinator.topics.topic_configs import ConfigDefaults

log = logging.getLogger(__name__)


def _stored_batches(db: apsw.Connection, partition_key: int, offset: int, limit: int) -> Iterator[StoredBatch]:
    # One more than the budget can take, read lazily: the walk stops at the first batch kept, and a topic without
    # limits reads none. A list here read up to the budget's rows of every partition in each step, on the node's
    # loop: with 1,000 partitions of 6,250 batches (bench consolidate at 100,000 files) the loop stood still
    # 0.8 to 1.5 s per pass of each coordinator. The generator is consumed inside `_choose`'s read transaction.
    return (StoredBatch(*row) for row in reads.retention_batches(db, partition_key, offset, limit + 1))


@dataclass(slots=True)
class RetentionPass:
    """What one pass did, for tests and logs."""

    steps: int = 0
    partitions: int = 0  # partitions whose log start moved (once per step that moved it)
    batches: int = 0
    bytes: int = 0


class RetentionWorker(PeriodicWorker):
    task_name = "retention"
    what = "retention"

    def __init__(self, shard: CoordinatorShard, settings: Settings, clock: Clock, metrics: Metrics) -> None:
        super().__init__(shard, settings.request_timeout_ms / 1000, clock, settings.retention_check_interval_ms)
        self._defaults = ConfigDefaults.from_settings(settings)
        self._batch_max = settings.retention_batch_max
        coordinator = str(shard.coordinator_id)
        self._expired_batches = metrics.retention_expired_batches.labels(coordinator)
        self._expired_bytes = metrics.retention_expired_bytes.labels(coordinator)
        # When the last pass here ended, on the node's clock (the worker's making before the first): a gauge's age.
        self.last_pass_ms = clock.now_ms()

    def last_pass_age_ms(self) -> int:
        return max(0, self._clock.now_ms() - self.last_pass_ms)

    async def run_pass(self) -> RetentionPass:
        """One pass over every partition of the coordinator, in bounded steps; none where it does not lead."""
        done = RetentionPass()
        next_key: int | None = 0
        while next_key is not None and self.leads():  # retention is the leader's decision (DESIGN §4a)
            step = self._choose(next_key)
            done.steps += 1
            next_key = step.resume_key
            if step.moves:
                outcome = await self._submit(Operation(check_retention, step), "a retention step")
                done.partitions += len(outcome.applied_keys)
                done.batches += outcome.batches
                done.bytes += outcome.bytes
                if outcome.batches:
                    self._expired_batches.inc(outcome.batches)
                    self._expired_bytes.inc(outcome.bytes)
                if step.cut_key is not None and step.cut_key not in outcome.applied_keys:
                    next_key = step.cut_key + 1  # refused on the view: never the same step twice in a pass
            if next_key is not None:
                await self._clock.sleep_ms(0)  # commits queued meanwhile run before the next step
        if self.leads():
            self.last_pass_ms = self._clock.now_ms()
        if done.batches:
            log.info(
                "coordinator %d: retention removed %d batches (%d bytes) of %d partitions in %d steps",
                self.coordinator_id, done.batches, done.bytes, done.partitions, done.steps,
            )  # fmt: skip
        return done

    def _choose(self, first_key: int) -> RetentionStep:
        with self._shard.read_transaction() as db:
            # Each partition costs at least one of the budget: a step reaches at most that many.
            partitions = reads.partitions_from(db, first_key, self._batch_max + 1)
            return select_retention(
                partitions,
                reads.topic_configs(db),
                self._defaults,
                partial(_stored_batches, db),
                partial(reads.partition_bytes, db),
                self._clock.now_ms(),
                self._batch_max,
            )
