"""The one owner of a node's background work: every worker runs under one TaskGroup, is started, stopped and woken
here, and a worker that raises is logged once (with its traceback), counted, shown and started again after a
bounded backoff; one that keeps failing makes the node's health say so.

What runs is declared once, in the registry (`coordinator/node/worker_registry.py`): a `WorkerSpec` names each
worker, its scope and the setting that paces it. Kafka's `KafkaScheduler` and Trio's nurseries are the models: no
task without an owner that sees it fail.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, final, runtime_checkable

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.config.settings import Settings

log = logging.getLogger(__name__)

NODE_WIDE = -1  # the coordinator id of a node's own workers (in statuses and describe)


class Scope(enum.Enum):
    NODE = "node"  # one per node
    COORDINATOR = "coordinator"  # one per coordinator replica here, leader or follower
    LEADER_ONLY = "leader-only"  # one per coordinator this node leads: started on promotion, stopped on demotion


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One kind of background work, declared once.

    A supervised worker runs under the `WorkerSupervisor` (restarted, counted, in health and describe); the others
    still have their task made at their own seam (`started_in`) by the part that owns their state (a coordinator's
    lifecycle, the cluster controller, the process supervisors), declared here so that none goes unlisted.
    """

    name: str  # the metrics label and what describe shows
    scope: Scope
    purpose: str
    loop_in: str  # where its loop is written: "module:Qualname"
    interval_setting: str | None = None  # the Settings field that paces it; None: woken by events only
    started_in: str | None = None  # None: the supervisor starts it; else the "module:Qualname" that makes its task
    # False where starting it again is not safe (the coordinator's life loop: its failure leaves the coordinator
    # FAILED, and what brings it back is a reload): a failure is counted and the worker stays FAILED, which
    # `failing` reports at once (health NOT_SERVING) until its owner stops it.
    restart: bool = True

    @property
    def supervised(self) -> bool:
        return self.started_in is None


@runtime_checkable
class Worker(Protocol):
    """A worker's loop: `run` returns when its work is over for good and raises when it failed."""

    async def run(self) -> None: ...


@runtime_checkable
class Wakeable(Protocol):
    def wake(self) -> None: ...


@runtime_checkable
class Stoppable(Protocol):
    """A worker that must end at a point of its choosing, never be cancelled mid-step (a snapshot copy or a scrub
    step on a thread, whose files the coordinator closes next): asked to stop, its `run` returns soon."""

    def request_stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SupervisionBounds:
    restart_backoff_ms: int
    restart_backoff_max_ms: int
    failures_window_ms: int
    failures_max: int

    @staticmethod
    def of(settings: Settings) -> SupervisionBounds:
        return SupervisionBounds(
            settings.worker_restart_backoff_ms, settings.worker_restart_backoff_max_ms,
            settings.worker_failures_window_ms, settings.worker_failures_max,
        )  # fmt: skip


