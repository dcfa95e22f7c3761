"""What a node's child processes (readers, commit processes) and their supervisors share: restarts, stopping.

A child speaks with its parent over one pipe; the parent sends ("stop",), and the pipe's end (the parent gone,
even by kill -9) stops the child, as does SIGTERM. A child that dies is started again after a bounded backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, Protocol, TypeVar

from coordinator.base.backoff import Backoff
from coordinator.base.workers import WorkerSpec, WorkerSupervisor
from coordinator.config.settings import Settings

log = logging.getLogger(__name__)
STOP_GRACE_S = 5.0  # past the drain timeout, a child that has not exited is killed
GC_YOUNG_THRESHOLD = 20_000  # allocations between young collections (CPython's default is 700)


def freeze_loaded_state() -> None:
    """A node process's loaded state (modules, settings, open state) is long-lived: kept out of the collector's
    scans, and young collections made rarer, because the commit path and a reader's FindBatches allocate many
    short-lived tuples (a few percent of their time went to the GC). Called by a process's entry point only: a
    node started inside a test's process leaves the test's interpreter as it is."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


async def keep_running(
    run_once: Callable[[], Awaitable[str]],
    stopping: asyncio.Event,
    settings: Settings,
    name: str,
    restarted: Callable[[], None],
) -> None:
    """Runs a child again and again (`run_once` says why it ended) until `stopping`, with a bounded backoff."""
    backoff = Backoff(settings.read_process_restart_backoff_ms, settings.read_process_restart_backoff_max_ms)
    while not stopping.is_set():
        started = time.monotonic()
        why = await run_once()
        if stopping.is_set():
            return
        if (time.monotonic() - started) * 1000 >= settings.read_process_restart_backoff_max_ms:
            backoff.succeeded()
        wait_ms = backoff.failed()
        restarted()
        log.error("%s %s; starting it again in %d ms", name, why, wait_ms)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), wait_ms / 1000)


def start_child(
    context: Any, target: Callable[..., None], args: tuple[Any, ...], name: str, daemon: bool
) -> tuple[BaseProcess, Connection]:
    """Starts a child with `args` and its end of a new pipe last; the child and the parent's end of the pipe."""
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(*args, theirs), name=name, daemon=daemon)
    process.start()
    theirs.close()  # the pipe ends when the child's process does
    return process, ours


async def run_started_child(
    process: BaseProcess,
    connection: Connection,
    stopping: asyncio.Event,
    start_timeout_ms: int,
    on_listening: Callable[[int], None],
    on_message: Callable[[Any], None],
) -> str:
    """Watches a started child until it ends; why it ended. Its first ("listening", port) goes to `on_listening`,
    later messages to `on_message`; a child still alive when this returns is killed, unless it is being stopped."""
    loop = asyncio.get_running_loop()
    listening: asyncio.Future[int] = loop.create_future()
    ended = asyncio.Event()

    def readable() -> None:
        try:
            message: Any = connection.recv()
        except (EOFError, OSError):
            loop.remove_reader(connection.fileno())  # the end stays readable: once is enough
            if not listening.done():
                listening.set_exception(EOFError())
                listening.exception()  # retrieved: the waiter may have timed out already
            ended.set()
            return
        if message[0] == "listening" and not listening.done():
            listening.set_result(int(message[1]))
        else:
            on_message(message)

    loop.add_reader(connection.fileno(), readable)
    try:
        try:
            port = await asyncio.wait_for(asyncio.shield(listening), start_timeout_ms / 1000)
        except TimeoutError:
            return f"did not listen within {start_timeout_ms} ms"
        except EOFError:
            return f"exited before listening (exit code {await exit_code(process)})"
        on_listening(port)
        await ended.wait()
        if stopping.is_set():
            return "stopped"
        return f"exited (exit code {await exit_code(process)})"
    finally:
        loop.remove_reader(connection.fileno())
        if process.is_alive() and not stopping.is_set():
            process.kill()


async def exit_code(process: BaseProcess) -> int | None:
    """The child's exit code, once it exited (waited for off the loop, at most the grace period)."""
    await asyncio.get_running_loop().run_in_executor(None, process.join, STOP_GRACE_S)
    return process.exitcode


