"""The move worker at a move's source (design §5a): the imperative shell that drives a frozen partition to its target.

A move starts with its catch-up (design §5a): commits to the partition go on here while the worker sends chunks of
the committed batches; once at most `diskless.partition.move.freeze.tail.batches` are left to copy (or the copy
stalled: `diskless.partition.move.catch.up.rounds` chunks without the batches left falling below their fewest) it
records the freeze (PartitionMoveFrozen), and the steps below copy only that tail while commits wait.

It runs on the source coordinator's leader only and keeps nothing of its own but the stall counts (a failover
counts afresh): every pass reads the moves this coordinator has started from its committed state (so every commit
acknowledged before a freeze is in what it reads), asks each target where the move is (AdoptPartitionChunk with
index -1), and does what
`move_protocol.next_step` says, step after step: send the next chunk (read by `adoptions.chunk_from`, at most
`diskless.partition.move.chunk.batches` batches, from where the target says the staged batches end), ask for the
adoption (`adoptions.adopted_partition`), then, once the target answers that its adoption is applied with the files it
holds as loan rows this move made (`adoptions.lent_for`), record the drop here (`move_drop.check_moved_out`:
PartitionMovedOut with those loans). A crash, a failover of either side or a lost answer only makes the next pass ask
again; every step is idempotent at the side that records it.

A move that made no step for `diskless.partition.move.timeout.ms` is given up as the protocol says (design §5a): the
target is asked to abandon it (AbandonAdoption: its staged batches go, a late chunk or adoption is refused; refused
once adopted, and the move then goes on to its drop), and only once the target answered that it abandoned it does
this coordinator cancel its freeze (PartitionMoveCancelled: the partition serves here again), so the two never both
take writes. A target that cannot be asked at all is waited for: nothing tells the source it did not adopt.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

import apsw

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.base.errors import ErrorCode
from coordinator.cluster.peers import PeerClient, PeerError
from coordinator.config.settings import Settings
from coordinator.machine import records
from coordinator.machine.records import MovedBatch, MovedFile
from coordinator.machine.state import adoptions
from coordinator.machine.state.adoptions import MovedAborted
from coordinator.machine.state.reads import one_row
from coordinator.runtime.shard import CoordinatorShard, Operation
from coordinator.runtime.shard.worker import PeriodicWorker
from coordinator.topics.move_drop import MoveOut, check_moved_out
from coordinator.topics.move_freeze import MoveCancel, MoveFreeze, check_cancel_move, check_freeze_move
from coordinator.topics.move_protocol import (
    Next,
    SourceStep,
    TargetState,
    TargetStep,
    catch_up_step,
    fewest_left,
    next_step,
)
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FrozenMove:
    """A move this coordinator froze a partition for, as its committed state holds it."""

    partition_key: int
    topic_id: bytes
    partition: int
    to_coordinator: int
    move_id: int
    catching_up: bool = False


def frozen_moves(db: apsw.Connection) -> list[FrozenMove]:
    """Every partition moving from here (catching up or frozen), in move id order. Call it in a read transaction."""
    return [
        FrozenMove(int(key), bytes(topic_id), int(partition), int(to), int(move_id), bool(catching_up))
        for key, topic_id, partition, to, move_id, catching_up in db.execute(
            "SELECT m.partition_key, p.topic_id, p.partition, m.to_coordinator, m.move_id, m.catching_up "
            "FROM partition_moves AS m "
            "JOIN partitions AS p ON p.partition_key = m.partition_key ORDER BY m.move_id"
        )
    ]


def batches_from(db: apsw.Connection, partition_key: int, from_offset: int) -> int:
    """The partition's batches whose last offset is at or above `from_offset` (one range of the batches' key)."""
    (count,) = one_row(
        db.execute(
            "SELECT count(*) FROM batches WHERE partition_key = ? AND last_offset >= ?", (partition_key, from_offset)
        ),
        f"the batches of partition key {partition_key}",
    )
    return int(count)


def chunk_count(staged: int, remaining: int, chunk_batches: int) -> int:
    """The chunks of a move: those staged, and enough for the batches left; at least one (an empty partition is
    staged by one empty chunk, which its adoption needs)."""
    return max(1, staged + -(-remaining // chunk_batches))


def target_state(answer: internal.AdoptPartitionChunkResponse) -> TargetState:
    if answer.adopted:
        return TargetState(TargetStep.ADOPTED, answer.staged_chunks)
    if answer.abandoned:
        return TargetState(TargetStep.ABANDONED, answer.staged_chunks)
    return TargetState(TargetStep.STAGING if answer.staged_chunks else TargetStep.NONE, answer.staged_chunks)


class MoveRefused(Exception):
    """The target refused a move's step for good (INVALID_REQUEST): the move waits for its timeout."""