class WorkerState(enum.Enum):
    RUNNING = "RUNNING"
    BACKING_OFF = "BACKING_OFF"  # it raised; waits before it is started again
    FAILED = "FAILED"  # it raised and is not started again (its spec says a restart is not safe)


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One running worker, for describe, metrics and health."""

    name: str
    scope: Scope
    coordinator_id: int  # NODE_WIDE for the node's own
    state: WorkerState
    failures: int  # since it was first started here
    recent_failures: int  # within the failures window
    failing: bool  # recent_failures reached the bound: the node's health is NOT_SERVING
    last_failure: str  # "" before any


@dataclass(slots=True)
class _Running:
    spec: WorkerSpec
    coordinator_id: int
    worker: Worker
    task: asyncio.Task[None] | None = None
    state: WorkerState = WorkerState.RUNNING
    failures: int = 0
    failed_at_ms: deque[int] = field(default_factory=deque)
    last_failure: str = ""
    stopping: bool = False  # asked to stop: it ends at its next step and is not started again


Key = tuple[str, int]
Factory = Callable[[], Worker]
FailureCounter = Callable[[str, int], None]  # (worker name, coordinator id)


@final
class WorkerSupervisor:
    """Runs workers under one TaskGroup (`open` .. `close`); `start`/`stop` per worker, `wake` by name."""

    def __init__(
        self,
        clock: Clock,
        bounds: SupervisionBounds,
        count_failure: FailureCounter,
        health_changed: Callable[[], None],
    ) -> None:
        self._clock = clock
        self._bounds = bounds
        self._backoff = Backoff(bounds.restart_backoff_ms, bounds.restart_backoff_max_ms)
        self._count_failure = count_failure
        self._health_changed = health_changed
        self._running: dict[Key, _Running] = {}
        self._group: asyncio.TaskGroup | None = None
        self._host: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._failures_changed = asyncio.Event()  # the host looks at which workers are failing again
        self._failing: frozenset[Key] = frozenset()

    async def open(self) -> None:
        """Starts the TaskGroup every worker runs in (once)."""
        if self._host is not None:
            return
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._host = asyncio.create_task(self._hold(opened), name="worker-supervisor")
        await opened

    async def _hold(self, opened: asyncio.Future[None]) -> None:
        async with asyncio.TaskGroup() as group:
            self._group = group
            opened.set_result(None)
            while not self._closing.is_set():
                self._failures_changed.clear()
                self._note_failing()
                await self._clock.wait_event(self._failures_changed, self._next_expiry_ms())
            self._group = None
            for running in self._running.values():
                self._end(running)
        # Leaving the group waited for every worker to end.

    async def close(self) -> None:
        """Stops every worker and waits for each to end."""
        self._closing.set()
        self._failures_changed.set()
        if self._host is not None:
            await self._host
        self._running.clear()

    def start(self, spec: WorkerSpec, factory: Factory, coordinator_id: int = NODE_WIDE) -> bool:
        """Starts the worker unless it runs (a no-op before `open` and after `close`); whether it started."""
        key = (spec.name, coordinator_id)
        if self._group is None or key in self._running:
            return False
        running = _Running(spec, coordinator_id, factory())
        self._running[key] = running
        running.task = self._group.create_task(
            self._supervise(running, factory),
            name=spec.name if coordinator_id == NODE_WIDE else f"{spec.name}-{coordinator_id}",
        )
        return True

    def stop(self, name: str, coordinator_id: int = NODE_WIDE) -> None:
        """Ends the worker (the TaskGroup waits for it at `close`); its failures are forgotten."""
        running = self._running.pop((name, coordinator_id), None)
        if running is not None:
            self._end(running)
            if (name, coordinator_id) in self._failing:
                self._failures_changed.set()

    @staticmethod
    def _end(running: _Running) -> None:
        """A `Stoppable` worker that runs is asked to stop; any other, or one backing off, is cancelled."""
        running.stopping = True
        if running.task is None:
            return
        if running.state is WorkerState.RUNNING and isinstance(running.worker, Stoppable):
            running.worker.request_stop()
        else:
            running.task.cancel()

    async def stop_waiting(self, name: str, coordinator_id: int = NODE_WIDE) -> None:
        """Stops the worker and returns once it ended (where what it did last must not race what comes next)."""
        running = self._running.get((name, coordinator_id))
        self.stop(name, coordinator_id)
        if running is not None and running.task is not None:
            await asyncio.wait({running.task})

    def wake(self, name: str, coordinator_id: int = NODE_WIDE) -> None:
        running = self._running.get((name, coordinator_id))
        if running is not None and isinstance(running.worker, Wakeable):
            running.worker.wake()

    def runs(self, name: str, coordinator_id: int = NODE_WIDE) -> bool:
        return (name, coordinator_id) in self._running

    def workers(self, name: str) -> dict[int, Worker]:
        """The running workers of one kind, by coordinator id (the worker instance of now: a restart makes anew)."""
        return {key[1]: running.worker for key, running in self._running.items() if key[0] == name}

    def statuses(self) -> list[WorkerStatus]:
        now_ms = self._clock.monotonic_ms()
        return [self._status(running, now_ms) for running in self._ordered()]

    def failing(self) -> list[WorkerStatus]:
        """The workers whose recent failures reached the bound (the node's health is NOT_SERVING while any is)."""
        return [status for status in self.statuses() if status.failing]

    def _ordered(self) -> Iterator[_Running]:
        for key in sorted(self._running, key=lambda key: (key[1], key[0])):
            yield self._running[key]

    def _status(self, running: _Running, now_ms: int) -> WorkerStatus:
        recent = self._recent(running, now_ms)
        failing = recent >= self._bounds.failures_max or running.state is WorkerState.FAILED
        return WorkerStatus(
            running.spec.name, running.spec.scope, running.coordinator_id, running.state, running.failures, recent,
            failing, running.last_failure,
        )  # fmt: skip

    def _recent(self, running: _Running, now_ms: int) -> int:
        window_start = now_ms - self._bounds.failures_window_ms
        while running.failed_at_ms and running.failed_at_ms[0] <= window_start:
            running.failed_at_ms.popleft()
        return len(running.failed_at_ms)

    async def _supervise(self, running: _Running, factory: Factory) -> None:
        """Runs the worker; after a failure, starts a new one after the backoff its recent failures call for."""
        while True:
            try:
                await running.worker.run()
                key = (running.spec.name, running.coordinator_id)
                if self._running.get(key) is running:
                    del self._running[key]  # its work is over: nothing to start again, nothing to show
                return
            except Exception as error:
                wait_ms = self._failed(running, error)
            if running.stopping:
                return  # it failed on its way out: counted, not started again
            if not running.spec.restart:
                running.state = WorkerState.FAILED
                self._failures_changed.set()
                return
            running.state = WorkerState.BACKING_OFF
            await self._clock.sleep_ms(wait_ms)
            running.worker = factory()
            running.state = WorkerState.RUNNING

    def _failed(self, running: _Running, error: Exception) -> int:
        name, coordinator_id = running.spec.name, running.coordinator_id
        now_ms = self._clock.monotonic_ms()
        running.failures += 1
        running.failed_at_ms.append(now_ms)
        running.last_failure = f"{type(error).__name__}: {error}"
        recent = self._recent(running, now_ms)
        wait_ms = self._backoff.wait_ms(recent)
        where = "" if coordinator_id == NODE_WIDE else f" of coordinator {coordinator_id}"
        then = f"starting it again in {wait_ms} ms" if running.spec.restart else "not started again: NOT_SERVING"
        log.error(
            "worker %s%s failed (%d in the last %d ms); %s",
            name, where, recent, self._bounds.failures_window_ms, then, exc_info=error,
        )  # fmt: skip
        self._count_failure(name, coordinator_id)
        self._failures_changed.set()
        return wait_ms

    def _note_failing(self) -> None:
        """Tells health when the set of failing workers changed (a failure, a window passing, a worker stopped)."""
        failing = frozenset((status.name, status.coordinator_id) for status in self.failing())
        if failing != self._failing:
            for name, coordinator_id in failing - self._failing:
                log.error("worker %s (coordinator %d) keeps failing: health NOT_SERVING", name, coordinator_id)
            self._failing = failing
            self._health_changed()

    def _next_expiry_ms(self) -> int | None:
        """When the oldest failure that keeps a worker failing leaves the window; None when none is failing."""
        now_ms = self._clock.monotonic_ms()
        expiries = [
            running.failed_at_ms[0] + self._bounds.failures_window_ms - now_ms + 1
            for key, running in self._running.items()
            if key in self._failing and running.failed_at_ms
        ]
        return max(1, min(expiries)) if expiries else None


@final
class LoopWorker:
    """A worker made of one coroutine function (a loop that holds no state of its own between restarts)."""

    def __init__(self, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._loop = loop

    async def run(self) -> None:
        await self._loop()
