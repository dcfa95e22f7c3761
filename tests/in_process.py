"""Nodes in the test's own process: real files, the real gRPC server on a loopback port, a clock the test moves.

Every in-process node runs on one event loop, in one background thread (grpc.aio binds to a
single loop per process); the test talks to it with ordinary synchronous gRPC stubs, so every
call still goes through the real server, edge and router. Each node has a `ManualClock`: its
background loops (WAL-file workers, snapshots, reloads) run a cycle only when the test advances the
clock past their next wake-up, and `advance()` returns once every cycle it started has ended, so a
test proves that something did *not* happen by moving time, not by sleeping.

`InProcessNode` answers to what tests use of `tests.harness.ServerProcess` (start, stop, restart,
stub, port, address, health, settings, output). What needs a process of its own stays there: the
CLI, `serve` and its signals, kill -9 and crash points (which exit the process).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, final

import grpc
import uvloop
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.base.clock import ManualClock
from coordinator.config.loading import load_settings
from coordinator.files.workers import FileWorker
from coordinator.node.assembly import RunningServer, start_server
from coordinator.node.node import Node
from coordinator.node.worker_registry import FILE_WORKER, PRODUCER_EXPIRY, RETENTION, TOPIC_PURGER
from coordinator.topics.purge_worker import TopicPurger
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import QUIET_FILE_WORKERS

T = TypeVar("T")
CALL_TIMEOUT_S = 60
WAIT_S = 30
OUTPUT_FORMAT = "%(levelname)s %(name)s: %(message)s"
LOGGERS = ("coordinator", "snapshot")  # what `diskless serve` would print


@final
class LoopThread:
    """The process's one event loop for in-process nodes, in a daemon thread (uvloop, as `diskless serve`)."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="in-process-nodes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = CALL_TIMEOUT_S) -> T:
        """Runs `coroutine` on the loop and waits for its result here."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout_s)

    def call(self, function: Callable[[], T], timeout_s: float = CALL_TIMEOUT_S) -> T:
        """Calls `function` on the loop's thread (to read state the loop owns) and returns its result."""

        async def on_loop() -> T:
            return function()

        return self.run(on_loop(), timeout_s)


_loop_thread: LoopThread | None = None
_loop_lock = threading.Lock()


def loop_thread() -> LoopThread:
    global _loop_thread
    with _loop_lock:
        if _loop_thread is None:
            _loop_thread = LoopThread()
        return _loop_thread


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Polls `condition` until true; fails naming `what` after `timeout_s` (a bound, never a proof)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting until {what}"
        time.sleep(0.005)


@final
class _OutputHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter(OUTPUT_FORMAT))
        self._lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self._lines.append(self.format(record) + "\n")


