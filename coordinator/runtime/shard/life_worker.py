"""A coordinator's load-serve-reload loop as a worker of the node's supervisor (COORDINATOR_LIFE,
coordinator/runtime/worker_specs.py): started when the coordinator loads, waited for when it closes.

The loop handles its own failures (it loads again with reload.backoff, or waits for an operator); anything it
raises is a bug. Then the coordinator is left FAILED with its callers answered, and the supervisor counts the
failure, shows it and does not start the loop again (half-closed files are no place to start from), so the node's
health is NOT_SERVING until the coordinator is reloaded.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, final

from coordinator.base.invariants import check_invariant
from coordinator.base.workers import WorkerSupervisor
from coordinator.runtime.worker_specs import COORDINATOR_LIFE

FirstAttempt = asyncio.Future[BaseException | None]  # resolves once the first load attempt is over: its failure


class LiveCoordinator(Protocol):
    """The coordinator's lifecycle, as its life worker sees it."""

    @property
    def closing(self) -> bool: ...

    async def live(self, first_attempt: FirstAttempt) -> None: ...

    def died(self, error: Exception) -> None: ...

    def stop(self) -> None: ...


@final
class LifeWorker:
    def __init__(self, coordinator: LiveCoordinator, first_attempt: FirstAttempt) -> None:
        self._coordinator = coordinator
        self._first_attempt = first_attempt

    async def run(self) -> None:
        try:
            await self._coordinator.live(self._first_attempt)
        except Exception as error:
            self._coordinator.died(error)
            if not self._first_attempt.done():
                self._first_attempt.set_result(error)
            raise

    def request_stop(self) -> None:
        """The supervisor closing first: as the coordinator's `stop` (nothing after it), then the loop ends."""
        if not self._coordinator.closing:
            self._coordinator.stop()


def start_life(workers: WorkerSupervisor, coordinator_id: int, coordinator: LiveCoordinator) -> FirstAttempt:
    first_attempt: FirstAttempt = asyncio.get_running_loop().create_future()
    started = workers.start(COORDINATOR_LIFE, lambda: LifeWorker(coordinator, first_attempt), coordinator_id)
    check_invariant(started, f"coordinator {coordinator_id}: started twice, or the node's supervisor is not open")
    return first_attempt


async def wait_life_ended(workers: WorkerSupervisor, coordinator_id: int) -> None:
    """After the coordinator's `stop`: returns once its loop ended (a failure of it was reported)."""
    await workers.stop_waiting(COORDINATOR_LIFE.name, coordinator_id)
