"""The node's first process's side of its commit processes: starting, restarting and stopping them.

Each commit process is started at once with the node and listens on its layout's port. One that dies is
started again after a bounded backoff (logged), on the same port: brokers' routes stay right, and its
coordinators load again from their logs, losing nothing acknowledged. While it is down its coordinators are
marked out of service on the status board (the readers stop reading them) and the node is NOT_SERVING.
Commit processes are stopped, each draining its calls, before the first process closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, final

from coordinator.base.child_processes import ChildSupervisor, run_started_child, start_child
from coordinator.base.errors import ErrorCode
from coordinator.config.settings import Settings
from coordinator.node.processes.commit_process import CommitProcessPlan
from coordinator.node.processes.layout import ProcessLayout
from coordinator.reads.readers.board import Status, StatusBoard

log = logging.getLogger(__name__)


@final
class CommitSlot:
    """One commit process: its process while it runs, whether it serves, how often it was started again."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: BaseProcess | None = None
        self.connection: Connection | None = None
        self.serving = False
        self.restarts = 0
        self.first_start_over = asyncio.Event()  # loaded, or failed to start: the node's load goes on either way


def commit_process_settings(settings: Settings, layout: ProcessLayout, index: int) -> Settings:
    """A commit process's settings: its own port (and metrics port), no readers or commit processes of its own."""
    listen_host = settings.listen.rpartition(":")[0]
    metrics_listen = ""
    if settings.metrics_listen:
        metrics_host, _, metrics_port = settings.metrics_listen.rpartition(":")
        port = int(metrics_port) + 1 + index if int(metrics_port) != 0 else 0
        metrics_listen = f"{metrics_host}:{port}"
    return dataclasses.replace(
        settings,
        listen=f"{listen_host}:{layout.ports[index]}",
        metrics_listen=metrics_listen,
        read_processes=0,
    )


@final
class CommitProcesses(ChildSupervisor[CommitSlot]):
    def __init__(
        self,
        settings: Settings,
        layout: ProcessLayout,
        board: StatusBoard,
        on_change: Callable[[], None],
        target: Callable[[CommitProcessPlan, Any, Connection], None],
        on_catalog: Callable[[], None] = lambda: None,
    ) -> None:
        """`target`: the commit process's entry point (coordinator/node/assembly.py's), run in the spawned process;
        `on_catalog`: a commit process applied records the catalog follows."""
        super().__init__(settings, [CommitSlot(i) for i in range(layout.count)], "commit process", "commit processes")
        self._target = target
        self.layout = layout
        self.board = board
        self._on_change = on_change
        self._on_catalog = on_catalog

    def all_serving(self) -> bool:
        return all(slot.serving for slot in self.slots)

    def report_damage(self, coordinator_id: int, generation: int, what: str) -> None:
        """A reader met damage in a state file: the process leading the coordinator settles it."""
        if not 0 <= coordinator_id < self._settings.coordinators:
            return
        connection = self.slots[self.layout.owner(coordinator_id)].connection
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.send(("damage", coordinator_id, generation, what))

    async def _run_once(self, slot: CommitSlot) -> str:
        """Runs the commit process until it ends; why it ended."""
        plan = CommitProcessPlan(
            slot.index, self.layout, commit_process_settings(self._settings, self.layout, slot.index)
        )
        # Not a daemon: it has work to drain when stopped; the pipe's end stops it if this process dies.
        process, ours = start_child(
            self._context, self._target, (plan, self.board.words), f"diskless-commit-{slot.index}", daemon=False
        )
        slot.process, slot.connection = process, ours

        def listening(port: int) -> None:
            log.info("commit process %d (pid %d) listening on port %d", slot.index, process.pid, port)

        try:
            return await run_started_child(
                process, ours, self._stopping, self._settings.read_process_start_timeout_ms, listening,
                lambda message: self._message(slot, message),
            )  # fmt: skip
        finally:
            slot.first_start_over.set()
            self._out_of_service(slot)
            ours.close()
            slot.connection = None

    def _out_of_service(self, slot: CommitSlot) -> None:
        """Its coordinators may not be read from the board while it is down; the node is not serving."""
        for coordinator_id in self.layout.led_by(slot.index, self._settings.coordinators):
            generation = self.board.status(coordinator_id).generation
            self.board.publish(coordinator_id, Status(int(ErrorCode.COORDINATOR_NOT_AVAILABLE), generation))
        if slot.serving:
            slot.serving = False
            self._on_change()

    def _message(self, slot: CommitSlot, message: Any) -> None:
        if message[0] == "serving":
            slot.serving = bool(message[1])
            slot.first_start_over.set()
            self._on_change()
        elif message[0] == "catalog":
            self._on_catalog()

    def gauges(self) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
        for slot in self.slots:
            labels = {"process": str(slot.index)}
            yield ("diskless_commit_process_serving", "1 while the commit process serves all its coordinators.",
                   "gauge", labels, 1.0 if slot.serving else 0.0)  # fmt: skip
            yield ("diskless_commit_process_restarts", "Times the commit process was started again after it died.",
                   "counter", labels, slot.restarts)  # fmt: skip
