"""One coordinator's WAL-file worker: hand-over to the next owner, deletion after the grace period (DESIGN §5).

It runs beside the write path, never in it: each cycle reads the committed
state, does its I/O (calls to other coordinators, the object store, in a
thread for the store's blocking calls) and then appends what happened
through the coordinator's pipeline like any operation, where the checks of
`coordinator.files.ownership` verify it again. Nothing is kept that the state
cannot give back, so after a restart the worker simply goes on; it acts only
while its coordinator is ACTIVE (the leader).

Steps per cycle, each bounded by `diskless.coordinator.file.worker.max.files`
and backed off on its own when it fails (a store outage never stops
hand-overs, a failing target never stops deletions):
1. hand over owned files with no live batch to the next owner;
2. take files nobody before this coordinator knows (a partial commit),
   once they are older than the probe delay;
3. schedule the deletion of files this coordinator owns last;
4. delete objects whose grace period ended, then record them as deleted.

Each of them goes in steps of at most `diskless.coordinator.file.worker.step.files`
files (one call, one store request, one record batch), and the worker pauses
after each step (`diskless.coordinator.file.worker.duty.percent`): a
consolidation job empties thousands of files at once, and their hand-overs,
probes and deletions, done in one go, held the node's loop and the
coordinators' pipelines for hundreds of milliseconds while commits waited.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, final

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.base.errors import CallRejected, CoordinatorUnavailable, ErrorCode
from coordinator.base.metrics import Metrics
from coordinator.base.result import Result
from coordinator.cluster.peers import PeerClient, PeerError
from coordinator.config.settings import Settings
from coordinator.files import ownership
from coordinator.files.object_store import ObjectStore, ObjectStoreError
from coordinator.files.ownership import FileRef
from coordinator.machine.state import file_reads
from coordinator.machine.view import CoordinatorView, FileFacts
from coordinator.runtime.shard import CoordinatorShard, Operation, ShardState
from coordinator.runtime.shard.worker import CoordinatorWorker
from snapshot.fault_points import reach

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT")
ItemT = TypeVar("ItemT")


def steps(items: Sequence[ItemT], step_size: int) -> Iterator[Sequence[ItemT]]:
    """`items` in consecutive slices of at most `step_size`."""
    for start in range(0, len(items), step_size):
        yield items[start : start + step_size]


def pause_ms(step_ms: int, duty_percent: int) -> int:
    """The pause after a step of `step_ms` that keeps the steps to `duty_percent` of the worker's time."""
    return step_ms * (100 - duty_percent) // duty_percent


@final
@dataclass(frozen=True, slots=True)
class DeletionSchedule:
    """Files whose deletion the last owner schedules, each after the grace period."""

    files: tuple[FileRef, ...]
    grace_period_ms: int


def _check_schedule_deletions(view: CoordinatorView, schedule: DeletionSchedule, now_ms: int) -> Result[int]:
    return ownership.check_schedule_deletions(view, schedule.files, now_ms, schedule.grace_period_ms)


@dataclass(slots=True)
class CycleCounts:
    handed_over: int = 0
    taken: int = 0
    scheduled: int = 0
    deleted: int = 0
    failures: list[str] = field(default_factory=list)