@final
class InProcessNode:
    """One node in this process; `restart()` keeps its data directory and its clock."""

    def __init__(
        self,
        data_dir: Path,
        coordinators: int = 4,
        settings: dict[str, str] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        clock: ManualClock | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.coordinators = coordinators
        # No reader processes unless a test asks: they would read the state files of every in-process node.
        self.settings = {**QUIET_FILE_WORKERS, "diskless.server.read.processes": "0", **(settings or {})}
        self.credentials = credentials
        self.clock = clock or ManualClock()
        self.port = 0
        # The process's log lines (every in-process node's) while this node runs, as `ServerProcess.output`.
        self.output: list[str] = []
        self.running: RunningServer | None = None
        self._channel: grpc.Channel | None = None
        self._handler = _OutputHandler(self.output)
        self.stub: pb_grpc.DisklessCoordinatorStub

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def loop(self) -> LoopThread:
        return loop_thread()

    @property
    def node(self) -> Node:
        assert self.running is not None, "the node is not running"
        return self.running.node

    @property
    def file_workers(self) -> list[FileWorker]:
        """The file workers running now (one per coordinator led here), by coordinator id."""
        running = self.node.running_workers(FILE_WORKER.name)
        return [worker for _, worker in sorted(running.items()) if isinstance(worker, FileWorker)]

    def start(self, wait_serving: bool = True) -> InProcessNode:
        """Starts the node (settings read as `diskless serve` reads them); waits until SERVING unless told not to."""
        settings = load_settings(
            None,
            {
                **self.settings,
                "diskless.data.dir": self.data_dir,
                "diskless.listen": f"127.0.0.1:{self.port}",
                "diskless.metadata.topic.num.partitions": self.coordinators,
            },
            environ={},
        )
        for name in LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO)
            logging.getLogger(name).addHandler(self._handler)
        running = self.loop.run(start_server(settings, clock=self.clock))
        self.running = running
        self.port = running.port
        self.output.append(f"diskless: node listening on 127.0.0.1:{self.port} (in process)\n")
        loaded = self.loop.run(running.load())
        self._channel = (
            grpc.secure_channel(self.address, self.credentials)
            if self.credentials is not None
            else grpc.insecure_channel(self.address)
        )
        self.stub = pb_grpc.DisklessCoordinatorStub(self._channel)
        if wait_serving:
            assert loaded, f"not every coordinator loaded:\n{''.join(self.output)}"
            wait_until(lambda: self.health() == health_pb2.HealthCheckResponse.SERVING, "the node is SERVING")
        self.wait_file_workers_asleep()
        return self

    def channel(self) -> grpc.Channel:
        assert self._channel is not None, "the node is not running"
        return self._channel

    def health(self) -> int:
        return health_pb2_grpc.HealthStub(self.channel()).Check(health_pb2.HealthCheckRequest(), timeout=5).status

    def stop(self) -> int:
        """What SIGTERM does to `diskless serve`: drain, close; 0 as its exit code."""
        running, self.running = self.running, None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        try:
            if running is not None:
                self.loop.run(running.stop())
        finally:
            for name in LOGGERS:
                logging.getLogger(name).removeHandler(self._handler)
        return 0

    def restart(self, kill: bool = False) -> InProcessNode:
        if kill:
            raise NotImplementedError("kill -9 needs a process of its own: use tests.harness.ServerProcess")
        self.stop()
        return self.start()

    def is_running(self) -> bool:
        return self.running is not None

    # ------------------------------------------------------------------ time

    def wait_file_workers_asleep(self) -> None:
        """Waits until every file worker waits on the clock (none is in a cycle)."""
        advance_together([self], 0)

    def advance(self, duration_ms: int) -> None:
        """Moves the node's clock forward; returns once every file-worker cycle due meanwhile has run."""
        advance_together([self], duration_ms)

    def run_file_worker_cycles(self, cycles: int = 1) -> None:
        """Moves time on by `cycles` file-worker intervals: each worker runs that many cycles, in step."""
        interval_ms = int(self.settings["diskless.coordinator.file.worker.interval.ms"])
        for _ in range(cycles):
            self.advance(interval_ms)

    def run_purge_passes(self, passes: int = 1) -> None:
        """Moves time on by `passes` topic-purge intervals: a purger woken by a deletion runs that many passes."""
        for _ in range(passes):
            self.advance(self.node.settings.topic_purge_interval_ms)


def advance_together(nodes: Sequence[InProcessNode], duration_ms: int) -> None:
    """Advances the clock the `nodes` share, one wake-up at a time, letting each wake-up's work end before the next.

    Every background loop of a node waits through its clock (file workers, topic purgers, producer expiry, retention,
    snapshots, reloads, ...): after each step the clock's `wait_idle` returns once every loop it woke is asleep again
    or ended, whatever their number. Before the first step, every file, producer-expiry and retention worker must
    have reached its first sleep, every topic purger its wait.
    """
    clocks = {id(node.clock): node.clock for node in nodes}
    assert len(clocks) == 1, "the nodes advanced together share one clock"
    clock = nodes[0].clock
    running = [node for node in nodes if node.is_running()]
    workers = sum(
        len(node.node.running_workers(spec.name))
        for node in running
        for spec in (FILE_WORKER, PRODUCER_EXPIRY, RETENTION)
    )
    purgers = [
        purger
        for node in running
        for purger in node.node.running_workers(TOPIC_PURGER.name).values()
        if isinstance(purger, TopicPurger)
    ]
    target_ms = clock.now_ms() + duration_ms
    wait_until(
        lambda: clock.sleepers() >= workers, f"{workers} file, producer-expiry and retention workers wait on the clock"
    )
    # A topic purger waits on the clock between passes, or to be woken when nothing awaits purge.
    wait_until(lambda: all(purger.parked for purger in purgers), "every topic purger waits")
    clock.wait_idle(WAIT_S)
    while True:
        wake_up_ms = clock.next_wake_up_ms()
        if wake_up_ms is None or wake_up_ms > target_ms:
            clock.advance(target_ms - clock.now_ms())
            return
        clock.advance(max(0, wake_up_ms - clock.now_ms()))
        clock.wait_idle(WAIT_S)


@contextmanager
def clock_running(node: InProcessNode, step_ms: int = 1000) -> Iterator[None]:
    """The node's clock moved on by `step_ms` every few milliseconds of real time, in a thread, while the block runs:
    for a command that waits on the node's background workers (which pass only as the test's clock says)."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            node.advance(step_ms)
            time.sleep(0.005)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join(timeout=WAIT_S)