async def stop_children(
    connections: Iterable[Connection | None], processes: Sequence[BaseProcess], settings: Settings, kind: str
) -> None:
    """Tells every child to stop (each drains its calls), waits for them, kills what is left."""
    for connection in connections:
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.send(("stop",))
    loop = asyncio.get_running_loop()
    grace_s = settings.drain_timeout_ms / 1000 + STOP_GRACE_S
    await asyncio.gather(*(loop.run_in_executor(None, p.join, grace_s) for p in processes))
    for process in processes:
        if process.is_alive():
            log.error("%s %s did not stop within %.0f s: killing it", kind, process.name, grace_s)
            process.kill()
            process.join(STOP_GRACE_S)


class ChildSlot(Protocol):
    """One child process of a kind: its process while it runs, how often it was started again."""

    index: int
    process: BaseProcess | None
    connection: Connection | None
    restarts: int
    first_start_over: asyncio.Event  # started (or failed to): what waits for the first starts goes on


SlotT = TypeVar("SlotT", bound=ChildSlot)


class ChildSupervisor(Generic[SlotT]):
    """Keeps a node's children of one kind running (readers, commit processes), one slot each, as one worker of the
    node's supervisor; each slot starts its child again with backoff until stopped. A kind says how to run its
    child once (`_run_once`, why it ended)."""

    def __init__(self, settings: Settings, slots: list[SlotT], kind: str, kinds: str) -> None:
        self._settings = settings
        self.slots = slots
        self._kind = kind  # one child, in logs and task names ("reader")
        self._kinds = kinds  # the children ("reader processes")
        self._context = multiprocessing.get_context("spawn")
        self._stopping = asyncio.Event()
        self._supervised: tuple[WorkerSupervisor, WorkerSpec] | None = None

    def start(self, workers: WorkerSupervisor, spec: WorkerSpec) -> None:
        """Starts the children, kept running by the worker `spec` of the node's supervisor."""
        log.info("starting %d %s", len(self.slots), self._kinds)
        self._supervised = (workers, spec)
        workers.start(spec, lambda: self)

    async def run(self) -> None:
        """Keeps every child running (each slot restarts its own with backoff) until stopped."""
        async with asyncio.TaskGroup() as group:
            for slot in self.slots:
                group.create_task(self._keep_running(slot), name=f"{self._kind.replace(' ', '-')}-{slot.index}")

    def request_stop(self) -> None:
        self._stopping.set()

    async def wait_first_starts(self) -> None:
        """Returns once every child started or failed to (each within the start timeout)."""
        await asyncio.gather(*(slot.first_start_over.wait() for slot in self.slots))

    async def _keep_running(self, slot: SlotT) -> None:
        def restarted() -> None:
            slot.restarts += 1

        await keep_running(
            lambda: self._run_once(slot), self._stopping, self._settings, f"{self._kind} {slot.index}", restarted
        )

    async def _run_once(self, slot: SlotT) -> str:
        raise NotImplementedError

    async def stop(self) -> None:
        """Tells every child to stop (each drains its calls), waits for them, kills what is left."""
        self._stopping.set()
        processes = [slot.process for slot in self.slots if slot.process is not None]
        await stop_children((slot.connection for slot in self.slots), processes, self._settings, self._kind)
        if self._supervised is not None:
            workers, spec = self._supervised
            await workers.stop_waiting(spec.name)
        log.info("%s stopped", self._kinds)


async def wait_told_to_stop(connection: Connection, on_message: Callable[[Any], None] = lambda message: None) -> None:
    """In a child: returns when the parent says stop, its end of the pipe closes, or SIGTERM comes (a service
    manager stopping the group: drain, as told); other messages go to `on_message`."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def readable() -> None:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            stop.set()
            return
        if message == ("stop",):
            stop.set()
        else:
            on_message(message)

    loop.add_reader(connection.fileno(), readable)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        loop.remove_reader(connection.fileno())
        loop.remove_signal_handler(signal.SIGTERM)
