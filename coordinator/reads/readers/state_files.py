"""A reader process's view of the node's coordinators: their state files, read-only, as the board allows.

It satisfies `coordinator.runtime.node_coordinators.ReadingCoordinators`, so the reader runs the node's own FindBatches
(`coordinator.reads.find_batches`): one set of fetch rules. Partition -> coordinator comes from the coordinators'
`partitions` tables, cached per topic; a topic missing from the cache, or cached longer than
ROUTE_CACHE_S (a topic deleted and created again under the same id), or whose route named a coordinator that no
longer holds the partition (a move, design §5a), is looked up again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import final

import apsw

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.result import ItemError
from coordinator.config.settings import Settings
from coordinator.machine.catalog import PlacedPartition
from coordinator.machine.state import reads
from coordinator.machine.state.detached_read import read_transaction
from coordinator.machine.state.store import open_reader
from coordinator.machine.topic_names import topic_id_problem
from coordinator.reads.readers.board import Status, StatusBoard
from coordinator.runtime.node_coordinators import (
    Route,
    damaged_error,
    limit_items,
    not_in_service_error,
    unknown_partition_error,
)

log = logging.getLogger(__name__)

ROUTE_CACHE_S = 5.0  # a topic's cached partitions are looked up again after this long
STATE_FILE = "state.sqlite"

# What the reader tells the node when a read met damage: (coordinator id, generation read, what was met).
DamageReport = Callable[[int, int, str], None]


def unavailable_for(coordinator_id: int, status: Status) -> CoordinatorUnavailable:
    """The error a caller gets from a coordinator the board says may not be read (as `require_active` says it)."""
    code = ErrorCode(status.error_code)
    if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return CoordinatorUnavailable(code, f"coordinator {coordinator_id} is loading")
    if code is ErrorCode.NOT_COORDINATOR:
        return CoordinatorUnavailable(code, f"coordinator {coordinator_id} is closing")
    return CoordinatorUnavailable(
        code, f"coordinator {coordinator_id} is out of service (DescribeCoordinators on the node says why)"
    )


@final
class StateFile:
    """One coordinator's state file, read-only: a connection per generation, reopened when the board's moves on."""

    def __init__(self, coordinator_id: int, path: Path, board: StatusBoard, checksums: bool = True) -> None:
        self.coordinator_id = coordinator_id
        self._path = path
        self._checksums = checksums  # pages and WAL frames verified, as the node's own reads
        self._board = board
        self._connection: apsw.Connection | None = None
        self._generation = -1
        self.read_generation = -1  # the generation the last read transaction saw

    def require_active(self) -> None:
        generation = self._board.readable_generation(self.coordinator_id)
        if isinstance(generation, Status):
            raise unavailable_for(self.coordinator_id, generation)
        connection = self._connection
        if connection is not None and connection.in_transaction:
            return  # within one call the first snapshot serves on, even if the node reloaded meanwhile
        if generation != self._generation:
            self.close()
            try:
                self._connection = open_reader(self._path, self._checksums)
            except apsw.Error as error:  # replaced or removed since the board was written: the next call sees why
                raise CoordinatorUnavailable(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"coordinator {self.coordinator_id}'s state cannot be opened here ({error}); retry",
                ) from error
            self._generation = generation
        self.read_generation = self._generation

    def read_transaction(self) -> contextlib.AbstractContextManager[apsw.Connection]:
        assert self._connection is not None, "read_transaction before require_active"
        return read_transaction(self._connection)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
            self._generation = -1


@final
class ReaderCoordinators:
    """The coordinators of a node as its reader processes see them (`ReadingCoordinators`)."""

    def __init__(
        self, settings: Settings, directories: Sequence[Path], board: StatusBoard, report_damage: DamageReport
    ) -> None:
        self.settings = settings
        self._files = [
            StateFile(i, directory / STATE_FILE, board, settings.state_page_checksums)
            for i, directory in enumerate(directories)
        ]
        self._report_damage = report_damage
        self._topics: dict[bytes, tuple[float, Mapping[int, int]]] = {}  # topic id -> (looked up at, partitions)

    def limit_items(self, count: int, what: str) -> None:
        limit_items(self.settings, count, what)

    def shard(self, coordinator_id: int) -> StateFile:
        return self._files[coordinator_id]

    def damaged(self, shard: StateFile, error: Exception) -> CoordinatorUnavailable:
        """Damage met here is the node's to settle: it is told, and rebuilds the state if the file is still its."""
        self._report_damage(shard.coordinator_id, shard.read_generation, f"{type(error).__name__}: {error}")
        return damaged_error(shard.coordinator_id, error)

    def route(self, topic_id: bytes, partitions: Sequence[int]) -> list[Route]:
        problem = topic_id_problem(topic_id)
        if problem:
            malformed = ItemError(ErrorCode.INVALID_REQUEST, problem)
            return [malformed for _ in partitions]
        now = time.monotonic()
        cached = self._topics.get(topic_id)
        assignment = cached[1] if cached is not None and now - cached[0] < ROUTE_CACHE_S else None
        if assignment is None or not all(map(assignment.__contains__, partitions)):
            assignment = self._look_up(topic_id)
            if assignment:
                self._topics[topic_id] = (now, assignment)
            else:
                self._topics.pop(topic_id, None)
        coordinator_of = assignment.get
        return [
            self._unknown_partition(partition)
            if (coordinator_id := coordinator_of(partition)) is None
            else coordinator_id
            for partition in partitions
        ]

    def route_missed(self, topic_id: bytes) -> None:
        # A cached route to a coordinator the partition moved out of would answer UNKNOWN_TOPIC_OR_PARTITION for
        # up to ROUTE_CACHE_S: one such answer (retriable) drops it, and the broker's retry finds the target.
        self._topics.pop(topic_id, None)

    def _look_up(self, topic_id: bytes) -> dict[int, int]:
        """The topic's partitions in every coordinator that may be read now."""
        found: dict[int, int] = {}
        moving: set[int] = set()  # partitions found only at a move's source so far: its target wins (design §5a)
        for state in self._files:
            try:
                state.require_active()
                with state.read_transaction() as db:
                    for partition, frozen in db.execute(
                        "SELECT partition, EXISTS (SELECT 1 FROM partition_moves AS m "
                        "WHERE m.partition_key = p.partition_key) FROM partitions AS p WHERE topic_id = ?",
                        (topic_id,),
                    ):
                        if frozen and partition in found and partition not in moving:
                            continue  # the target already found: the source's row is the move's, not the route
                        found[partition] = state.coordinator_id
                        moving.discard(partition)
                        if frozen:
                            moving.add(partition)
            except CoordinatorUnavailable:
                continue
            except reads.DAMAGE_ERRORS as error:
                self.damaged(state, error)
        return found

    def placed_partitions(self) -> list[PlacedPartition]:
        """Every partition of every coordinator that may be read now (a node's catalog, read from the state files)."""
        placed: list[PlacedPartition] = []
        for state in self._files:
            try:
                state.require_active()
                with state.read_transaction() as db:
                    rows = db.execute(
                        "SELECT topic_id, topic_name, partition, EXISTS (SELECT 1 FROM partition_moves AS m "
                        "WHERE m.partition_key = p.partition_key) FROM partitions AS p"
                    ).fetchall()
            except CoordinatorUnavailable:
                continue
            except reads.DAMAGE_ERRORS as error:
                self.damaged(state, error)
                continue
            placed.extend(
                PlacedPartition(state.coordinator_id, bytes(t), str(n), int(p), bool(f))  # type: ignore[arg-type]
                for t, n, p, f in rows
            )
        return placed

    def _unknown_partition(self, partition: int) -> ItemError:
        """As the node answers (`NodeCoordinators.unknown_partition`): unknown only if every coordinator could say."""
        for state in self._files:
            try:
                state.require_active()
            except CoordinatorUnavailable as error:
                return not_in_service_error(partition, error)
        return unknown_partition_error(partition)

    def close(self) -> None:
        for state in self._files:
            state.close()


@contextlib.contextmanager
def reader_coordinators(
    settings: Settings, directories: Sequence[Path], board: StatusBoard, report_damage: DamageReport
) -> Iterator[ReaderCoordinators]:
    view = ReaderCoordinators(settings, directories, board, report_damage)
    try:
        yield view
    finally:
        view.close()
