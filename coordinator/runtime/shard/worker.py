"""What every background worker of one coordinator shares (the file worker, the topic purger, producer expiry, …):
a loop (`run`) that the node's WorkerSupervisor runs while the coordinator is led here (coordinator/node/
worker_registry.py), and operations appended through the coordinator's pipeline within the node's request timeout.

Each worker's loop waits on the node's clock (a test's clock decides when it runs) and still checks that its
coordinator is led here before it acts (a pass may race a demotion).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import apsw

from coordinator.base.clock import Clock
from coordinator.base.errors import CallRejected, CoordinatorUnavailable, ErrorCode
from coordinator.machine.state.detached_read import DetachedReadClosed
from coordinator.runtime.operation import Operation
from coordinator.runtime.shard.availability import ShardState
from coordinator.runtime.shard.facade import CoordinatorShard

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT")
AnswerT = TypeVar("AnswerT")
ReadT = TypeVar("ReadT")


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieves a late future's outcome, so an operation given up on leaves no unobserved exception."""
    if not future.cancelled():
        future.exception()


class CoordinatorWorker:
    """One coordinator's background worker; subclasses name it (`task_name`) and write its loop (`run`)."""

    task_name: ClassVar[str]

    def __init__(self, shard: CoordinatorShard, timeout_s: float) -> None:
        self._shard = shard
        self._timeout_s = timeout_s

    @property
    def coordinator_id(self) -> int:
        return self._shard.coordinator_id

    def leads(self) -> bool:
        """Whether the coordinator serves and is led here: the leader's decisions are the workers' to write."""
        return self._shard.state is ShardState.ACTIVE and self._shard.leads

    async def run(self) -> None:
        """The worker's loop, run by the node's WorkerSupervisor while the coordinator is led here."""
        raise NotImplementedError

    async def _read(self, query: Callable[[apsw.Connection], ReadT]) -> ReadT:
        """`query` in a read transaction of the committed state, on a thread and connection of its own: a scan that
        meets a slow disk (a second per read of ~10,000 rows at the end of a 100,000-file consolidation) never holds
        the node's loop, and so never the commits of every coordinator of the node.

        What it returns is a list of candidates, never a decision: the worker acts on them through operations whose
        checks run on the loop against the state then (and records still pending), so a row changed since this
        read is left as the check finds it. Such a read is no staler than one on the loop's reader was: both see
        what was applied when the read began, and the worker's own operations are applied before it reads again.
        The transaction ends with the read: none spans an await (it would hold the WAL's checkpoints back). A
        connection per read: it costs a fraction of a millisecond, on the thread, and leaves nothing open when the
        worker stops or its coordinator closes its files."""
        reads = self._shard.open_detached_read(one_snapshot=False)
        try:
            return await reads.read(query)
        except DetachedReadClosed as error:  # the files closed under the read: a reload or a stop
            raise CoordinatorUnavailable(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {self.coordinator_id}: {error}"
            ) from error
        finally:
            reads.close()

    async def _submit(self, operation: Operation[RequestT, AnswerT], what: str) -> AnswerT:
        """Appends the operation's records through the pipeline; its answer once applied. TimeoutError after the
        node's request timeout (the operation may still be applied later: the next pass sees it)."""
        future = self._shard.submit(operation)
        try:
            done, _ = await asyncio.wait({future}, timeout=self._timeout_s)
        except asyncio.CancelledError:
            # The worker stopped (its coordinator closing, a new leader): the operation's answer, often "closing",
            # comes after, to nobody; retrieved here so that it is not reported as a failure nobody saw.
            future.add_done_callback(_consume)
            raise
        if not done:
            future.add_done_callback(_consume)
            raise TimeoutError(f"coordinator {self.coordinator_id} did not apply {what} in time")
        return future.result()


class PeriodicWorker(CoordinatorWorker):
    """A worker whose pass runs every `interval_ms` of the node's clock, the first one interval after the start (the
    node answers its callers first; a test's clock decides when a pass runs). A failure a retry may mend (the
    coordinator out of service, a full queue, a slow pipeline) waits for the next interval; anything else ends the
    loop and is the supervisor's (logged, counted, started again after a backoff). Subclasses name what they do
    (`what`) and write the pass (`run_pass`)."""

    what: ClassVar[str]

    def __init__(self, shard: CoordinatorShard, timeout_s: float, clock: Clock, interval_ms: int) -> None:
        super().__init__(shard, timeout_s)
        self._clock = clock
        self._interval_ms = interval_ms

    async def run_pass(self) -> object:
        raise NotImplementedError

    async def run(self) -> None:
        while True:
            await self._clock.sleep_ms(self._interval_ms)
            try:
                await self.run_pass()
            except (CoordinatorUnavailable, CallRejected, TimeoutError) as error:
                log.warning("coordinator %d: %s waits: %s", self.coordinator_id, self.what, error)
