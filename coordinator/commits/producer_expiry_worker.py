"""One coordinator's producer-expiry worker (DESIGN §4a): its leader forgets idle producers, a bounded step at a time.

Every `diskless.coordinator.producer.id.expiration.check.interval.ms` of the node's clock, while its coordinator
is ACTIVE and led here, it makes a pass over the committed producers in key order
(`coordinator.machine.state.reads.producers_after`), `diskless.coordinator.producer.id.expiration.batch.max` at a
time. Each step's producers whose last batch looks expired are submitted as one operation whose pure check
(`coordinator.commits.producer_expiry`) decides again against the speculative view and writes one ProducersExpired
record; followers and replays apply the same record. A step holds the coordinator's loop for one bounded read and
one bounded check, and commits run between steps, so a backlog (a million producers gone at once) drains within
one pass without stalling them. Nothing is kept between passes: a new leader simply starts with its next pass,
and a pass stops at the first step after leadership is lost (its operation, if under way, is refused).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from coordinator.base.clock import Clock
from coordinator.base.metrics import Metrics
from coordinator.commits.producer_expiry import ExpiryRequest, check_expire_producers
from coordinator.config.settings import Settings
from coordinator.machine.producers import producer_expired
from coordinator.machine.state import reads
from coordinator.runtime.shard import CoordinatorShard, Operation
from coordinator.runtime.shard.worker import PeriodicWorker

log = logging.getLogger(__name__)

_BEFORE_EVERY_KEY = (-1, -1)  # partition keys and producer ids are >= 0


@dataclass(slots=True)
class ExpiryPass:
    """What one pass did, for tests and logs."""

    steps: int = 0
    examined: int = 0  # producers read from the committed state
    expired: int = 0  # producers whose state the pass's records removed


class ProducerExpiryWorker(PeriodicWorker):
    task_name = "producer-expiry"
    what = "producer expiry"

    def __init__(self, shard: CoordinatorShard, settings: Settings, clock: Clock, metrics: Metrics) -> None:
        super().__init__(
            shard, settings.request_timeout_ms / 1000, clock, settings.producer_id_expiration_check_interval_ms
        )
        self._metrics = metrics
        self._expiration_ms = settings.producer_id_expiration_ms
        self._step_max = settings.producer_id_expiration_batch_max

    async def run_pass(self) -> ExpiryPass:
        """One pass over every producer of the coordinator, in bounded steps; none where it does not lead."""
        done = ExpiryPass()
        after = _BEFORE_EVERY_KEY
        while self.leads():  # expiry is the leader's decision (DESIGN §4a); it stops when leadership goes
            with self._shard.read_transaction() as db:
                rows = reads.producers_after(db, after, self._step_max)
            done.steps += 1
            done.examined += len(rows)
            # A first sieve on the committed state; the check decides again on the view, with its own now.
            expired_before_ms = self._clock.now_ms() - self._expiration_ms
            candidates = tuple(
                (key, producer) for key, producer, last in rows if producer_expired(last, expired_before_ms)
            )
            if candidates:
                expired = await self._submit(
                    Operation(check_expire_producers, ExpiryRequest(candidates, self._expiration_ms)),
                    "the producer expiry",
                )
                done.expired += expired
                if expired:
                    self._metrics.producers_expired.labels(str(self.coordinator_id)).inc(expired)
            if len(rows) < self._step_max:
                break
            after = (rows[-1][0], rows[-1][1])
            await self._clock.sleep_ms(0)  # commits queued meanwhile run before the next step
        if done.expired:
            log.info(
                "coordinator %d: forgot %d idle producers of %d (last batch older than %d ms)",
                self.coordinator_id, done.expired, done.examined, self._expiration_ms,
            )  # fmt: skip
        return done