@dataclass(slots=True)
class MovePass:
    """What one pass did, for tests and logs."""

    chunks_sent: int = 0
    frozen: int = 0
    adopted: int = 0
    dropped: int = 0
    abandoned: int = 0
    cancelled: int = 0
    failures: list[str] = field(default_factory=list)


class MoveWorker(PeriodicWorker):
    task_name = "partition-moves"
    what = "partition moves"

    def __init__(self, shard: CoordinatorShard, settings: Settings, clock: Clock, peers: PeerClient) -> None:
        super().__init__(shard, settings.request_timeout_ms / 1000, clock, settings.partition_move_interval_ms)
        self._settings = settings
        self._peers = peers

        def new_backoff() -> Backoff:
            return Backoff(settings.partition_move_retry_backoff_ms, settings.partition_move_retry_backoff_max_ms)

        self._backoff: dict[int, Backoff] = defaultdict(new_backoff)  # per move id
        # Move id -> when it last made a step (or was first seen by this worker): its timeout counts from there.
        self._last_step_ms: dict[int, int] = {}
        # Move id -> (the fewest batches left to copy seen in its catch-up, chunks sent since): the stall bound.
        self._fewest_left: dict[int, tuple[int, int]] = {}

    async def run_pass(self) -> MovePass:
        """Every move frozen here, each taken as far as it goes now; none where this replica does not lead."""
        done = MovePass()
        if not self.leads():
            return done
        with self._shard.read_transaction() as db:
            moves = frozen_moves(db)
        now_ms = self._clock.now_ms()
        for gone in set(self._last_step_ms) - {m.move_id for m in moves}:
            del self._last_step_ms[gone]
            self._backoff.pop(gone, None)
            self._fewest_left.pop(gone, None)
        for move in moves:
            backoff = self._backoff[move.move_id]
            self._last_step_ms.setdefault(move.move_id, now_ms)
            if not backoff.ready(self._clock.now_ms()):
                continue
            try:
                await self._drive(move, done)
                backoff.succeeded()
            except (PeerError, TimeoutError, MoveRefused) as error:
                wait_ms = backoff.failed(self._clock.now_ms())
                done.failures.append(f"move {move.move_id}: {error}")
                log.warning(
                    "coordinator %d: move %d of partition %d to coordinator %d waits %d ms: %s",
                    self.coordinator_id, move.move_id, move.partition, move.to_coordinator, wait_ms, error,
                )  # fmt: skip
        return done

    def _stalled(self, move: FrozenMove, remaining: int) -> bool:
        """Whether the catch-up sent `diskless.partition.move.catch.up.rounds` chunks in a row without the batches
        left to copy falling below their fewest so far: commits come as fast as the copy, so it freezes anyway."""
        counted = fewest_left(self._fewest_left.get(move.move_id), remaining)
        self._fewest_left[move.move_id] = counted
        return counted[1] >= self._settings.partition_move_catch_up_rounds

    async def _freeze(self, move: FrozenMove, remaining: int) -> None:
        """PartitionMoveFrozen here: commits to the partition answer NOT_COORDINATOR from its apply on, and every
        one acknowledged before it is in the committed state the next chunks are read from."""
        error = await self._submit(
            Operation(check_freeze_move, MoveFreeze(move.topic_id, move.partition, move.move_id)), "the move's freeze"
        )
        if error.error_code is not ErrorCode.NONE:
            raise MoveRefused(f"the freeze here: {pb.ErrorCode.Name(error.error_code)}: {error.message}")
        log.info(
            "coordinator %d: partition %d caught up with coordinator %d (move %d): frozen with %d batches to copy",
            self.coordinator_id, move.partition, move.to_coordinator, move.move_id, remaining,
        )  # fmt: skip

    def _timed_out(self, move: FrozenMove) -> bool:
        timeout_ms = self._settings.partition_move_timeout_ms
        return timeout_ms > 0 and self._clock.now_ms() - self._last_step_ms[move.move_id] >= timeout_ms

    async def _drive(self, move: FrozenMove, done: MovePass) -> None:
        """Steps of one move until it waits or ends here (dropped or cancelled)."""
        asked: internal.AdoptPartitionChunkResponse | None = None  # the freeze changes nothing at the target
        while self.leads():
            answer = asked or await self._ask_target(move, -1, ([], [], []))
            asked = None
            target = target_state(answer)
            with self._shard.read_transaction() as db:
                remaining = batches_from(db, move.partition_key, max(answer.next_offset, 0))
            chunks = chunk_count(target.staged_chunks, remaining, self._settings.partition_move_chunk_batches)
            if move.catching_up:
                tail = self._settings.partition_move_freeze_tail_batches
                step = catch_up_step(target, remaining, tail, self._stalled(move, remaining), self._timed_out(move))
            else:
                step = next_step(SourceStep.FROZEN, target, chunks, self._timed_out(move))
            if step is Next.FREEZE:
                await self._freeze(move, remaining)
                move = FrozenMove(move.partition_key, move.topic_id, move.partition, move.to_coordinator, move.move_id)
                done.frozen += 1
                asked = answer
            elif step is Next.SEND_CHUNK:
                await self._send_chunk(move, answer)
                done.chunks_sent += 1
            elif step is Next.ADOPT:
                await self._adopt(move, chunks)
                done.adopted += 1
                log.info(
                    "coordinator %d: partition %d moved to coordinator %d (move %d, %d chunks)",
                    self.coordinator_id, move.partition, move.to_coordinator, move.move_id, chunks,
                )  # fmt: skip
            elif step is Next.ABANDON:
                await self._abandon(move)
                done.abandoned += 1
            elif step is Next.CANCEL:
                # The target answered that it abandoned the move, so it never adopts it: serving here again is safe.
                await self._submit(
                    Operation(check_cancel_move, MoveCancel(move.topic_id, move.partition, move.move_id)),
                    "the move's cancel",
                )
                done.cancelled += 1
                log.warning(
                    "coordinator %d: move %d of partition %d to coordinator %d cancelled: no step for %d ms",
                    self.coordinator_id, move.move_id, move.partition, move.to_coordinator,
                    self._settings.partition_move_timeout_ms,
                )  # fmt: skip
                return
            elif step is Next.DROP:
                await self._drop(move, answer)
                done.dropped += 1
                return
            else:
                return
            self._last_step_ms[move.move_id] = self._clock.now_ms()

    async def _ask_target(
        self, move: FrozenMove, index: int, chunk: tuple[list[MovedBatch], list[MovedFile], list[MovedAborted]]
    ) -> internal.AdoptPartitionChunkResponse:
        """Sends chunk `index` (-1: nothing, only asks); the target's answer; MoveRefused or PeerError otherwise (a
        gap, too: the next pass asks again). Every step of `_drive` either advances the move or raises, so a pass
        never spins."""
        batches, files, aborted = chunk
        request = internal.AdoptPartitionChunkRequest(
            from_coordinator_id=self.coordinator_id, to_coordinator_id=move.to_coordinator, move_id=move.move_id,
            index=index, topic_id=move.topic_id, partition=move.partition,
            batches=[internal.MovedBatch(**batch._asdict()) for batch in batches],
            files=[internal.MovedFile(**file._asdict()) for file in files],
            aborted_transactions=[
                internal.MovedAbortedTransaction(
                    marker_offset=marker, producer_id=producer, first_offset=first, last_stable_offset=stable
                )
                for marker, producer, first, stable in aborted
            ],
            timeout_ms=int(self._timeout_s * 1000),
        )  # fmt: skip
        answer = await self._peers.adopt_partition_chunk(request, self._timeout_s)
        if answer.error_code == pb.NONE or answer.abandoned:  # abandoned: next_step says what follows
            return answer
        if answer.error_code == pb.INVALID_REQUEST and index > answer.staged_chunks:
            # A gap: the target lost chunks in a failover. The next pass asks where it is and sends from there.
            raise PeerError(f"coordinator {move.to_coordinator} has {answer.staged_chunks} chunks, not {index}")
        raise _refusal(move, answer.error_code, answer.error_message)

    async def _send_chunk(self, move: FrozenMove, answer: internal.AdoptPartitionChunkResponse) -> None:
        limit = self._settings.partition_move_chunk_batches
        with self._shard.read_transaction() as db:
            chunk = adoptions.chunk_from(db, move.partition_key, max(answer.next_offset, 0), limit)
        await self._ask_target(move, answer.staged_chunks, chunk)

    async def _drop(self, move: FrozenMove, answer: internal.AdoptPartitionChunkResponse) -> None:
        """PartitionMovedOut here, with the loans the target holds (its answer, once its adoption is applied)."""
        if not answer.lent_files_known:
            raise PeerError(f"coordinator {move.to_coordinator} has not applied the adoption yet")
        out = MoveOut(move.topic_id, move.partition, move.move_id, frozenset(answer.lent_files))
        error = await self._submit(Operation(check_moved_out, out), "the move's drop")
        if error.error_code is not ErrorCode.NONE:
            raise MoveRefused(f"the drop here: {pb.ErrorCode.Name(error.error_code)}: {error.message}")
        log.info(
            "coordinator %d: partition %d moved out to coordinator %d (move %d, %d files lent)",
            self.coordinator_id, move.partition, move.to_coordinator, move.move_id, len(answer.lent_files),
        )  # fmt: skip

    async def _abandon(self, move: FrozenMove) -> None:
        """The target gives the move up (or, adopted meanwhile, refuses: the next ask says so and the move goes on)."""
        request = internal.AbandonAdoptionRequest(
            from_coordinator_id=self.coordinator_id, to_coordinator_id=move.to_coordinator, move_id=move.move_id,
            timeout_ms=int(self._timeout_s * 1000),
        )  # fmt: skip
        answer = await self._peers.abandon_adoption(request, self._timeout_s)
        if answer.error_code != pb.NONE:
            # INVALID_REQUEST: adopted meanwhile (the next pass finds it so and drops the partition here) or refused
            # for good; either way this pass stops, and the next one asks again after the backoff.
            raise _refusal(move, answer.error_code, answer.error_message)

    async def _adopt(self, move: FrozenMove, chunks: int) -> None:
        with self._shard.read_transaction() as db:
            adopted = adoptions.adopted_partition(db, move.partition_key)
        if adopted is None:
            raise MoveRefused(f"partition key {move.partition_key} is not here any more")
        partition = records.partition_adopted(self.coordinator_id, move.move_id, 0, adopted).partition_adopted
        request = internal.AdoptPartitionRequest(
            from_coordinator_id=self.coordinator_id, to_coordinator_id=move.to_coordinator, move_id=move.move_id,
            chunks=chunks, partition=partition, timeout_ms=int(self._timeout_s * 1000),
        )  # fmt: skip
        answer = await self._peers.adopt_partition(request, self._timeout_s)
        if answer.error_code != pb.NONE:
            raise _refusal(move, answer.error_code, answer.error_message)


def _refusal(move: FrozenMove, code: int, message: str) -> Exception:
    """A refusal for good (INVALID_REQUEST) waits for the move's timeout; any other is retried with backoff."""
    error = f"coordinator {move.to_coordinator}: {pb.ErrorCode.Name(code)}: {message}"
    return MoveRefused(error) if code == pb.INVALID_REQUEST else PeerError(error)
