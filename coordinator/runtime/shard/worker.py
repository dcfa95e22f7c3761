"""What every background worker of one coordinator shares (the file worker, the topic purger, producer expiry, …):
one task started once the node answers calls and cancelled on close, and operations appended through the
coordinator's pipeline within the node's request timeout.

Each worker's loop waits on the node's clock (a test's clock decides when it runs) and acts only where its
coordinator is led here; that loop is the worker's own (`_run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, ClassVar, TypeVar

from coordinator.base.clock import Clock
from coordinator.base.errors import CallRejected, CoordinatorUnavailable
from coordinator.runtime.operation import Operation
from coordinator.runtime.shard.availability import ShardState
from coordinator.runtime.shard.facade import CoordinatorShard

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT")
AnswerT = TypeVar("AnswerT")


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieves a late future's outcome, so an operation given up on leaves no unobserved exception."""
    if not future.cancelled():
        future.exception()


class CoordinatorWorker:
    """One coordinator's background task; subclasses name it (`task_name`) and write its loop (`_run`)."""

    task_name: ClassVar[str]

    def __init__(self, shard: CoordinatorShard, timeout_s: float) -> None:
        self._shard = shard
        self._timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None

    @property
    def coordinator_id(self) -> int:
        return self._shard.coordinator_id

    def leads(self) -> bool:
        """Whether the coordinator serves and is led here: the leader's decisions are the workers' to write."""
        return self._shard.state is ShardState.ACTIVE and self._shard.leads

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self.task_name}-{self.coordinator_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        raise NotImplementedError

    async def _submit(self, operation: Operation[RequestT, AnswerT], what: str) -> AnswerT:
        """Appends the operation's records through the pipeline; its answer once applied. TimeoutError after the
        node's request timeout (the operation may still be applied later: the next pass sees it)."""
        future = self._shard.submit(operation)
        done, _ = await asyncio.wait({future}, timeout=self._timeout_s)
        if not done:
            future.add_done_callback(_consume)
            raise TimeoutError(f"coordinator {self.coordinator_id} did not apply {what} in time")
        return future.result()


class PeriodicWorker(CoordinatorWorker):
    """A worker whose pass runs every `interval_ms` of the node's clock, the first one interval after the start (the
    node answers its callers first; a test's clock decides when a pass runs). A failure a retry may mend (the
    coordinator out of service, a full queue, a slow pipeline) waits for the next interval; a bug is logged and
    never ends the loop. Subclasses name what they do (`what`) and write the pass (`run_pass`)."""

    what: ClassVar[str]

    def __init__(self, shard: CoordinatorShard, timeout_s: float, clock: Clock, interval_ms: int) -> None:
        super().__init__(shard, timeout_s)
        self._clock = clock
        self._interval_ms = interval_ms

    async def run_pass(self) -> object:
        raise NotImplementedError

    async def _run(self) -> None:
        while True:
            await self._clock.sleep_ms(self._interval_ms)
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except (CoordinatorUnavailable, CallRejected, TimeoutError) as error:
                log.warning("coordinator %d: %s waits: %s", self.coordinator_id, self.what, error)
            except Exception:
                log.exception("coordinator %d: %s pass failed", self.coordinator_id, self.what)