class FileWorker(CoordinatorWorker):
    task_name = "file-worker"

    def __init__(
        self,
        shard: CoordinatorShard,
        settings: Settings,
        clock: Clock,
        store: ObjectStore,
        peers: PeerClient,
        metrics: Metrics,
    ) -> None:
        super().__init__(shard, settings.request_timeout_ms / 1000)
        self._settings = settings
        self._clock = clock
        self._store = store
        self._peers = peers
        self._metrics = metrics
        self._limit = settings.file_worker_max_files
        self._step = settings.file_worker_step_files

        def new_backoff() -> Backoff:
            return Backoff(settings.file_retry_backoff_ms, settings.file_retry_backoff_max_ms)

        self._target_backoff: dict[int, Backoff] = defaultdict(new_backoff)  # per next owner
        self._probe_backoff = new_backoff()
        self._store_backoff = new_backoff()
        # Where the hand-over and probe scans go on next cycle (file id), so one stuck file never hides the rest.
        self._hand_over_cursor = -1
        self._probe_cursor = -1
        self._next_probe_pass_ms = 0

    async def run(self) -> None:
        while True:
            # The first cycle waits one interval too: a node that just started answers its callers first.
            # The wait is on the node's clock, so a test's clock decides when a cycle runs.
            await self._clock.sleep_ms(self._settings.file_worker_interval_ms)
            try:
                await self.run_cycle()
            except (CoordinatorUnavailable, CallRejected) as error:
                log.warning("coordinator %d: file worker waits: %s", self.coordinator_id, error)
            # Anything else is a bug: the supervisor logs and counts it and starts a new worker after a backoff.

    async def run_cycle(self) -> CycleCounts:
        """One pass of every step; what it did, for tests and logs."""
        counts = CycleCounts()
        if self._shard.state is not ShardState.ACTIVE or not self._shard.leads:
            return counts  # file workers run on the coordinator's leader only (DESIGN §6a)
        await self._hand_over(counts)
        await self._take_unclaimed(counts)
        await self._schedule_deletions(counts)
        await self._delete_due(counts)
        labels = str(self.coordinator_id)
        for step, value in (
            ("handed_over", counts.handed_over),
            ("taken", counts.taken),
            ("deletion_scheduled", counts.scheduled),
            ("deleted", counts.deleted),
        ):
            if value:
                self._metrics.file_transitions.labels(labels, step).inc(value)
        return counts

    async def _idle(self, query: file_reads.IdleFilesQuery, bindings: tuple[int, ...]) -> list[FileFacts]:
        """The query's files, read off the node's loop (CoordinatorWorker._read says why that is safe)."""
        limit = self._limit
        return await self._read(lambda db: file_reads.idle_files(db, query, bindings, limit))

    def _failed(self, counts: CycleCounts, step: str, what: str, backoff: Backoff, error: Exception) -> None:
        wait_ms = backoff.failed(self._clock.now_ms())
        counts.failures.append(f"{what}: {error}")
        self._metrics.file_worker_failures.labels(str(self.coordinator_id), step).inc()
        log.warning(
            "coordinator %d: %s failed (%s); retrying in %d ms (failure %d in a row)",
            self.coordinator_id, what, error, wait_ms, backoff.failures,
        )  # fmt: skip

    # ------------------------------------------------------------------ 1. hand-over

    async def _hand_over(self, counts: CycleCounts) -> None:
        files = await self._idle(file_reads.IdleFilesQuery.TO_HAND_OVER, (self._hand_over_cursor,))
        self._hand_over_cursor = files[-1].file_id if len(files) == self._limit else -1
        by_target: dict[int, list[FileFacts]] = defaultdict(list)
        for facts in files:
            target = ownership.next_owner(facts.owner_ids, self.coordinator_id)
            assert target is not None  # not the last owner
            by_target[target].append(facts)
        now_ms = self._clock.now_ms()
        for target, handed in by_target.items():
            backoff = self._target_backoff[target]
            if not backoff.ready(now_ms):
                continue
            try:
                for step in steps(handed, self._step):
                    started_ms = self._clock.monotonic_ms()
                    await self._peers.hand_over(self.coordinator_id, target, step, self._timeout_s)
                    reach("handover.after_peer")  # the next owner has the files, this one not yet forgotten them
                    refs = [FileRef(f.file_id, f.object_key) for f in step]
                    counts.handed_over += await self._apply(Operation(ownership.check_handed_over, tuple(refs)))
                    await self._pace(started_ms)
                backoff.succeeded()
            except (PeerError, TimeoutError) as error:
                self._failed(counts, "hand_over", f"hand-over to coordinator {target}", backoff, error)

    # ------------------------------------------------------------------ 2. files nobody will hand over

    async def _take_unclaimed(self, counts: CycleCounts) -> None:
        now_ms = self._clock.now_ms()
        if now_ms < self._next_probe_pass_ms or not self._probe_backoff.ready(now_ms):
            return
        committed_before = now_ms - self._settings.file_handover_probe_delay_ms
        files = await self._idle(file_reads.IdleFilesQuery.AWAITING_OWNERSHIP, (committed_before, self._probe_cursor))
        if len(files) == self._limit:
            self._probe_cursor = files[-1].file_id
        else:
            # A pass is over: each waiting file is asked about at most once per probe delay.
            self._probe_cursor = -1
            self._next_probe_pass_ms = now_ms + max(
                self._settings.file_handover_probe_delay_ms, self._settings.file_worker_interval_ms
            )
        # Grouped by the owner just before this one (the first owner owns a file from its commit: none to ask).
        by_previous: dict[int, list[FileFacts]] = defaultdict(list)
        for facts in files:
            position = facts.owner_ids.index(self.coordinator_id)
            if position:
                by_previous[facts.owner_ids[position - 1]].append(facts)
        try:
            for previous, waiting in by_previous.items():
                for step in steps(waiting, self._step):
                    started_ms = self._clock.monotonic_ms()
                    counts.taken += await self._probe_step(previous, step)
                    await self._pace(started_ms)
            self._probe_backoff.succeeded()
        except (PeerError, TimeoutError) as error:
            self._next_probe_pass_ms = 0
            self._failed(counts, "probe", "asking the owners before", self._probe_backoff, error)

    async def _probe_step(self, previous: int, waiting: Sequence[FileFacts]) -> int:
        """Asks the owners before about these files; takes those none of them knows. How many it took.

        The owner just before (`previous`, the same for the step's files) is asked first, in one call, and the
        owners further before only about the files it does not know, grouped by those owners. After a consolidation
        job empties a file on all its owners at once, each of them but the first waits for the chain and probes,
        and the one just before it nearly always still knows the file (it holds it until it has handed it on, to
        this coordinator at last); asking all the owners before cost a lookup per owner before, and a call per
        distinct list of them (owner lists are permuted per file), each probe pass. It decides as asking all at
        once did: a file is taken only if none of the owners before knows it. The answers are of two moments, as
        they already were when the owners before are led on several nodes, and that is safe: an owner before with
        a live batch in the file knows it from its commit until after it has handed the file on, so it answers
        known whenever it is asked.
        """
        timeout_s = self._timeout_s
        known = await self._peers.known_files((previous,), [f.object_key for f in waiting], timeout_s)
        further: dict[tuple[int, ...], list[FileFacts]] = defaultdict(list)  # owners further before -> their files
        for facts in waiting:
            if not known[facts.object_key]:
                position = facts.owner_ids.index(self.coordinator_id)
                further[tuple(facts.owner_ids[: position - 1])].append(facts)
        unknown_keys: set[str] = set()  # to none of the owners before
        for owners, asked in further.items():
            if owners:
                answer = await self._peers.known_files(owners, [f.object_key for f in asked], timeout_s)
                asked = [f for f in asked if not answer[f.object_key]]
            unknown_keys.update(f.object_key for f in asked)
        unclaimed = [FileRef(f.file_id, f.object_key) for f in waiting if f.object_key in unknown_keys]
        if not unclaimed:
            return 0
        taken = await self._apply(Operation(ownership.check_take_files, tuple(unclaimed)))
        # The check takes only files still not owned here: one handed over since the cycle listed it (the owner
        # before then forgot it, so it answered unknown) is not taken again, and not counted.
        if taken:
            log.info(
                "coordinator %d: took %d files no owner before it knows (commits that missed them)",
                self.coordinator_id, taken,
            )  # fmt: skip
        return taken

    # ------------------------------------------------------------------ 3. and 4. deletion

    async def _schedule_deletions(self, counts: CycleCounts) -> None:
        files = await self._idle(file_reads.IdleFilesQuery.TO_SCHEDULE, ())
        for step in steps(files, self._step):
            started_ms = self._clock.monotonic_ms()
            refs = [FileRef(f.file_id, f.object_key) for f in step]
            schedule = DeletionSchedule(tuple(refs), self._settings.file_deletion_grace_period_ms)
            counts.scheduled += await self._apply(Operation(_check_schedule_deletions, schedule))
            await self._pace(started_ms)

    async def _delete_due(self, counts: CycleCounts) -> None:
        now_ms = self._clock.now_ms()
        if not self._store_backoff.ready(now_ms):
            return
        files = await self._idle(file_reads.IdleFilesQuery.DUE_FOR_DELETION, (now_ms,))
        for step in steps(files, self._step):
            started_ms = self._clock.monotonic_ms()
            if not await self._delete_step(counts, step):
                return  # the store failed: the rest waits for the backoff
            await self._pace(started_ms)
        if files:
            self._store_backoff.succeeded()

    async def _delete_step(self, counts: CycleCounts, files: Sequence[FileFacts]) -> bool:
        """Deletes these objects, then records those gone as deleted; False if the store failed any."""
        by_key = {f.object_key: f for f in files}
        try:
            outcome = await asyncio.to_thread(self._store.delete, list(by_key))
        except ObjectStoreError as error:
            self._failed(counts, "delete", "deleting objects", self._store_backoff, error)
            return False
        if outcome.deleted:
            refs = [FileRef(by_key[key].file_id, key) for key in outcome.deleted]
            counts.deleted += await self._apply(Operation(ownership.check_files_deleted, tuple(refs)))
        if outcome.failed:
            key, why = next(iter(outcome.failed.items()))
            self._failed(
                counts,
                "delete",
                "deleting objects",
                self._store_backoff,
                ObjectStoreError(f"{len(outcome.failed)} of {len(by_key)} deletions failed, e.g. {key!r}: {why}"),
            )
            return False
        return True

    async def _pace(self, started_ms: int) -> None:
        """After a step: yields to the node's other work, and pauses so that steps keep to their duty share."""
        pause = pause_ms(self._clock.monotonic_ms() - started_ms, self._settings.file_worker_duty_percent)
        if pause > 0:
            await self._clock.sleep_ms(pause)
        else:
            await asyncio.sleep(0)
        if not self.leads():
            # A cycle now lasts for its steps and pauses: one that outlives its leadership stops here.
            raise CoordinatorUnavailable(
                ErrorCode.NOT_COORDINATOR, f"coordinator {self.coordinator_id} is no longer led here"
            )

    async def _apply(self, operation: Operation[RequestT, int]) -> int:
        return await self._submit(operation, "the file operation")
