"""One coordinator's purge of deleted topics' batches, in bounded passes on the node's clock (DESIGN §4a).

DeleteTopics answers once its TopicDeleted record is applied: the topic is gone for every caller, and
its partitions that still hold batches wait in the state. This worker, on the coordinator's leader
only, then runs passes: each reads what awaits purge from the committed state, chooses at most
`diskless.coordinator.topic.purge.batch.max` batches (coordinator.topics.purge) and appends one
BatchesPurged record through the pipeline like any operation, so followers and a replay remove the
same batches; files left without live batches go on to hand-over and deletion (DESIGN §5). Between
two passes it waits `diskless.coordinator.topic.purge.interval.ms`, so the coordinator's loop is held
by one pass at a time: one bounded read, one bounded check and one bounded apply.

With nothing to purge it waits to be woken: by a topic deletion applied here, or by its coordinator
coming into service (a load, a new leadership), whose state may hold a purge a previous leader or
run left half done. Every pass is on the clock: a test's clock decides when it runs.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import final

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.base.errors import CallRejected, CoordinatorUnavailable
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.machine.state import reads
from coordinator.runtime.shard import CoordinatorShard, Operation, ShardState
from coordinator.runtime.shard.worker import CoordinatorWorker
from coordinator.topics.purge import check_purge, finishes, select_purge

log = logging.getLogger(__name__)


@final
@dataclass(frozen=True, slots=True)
class PurgePass:
    purged_batches: int
    more: bool  # something may be left: the next pass comes after the interval


_NOTHING_LEFT = PurgePass(0, more=False)


@final
class TopicPurger(CoordinatorWorker):
    task_name = "topic-purger"

    def __init__(self, shard: CoordinatorShard, settings: Settings, clock: Clock, metrics: Metrics) -> None:
        super().__init__(shard, settings.request_timeout_ms / 1000)
        self._clock = clock
        self._batch_max = settings.topic_purge_batch_max
        self._interval_ms = settings.topic_purge_interval_ms
        self._purged = metrics.purged_batches.labels(str(shard.coordinator_id))
        self._backoff = Backoff(self._interval_ms, max(self._interval_ms, settings.file_retry_backoff_max_ms))
        self._wake = asyncio.Event()
        self._wake.set()  # a first look once started: a purge may be left from before
        # Waiting (to be woken, or on the clock) rather than in a pass: tests advance a clock only then.
        self.parked = False

    def wake(self) -> None:
        """Something may await purge now (a topic deleted, the coordinator back in service): look after the interval."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            self.parked = True
            await self._clock.wait_event(self._wake, None)
            self._wake.clear()
            wait_ms = self._interval_ms
            while True:
                # Even the first pass waits one interval: on the clock, and the deletion's caller answered first.
                self.parked = True
                await self._clock.sleep_ms(wait_ms)
                self.parked = False
                outcome = await self._pass_or_failure()
                if outcome is None:
                    wait_ms = self._backoff.failed()
                    continue
                self._backoff.succeeded()
                wait_ms = self._interval_ms
                if not outcome.more:
                    break

    async def _pass_or_failure(self) -> PurgePass | None:
        """A pass; on a failure that a retry may mend, None (after saying why)."""
        try:
            return await self.run_pass()
        except CoordinatorUnavailable as error:
            # Out of service or no longer the leader: a worker started anew when it leads again looks at once.
            log.info("coordinator %d: topic purge waits: %s", self.coordinator_id, error)
            return _NOTHING_LEFT
        except (CallRejected, TimeoutError) as error:  # a full queue, a slow pipeline
            log.warning("coordinator %d: topic purge pass failed: %s; retrying", self.coordinator_id, error)
        # A bug ends the loop: the supervisor logs and counts it and starts a new purger (which looks at once).
        return None

    async def run_pass(self) -> PurgePass:
        """One pass: what it removed, and whether anything may be left."""
        if self._shard.state is not ShardState.ACTIVE or not self._shard.leads:
            return _NOTHING_LEFT  # the coordinator's leader purges (DESIGN §6a); a follower applies its records
        with self._shard.read_transaction() as db:
            # One more than a pass can reach: whether the pass finishes the purge is then known.
            awaiting = reads.partitions_awaiting_purge(db, self._batch_max + 1)
            if not awaiting:
                return _NOTHING_LEFT
            plan = select_purge(awaiting, lambda key, count: reads.first_last_offsets(db, key, count), self._batch_max)
        purged = await self._submit(Operation(check_purge, plan), "a purge pass")
        self._purged.inc(purged)
        return PurgePass(purged, more=not finishes(plan, awaiting))
