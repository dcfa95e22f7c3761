"""A coordinator's snapshots (DESIGN §6): when to take one, taking it, pruning the log below it.

Copies run on a thread of their own so that neither the event loop nor the
log writer waits for them; `files_lock` keeps a copy, a state check and a
reload of the state from overlapping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, final

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable
from coordinator.config.settings import Settings
from coordinator.machine.state.integrity import IntegrityReport, check_integrity
from coordinator.machine.state.reads import StateDamaged
from coordinator.runtime.shard.loading import Loaded, is_state_damage
from coordinator.runtime.shard.pruning import PruneResult, delete_snapshots, prune_log
from snapshot.snapshots import (
    SnapshotCheck,
    SnapshotManifest,
    check_snapshots,
    list_snapshots,
    snapshot_directory,
    take_snapshot,
)

log = logging.getLogger(__name__)


@final
@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    manifest: SnapshotManifest
    pruned: PruneResult


class SnapshotSubject(Protocol):
    """The coordinator as its snapshots see it."""

    @property
    def loaded(self) -> Loaded | None: ...

    def require_active(self) -> None: ...

    def report_damage(self, error: Exception) -> None: ...


@final
class SnapshotScheduler:
    """Takes a snapshot every N bytes of log or T time ("changed and interval passed"), and on demand."""

    def __init__(
        self,
        coordinator_id: int,
        directory: Path,
        settings: Settings,
        clock: Clock,
        log_executor: Executor,
        subject: SnapshotSubject,
        executor: Executor,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._directory = directory
        self._settings = settings
        self._clock = clock
        self._log_executor = log_executor  # pruning deletes segments on the log's own thread
        self._subject = subject
        self._snapshots = snapshot_directory(directory)
        self._executor = executor  # copies and checks, on a thread of their own beside the log's
        self.files_lock = asyncio.Lock()  # a copy never reads a state being reopened or restored
        self._wakeup = asyncio.Event()
        self._requested = False  # a snapshot is wanted now (a follower asked and none here verifies)
        self._closing = False
        self._last_snapshot: SnapshotManifest | None = None
        self._last_snapshot_at_ms = 0
        self._log_bytes_at_snapshot = 0  # the log's appended_bytes when the last snapshot was taken

    @property
    def last_snapshot(self) -> SnapshotManifest | None:
        return self._last_snapshot

    def request_stop(self) -> None:
        """Ends `run` after the snapshot in progress, if any (the node's supervisor asks, then waits)."""
        self._closing = True
        self._wakeup.set()

    def wake(self) -> None:
        self._wakeup.set()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)

    def note_newest_snapshot(self, loaded: Loaded) -> None:
        """Starts the triggers from the newest snapshot on disk, counting the log tail after it (blocking)."""
        newest = next(iter(list_snapshots(self._snapshots)), None)
        self._last_snapshot = newest
        self._last_snapshot_at_ms = newest.created_at_ms if newest else self._clock.now_ms()
        end = newest.snapshot_id.end_offset if newest else loaded.position.start_offset
        metadata_log = loaded.metadata_log
        self._log_bytes_at_snapshot = metadata_log.appended_bytes - metadata_log.bytes_after(end)

    def request_now(self) -> None:
        """A snapshot is wanted at once (none here verifies and a follower needs one): the worker takes it."""
        self._requested = True
        self._wakeup.set()

    def log_grew(self) -> None:
        """After each log write: wakes the worker when enough log was written since the last snapshot."""
        if self._bytes_due():
            self._wakeup.set()

    # ------------------------------------------------------------------ triggers

    def _bytes_due(self) -> bool:
        interval = self._settings.snapshot_interval_bytes
        loaded = self._subject.loaded
        return (
            interval > 0
            and loaded is not None
            and loaded.metadata_log.appended_bytes - self._log_bytes_at_snapshot >= interval
        )

    def _time_left_ms(self) -> int | None:
        """Milliseconds of the clock until the time trigger, None without one."""
        interval = self._settings.snapshot_interval_ms
        if interval <= 0:
            return None
        return max(0, self._last_snapshot_at_ms + interval - self._clock.now_ms())

    def _due(self) -> bool:
        loaded = self._subject.loaded
        try:
            self._subject.require_active()
        except CoordinatorUnavailable:
            return False
        if loaded is None:
            return False
        if self._bytes_due() or self._requested:
            return True
        changed = (
            self._last_snapshot is None or loaded.store.applied_offset != self._last_snapshot.snapshot_id.end_offset
        )
        return changed and self._time_left_ms() == 0

    async def run(self) -> None:
        """Waits for "enough log or time since the last snapshot" or close, and takes one.

        Run by the node's worker supervisor (the SNAPSHOTS worker, coordinator/runtime/worker_specs.py): a snapshot
        that fails raises to it, which counts the failure and runs this again after its backoff (best effort: the
        log still holds everything). A coordinator leaving service meanwhile is no failure: it looks again later.
        """
        while not self._closing:
            wait_ms = self._time_left_ms()
            if self._requested:  # wanted while the coordinator did not serve: look again, or it waits for the next
                retry_ms = self._settings.snapshot_retry_backoff_ms  # trigger, which may be never
                wait_ms = retry_ms if wait_ms is None else min(wait_ms, retry_ms)
            await self._clock.wait_event(self._wakeup, wait_ms)
            self._wakeup.clear()
            if self._closing or not self._due():
                if self._time_left_ms() == 0:  # nothing applied since: look again one interval later
                    self._last_snapshot_at_ms = self._clock.now_ms()
                continue
            try:
                await self.create_snapshot()
            except CoordinatorUnavailable:
                continue  # out of service since `_due` looked: a requested one is looked at again after the wait
            self._requested = False

    # ------------------------------------------------------------------ on demand

    async def create_snapshot(self) -> SnapshotTaken:
        """Snapshots the applied state now (copy on the snapshot thread), then prunes (on the log's thread)."""
        self._subject.require_active()
        loop = asyncio.get_running_loop()
        async with self.files_lock:
            self._subject.require_active()
            loaded = self._subject.loaded
            assert loaded is not None
            log_bytes_before = loaded.metadata_log.appended_bytes
            now_ms = self._clock.now_ms()
            started = time.monotonic()
            try:
                manifest = await loop.run_in_executor(
                    self._executor,
                    take_snapshot,
                    self._directory / "state.sqlite",
                    self._snapshots,
                    self._settings.snapshot_copy_step_pages,
                    now_ms,
                    self._settings.snapshot_copy_max_bytes_per_second,
                    self._settings.state_page_checksums,
                )
            except Exception as error:
                if is_state_damage(error):  # the copy read a damaged page: the state is rebuilt, the copy dropped
                    self._subject.report_damage(error)
                raise
            copied_s = time.monotonic() - started
            self._last_snapshot, self._last_snapshot_at_ms = manifest, now_ms
            self._log_bytes_at_snapshot = log_bytes_before
            pruned = await loop.run_in_executor(
                self._log_executor,
                prune_log,
                self._snapshots,
                loaded.metadata_log,
                self._settings.snapshot_retained_count,
            )
            # Freeing a state-sized file takes tens of milliseconds: on the snapshot thread, not the log's.
            await loop.run_in_executor(self._executor, delete_snapshots, self._snapshots, pruned.deleted_snapshots)
        log.info(
            "coordinator %d: snapshot %s (%d bytes) in %.2fs; log starts at %d (%d segments, %d snapshots pruned)",
            self.coordinator_id, manifest.snapshot_id, manifest.size_bytes, copied_s, pruned.log_start_offset,
            len(pruned.deleted_segments), len(pruned.deleted_snapshots),
        )  # fmt: skip
        return SnapshotTaken(manifest, pruned)

    async def check_state(self) -> IntegrityReport:
        """Checks the state file now (on the snapshot thread); a damaged one takes the coordinator out to rebuild it."""
        self._subject.require_active()
        loop = asyncio.get_running_loop()
        async with self.files_lock:  # never while the state is being reopened or restored
            self._subject.require_active()
            report = await loop.run_in_executor(self._executor, check_integrity, self._directory / "state.sqlite")
        log.info(
            "coordinator %d: checked state.sqlite (%d MB) on demand in %.2fs: %s",
            self.coordinator_id, report.size_bytes // 1_000_000, report.seconds, report.problem or "ok",
        )  # fmt: skip
        if report.problem is not None:
            self._subject.report_damage(StateDamaged(report.problem))
        return report

    async def list_snapshots(self, verify: bool) -> list[SnapshotCheck]:
        """The coordinator's snapshots, newest first; with `verify`, each read and checked (off the loop)."""
        if not verify:
            return [SnapshotCheck(m, None) for m in list_snapshots(self._snapshots)]
        return await asyncio.get_running_loop().run_in_executor(self._executor, check_snapshots, self._snapshots)
