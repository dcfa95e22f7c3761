"""The node's side of its reader processes: the status board it publishes, and starting, restarting and stopping them.

Readers start once the node has loaded; one that dies is started again after a bounded backoff (logged), on the
port it had where that port is free. Their addresses, as they come and go, are handed to `on_addresses` (the
node advertises them in FindCoordinator). They are stopped before the coordinators close. A read that met
damage in a reader is reported here, and the coordinator rebuilds its state as it does for its own reads, if
the file the reader read is still the coordinator's current one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, final

from coordinator.base.child_processes import ChildSupervisor, run_started_child, start_child
from coordinator.base.errors import CoordinatorUnavailable
from coordinator.config.settings import Settings
from coordinator.machine.state.reads import StateDamaged
from coordinator.reads.readers.board import READABLE, Status, StatusBoard
from coordinator.reads.readers.counters import CallCounts
from coordinator.reads.readers.state_files import DamageReport
from coordinator.reads.readers.worker import ReaderPlan, run_reader
from coordinator.runtime.shard import CoordinatorShard, ShardState

log = logging.getLogger(__name__)


def status_of(shard: CoordinatorShard, generation: int) -> Status:
    """What the board says of a coordinator: readable, or the code `require_active` would raise with."""
    try:
        shard.require_active()
    except CoordinatorUnavailable as error:
        return Status(int(error.error_code), generation)
    return Status(READABLE, generation)


@final
class ReaderSlot:
    """One reader: its process while it runs, the port it serves on, and how often it was started again."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: BaseProcess | None = None
        self.connection: Connection | None = None
        self.port = 0
        self.up = False
        self.restarts = 0
        self.first_start_over = asyncio.Event()  # listening, or failed to: the node goes SERVING either way


@final
class ReadProcesses(ChildSupervisor[ReaderSlot]):
    def __init__(
        self,
        settings: Settings,
        shards: Sequence[CoordinatorShard],
        host: str,
        on_addresses: Callable[[tuple[str, ...]], None],
        board: StatusBoard | None = None,
        report_damage: DamageReport | None = None,
    ) -> None:
        """`board` and `report_damage` when other processes lead the coordinators: they publish, damage goes there."""
        super().__init__(
            settings, [ReaderSlot(i) for i in range(settings.read_processes)], "reader", "reader processes"
        )
        self._shards = list(shards)
        self._host = host
        self._on_addresses = on_addresses
        self._report_damage = report_damage
        published_here = board is None
        self.board = StatusBoard.create(len(self._shards)) if board is None else board
        self.counts = CallCounts.create(settings.read_processes)
        self._generations = [0] * len(self._shards)
        if published_here:
            for shard in self._shards:
                self.publish(shard)

    # ------------------------------------------------------------------ the board

    def publish(self, shard: CoordinatorShard) -> None:
        """Called on every state change of a coordinator; a coordinator (re)loaded is a new generation."""
        coordinator_id = shard.coordinator_id
        if coordinator_id >= len(self._generations):
            return  # added online, not on this board yet: `grow` publishes it
        if shard.state is ShardState.ACTIVE:
            self._generations[coordinator_id] += 1
        self.board.publish(coordinator_id, status_of(shard, self._generations[coordinator_id]))

    def role_set(self, shard: CoordinatorShard) -> None:
        """Called on every role etcd sets (a cluster): a replica removed here, or left without a leader, is
        refused by the readers at once, before the coordinator steps aside and closes (or deletes) its files.
        The generation stays: the file is the same until the coordinator reloads."""
        coordinator_id = shard.coordinator_id
        if coordinator_id >= len(self._generations):
            return
        status = status_of(shard, self._generations[coordinator_id])
        if status != self.board.status(coordinator_id):
            self.board.publish(coordinator_id, status)

    def _damage_reported(self, slot: ReaderSlot, coordinator_id: int, generation: int, what: str) -> None:
        if not 0 <= coordinator_id < len(self._shards):
            return
        if self._report_damage is not None:
            self._report_damage(coordinator_id, generation, f"reader {slot.index}: {what}")
            return
        if self.board.status(coordinator_id).generation != generation:
            return  # the reader read a state file since replaced: nothing to rebuild
        self._shards[coordinator_id].report_damage(StateDamaged(f"reader {slot.index}: {what}"))

    # ------------------------------------------------------------------ the processes

    def addresses(self) -> tuple[str, ...]:
        return tuple(f"{self._host}:{slot.port}" for slot in self.slots if slot.up)

    async def _run_once(self, slot: ReaderSlot) -> str:
        """Runs the reader until it ends; why it ended."""
        plan = ReaderPlan(
            slot.index, self._settings, self._host, slot.port, tuple(shard.directory for shard in self._shards)
        )
        process, ours = start_child(
            self._context, run_reader, (plan, self.board.words, self.counts.words), f"diskless-reader-{slot.index}",
            daemon=True,
        )  # fmt: skip
        slot.process, slot.connection = process, ours

        def listening(port: int) -> None:
            slot.port, slot.up = port, True
            self._on_addresses(self.addresses())
            slot.first_start_over.set()

        try:
            return await run_started_child(
                process, ours, self._stopping, self._settings.read_process_start_timeout_ms, listening,
                lambda message: self._message(slot, message),
            )  # fmt: skip
        finally:
            slot.first_start_over.set()
            if slot.up:
                slot.up = False
                self._on_addresses(self.addresses())
            ours.close()
            slot.connection = None

    def _message(self, slot: ReaderSlot, message: Any) -> None:
        if message[0] == "damage":
            self._damage_reported(slot, int(message[1]), int(message[2]), str(message[3]))

    async def grow(self, shards: Sequence[CoordinatorShard]) -> None:
        """Coordinators were added online (coordinator/node/growth.py): the readers start again over all of them, on
        a board as large. A reader holds its coordinators' state files from its start; meanwhile FindBatches goes to
        the node, which serves it too."""
        await self.stop()
        restarts = [slot.restarts for slot in self.slots]
        self._shards = list(shards)
        self.board = StatusBoard.create(len(self._shards))
        self._generations = [*self._generations, *[0] * (len(self._shards) - len(self._generations))]
        self.slots = [ReaderSlot(i) for i in range(self._settings.read_processes)]
        for slot, count in zip(self.slots, restarts, strict=True):
            slot.restarts = count
        self._stopping = asyncio.Event()
        for shard in self._shards:
            self.publish(shard)
        assert self._supervised is not None, "grown before started"
        self.start(*self._supervised)
        await self.wait_first_starts()

    # ------------------------------------------------------------------ metrics

    def gauges(self) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
        for slot in self.slots:
            labels = {"reader": str(slot.index)}
            yield ("diskless_reader_up", "1 while the reader process serves FindBatches.", "gauge", labels,
                   1.0 if slot.up else 0.0)  # fmt: skip
            yield ("diskless_reader_restarts", "Times the reader process was started again after it died.",
                   "counter", labels, slot.restarts)  # fmt: skip
            yield ("diskless_reader_call_seconds", "Seconds the reader spent answering calls.", "counter", labels,
                   self.counts.seconds(slot.index))  # fmt: skip
            for code, calls in self.counts.calls(slot.index):
                yield ("diskless_reader_calls", "Calls the reader answered, by gRPC status code.", "counter",
                       {**labels, "code": code.name}, calls)  # fmt: skip
