"""A commit process: the coordinators one process of a node leads, on a port of its own (DESIGN §2).

Started by the node's first process (coordinator/node/processes/supervisor.py) with multiprocessing's spawn, it is
a node server as `serve` runs one (coordinator/node/assembly.py), except that it leads only the coordinators of its
index, sends catalog calls to the first process, and publishes its coordinators' states on the status board
the first process's readers read. With the first process it speaks over one pipe: ("listening", port) once it
serves calls, ("serving", bool) as its coordinators go in and out of service, ("catalog", coordinator id) when
one applied records the catalog follows (a partition adopted by a move, most of all: the first process, which
answers FindCoordinator, reads its catalog again); it is sent ("stop",) and
("damage", coordinator id, generation, what) when a reader met damage in a state file it writes. The pipe's end
(the first process gone, even by kill -9) stops it, as does SIGTERM; SIGINT is left to the first process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol, final

from coordinator.base.child_processes import wait_told_to_stop
from coordinator.config.settings import Settings
from coordinator.machine.state.reads import StateDamaged
from coordinator.node.node import Node
from coordinator.node.processes.layout import ProcessLayout
from coordinator.reads.readers.board import StatusBoard
from coordinator.reads.readers.supervisor import status_of
from coordinator.runtime.shard import CoordinatorShard, ShardState

log = logging.getLogger(__name__)


class RunningNode(Protocol):
    """The started server, as a commit process drives it (coordinator/node/assembly.py's RunningServer)."""

    node: Node
    host: str
    port: int

    async def load(self) -> bool: ...

    async def stop(self) -> None: ...


@final
@dataclass(frozen=True, slots=True)
class CommitProcessPlan:
    """What a commit process is told when started (pickled to the spawned process)."""

    index: int
    layout: ProcessLayout
    settings: Settings  # its own listen (and metrics) address; no reader processes of its own


@final
class BoardPublisher:
    """Publishes this process's coordinators on the shared status board; a reload is a new generation.

    Generations go on from the board's word, so a restarted process never reuses one a reader has seen.
    """

    def __init__(self, board: StatusBoard, coordinator_ids: Sequence[int]) -> None:
        self._board = board
        self._ids = frozenset(coordinator_ids)

    def publish(self, shard: CoordinatorShard) -> None:
        coordinator_id = shard.coordinator_id
        if coordinator_id not in self._ids:
            return
        generation = self._board.status(coordinator_id).generation
        if shard.state is ShardState.ACTIVE:
            generation += 1
        self._board.publish(coordinator_id, status_of(shard, generation))

    def report_damage(
        self, shards: Sequence[CoordinatorShard], coordinator_id: int, generation: int, what: str
    ) -> None:
        """A reader met damage: the coordinator rebuilds, if the file read is still its current one."""
        if coordinator_id in self._ids and self._board.status(coordinator_id).generation == generation:
            shards[coordinator_id].report_damage(StateDamaged(what))


def run(
    plan: CommitProcessPlan,
    board_words: Any,
    connection: Connection,
    start: Callable[[CommitProcessPlan], Awaitable[RunningNode]],
    after_load: Callable[[], None],
) -> None:
    """The commit process's main: serves until told to stop or the first process is gone.

    `start` builds and starts its server (coordinator/node/assembly.py, which spawns this through its own entry point,
    so that this layer does not import the one above it); `after_load` runs once its coordinators loaded.
    """
    import uvloop

    from coordinator.base.logging_output import configure_logging

    configure_logging(plan.settings.log_format)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the first process stops this one
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(plan, StatusBoard(board_words), connection, start, after_load))


async def _serve(
    plan: CommitProcessPlan,
    board: StatusBoard,
    connection: Connection,
    start: Callable[[CommitProcessPlan], Awaitable[RunningNode]],
    after_load: Callable[[], None],
) -> None:
    publisher = BoardPublisher(board, plan.layout.led_by(plan.index, plan.settings.coordinators))
    try:
        running = await start(plan)
    except OSError as error:  # the server's CannotListen
        log.error("commit process %d: %s", plan.index, error)
        return
    node = running.node
    serving: list[bool] = []
    loaded = False

    def report_serving() -> None:
        if not loaded:
            return  # the first report says how the load went
        now = node.serving()
        if serving != [now]:
            serving[:] = [now]
            _send(connection, ("serving", now))

    def state_changed(shard: CoordinatorShard) -> None:
        publisher.publish(shard)
        report_serving()

    for shard in node.shards:
        publisher.publish(shard)
    node.state_listeners.append(state_changed)
    node.catalog_listeners.append(lambda coordinator_id: _send(connection, ("catalog", coordinator_id)))
    _send(connection, ("listening", running.port))
    log.info("commit process %d: leading coordinators %s on %s:%d", plan.index,
             plan.layout.led_by(plan.index, plan.settings.coordinators), running.host, running.port)  # fmt: skip

    def told(message: Any) -> None:
        if message[0] == "damage":
            publisher.report_damage(node.shards, int(message[1]), int(message[2]), str(message[3]))

    stop = asyncio.create_task(wait_told_to_stop(connection, told))  # also while the coordinators load
    try:
        await running.load()
        after_load()
        loaded = True
        report_serving()  # even if no coordinator changed state since it loaded
        await stop
    finally:
        stop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop
        await running.stop()
    log.info("commit process %d: stopped", plan.index)


def _send(connection: Connection, message: tuple[Any, ...]) -> None:
    with contextlib.suppress(OSError):  # the first process is gone: the pipe's end stops this one
        connection.send(message)
