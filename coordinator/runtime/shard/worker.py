"""What every background worker of one coordinator shares (the file worker, the topic purger, producer expiry, …):
one task started once the node answers calls and cancelled on close, and operations appended through the
coordinator's pipeline within the node's request timeout.

Each worker's loop waits on the node's clock (a test's clock decides when it runs) and acts only where its
coordinator is led here; that loop is the worker's own (`_run`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar, TypeVar

from coordinator.runtime.operation import Operation
from coordinator.runtime.shard.facade import CoordinatorShard

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
