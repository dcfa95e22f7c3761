"""The scrub: a background pass per coordinator over what it keeps at rest, at a bounded rate (TigerBeetle's grid
scrubber; issue #40). What a pass reads is in `scrub_reads.py`; this is when, how fast, and what a finding does.

A pass starts `diskless.coordinator.scrub.interval.ms` after the last one ended (or after the start) and reads
`diskless.coordinator.scrub.step.bytes` at a time on a thread of its own, never on the event loop nor on the
coordinator's log thread; after each step it waits so that the bytes read stay within
`diskless.coordinator.scrub.bytes.per.second` of the time since the pass began, on the node's clock (0: no
background pass; one asked for, `CoordinatorShard.scrub`, then reads unpaced).
Each step holds the coordinator's `files_lock` (as a snapshot copy and a load do), so it never reads a file
being restored, set aside or pruned, and runs only while the coordinator serves.

What a finding does is what a read that met the damage does:
- a state page: the coordinator is told of damage (`report_damage`), goes out of service, sets the state aside
  and rebuilds it from the newest snapshot that verifies plus the log, as after a refused read;
- a sealed log segment, in a cluster: the same report, which for damage in the log means leaving the ISR,
  setting the files aside and repairing from a healthy replica (`repair.py`), as when a follower's fetch meets
  it on the leader. Alone there is no copy to repair from, and the load of a node alone never reads a sealed
  segment below its applied offset: the coordinator goes on serving, the damage is reported (log, metric,
  statistics), and a snapshot is taken at once if the damage lies above the newest one, so that rebuilding the
  state never needs the damaged records (the operator's `diskless log recover` refuses damage below the newest
  snapshot for the same reason: pruning removes it);
- a snapshot: set aside into `damaged-<ms>/` (a restore would skip it, logged; it would also count among the
  snapshots kept and hold the log below it) and a new one taken at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, final

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.runtime.log.damage import CorruptLogError
from coordinator.runtime.replication.role import ReplicaRole
from coordinator.runtime.shard.damaged_files import set_snapshot_aside
from coordinator.runtime.shard.scrub_reads import (
    LOG,
    SNAPSHOT,
    STATE,
    ScrubFinding,
    ScrubStep,
    manifest_file,
    scrub_pass,
)
from snapshot.snapshots import list_snapshots, snapshot_directory

log = logging.getLogger(__name__)


class ScrubSubject(Protocol):
    """The coordinator as its scrub sees it (its lifecycle)."""

    @property
    def role(self) -> ReplicaRole | None: ...

    def require_active(self) -> None: ...

    def report_damage(self, error: Exception) -> None: ...


@final
@dataclass(frozen=True, slots=True)
class ScrubReport:
    """One pass: what it read, how long it took on the node's clock, what it found, and whether it went through."""

    read_bytes: int
    duration_ms: int
    findings: tuple[ScrubFinding, ...]
    complete: bool  # False: ended early (the coordinator out of service, the node closing, damage handed on)


@final
@dataclass(frozen=True, slots=True)
class ScrubStatistics:
    passes: int  # passes ended (complete or not) since the node started
    scrubbed_bytes: int
    damage_found: int
    last_pass_ms: int  # -1 before the first pass ends
    last_pass_bytes: int
    last_damage: str  # the last finding, for the operator (empty if none)


@final
class Scrubber:
    def __init__(
        self,
        coordinator_id: int,
        directory: Path,
        settings: Settings,
        clock: Clock,
        executor: Executor,
        subject: ScrubSubject,
        files_lock: asyncio.Lock,
        request_snapshot: Callable[[], None],
        metrics: Metrics | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._directory = directory
        self._settings = settings
        self._clock = clock
        self._executor = executor  # the scrub's own thread
        self._subject = subject
        self._files_lock = files_lock
        self._request_snapshot = request_snapshot
        self._metrics = metrics or Metrics()
        self._stopping = asyncio.Event()
        self._passes = self._scrubbed_bytes = self._damage_found = self._last_pass_bytes = 0
        self._last_pass_ms = -1
        self._last_damage = ""

    def statistics(self) -> ScrubStatistics:
        return ScrubStatistics(
            self._passes, self._scrubbed_bytes, self._damage_found, self._last_pass_ms, self._last_pass_bytes,
            self._last_damage,
        )  # fmt: skip

    @property
    def background(self) -> bool:
        """Whether the background pass runs (`run`, under the node's worker supervisor); 0 bytes a second: none."""
        return self._settings.scrub_bytes_per_second > 0

    def request_stop(self) -> None:
        """Ends `run`, and a pass in progress after its step (the node's supervisor asks, then waits)."""
        self._stopping.set()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)

    async def run(self) -> None:
        """A pass every interval until stopped. A pass that fails raises to the supervisor (the SCRUB worker,
        coordinator/runtime/worker_specs.py), which counts it and runs this again after its backoff: best effort,
        every read still verifies what it reads."""
        while not self._stopping.is_set():
            await self._clock.wait_event(self._stopping, self._settings.scrub_interval_ms)
            if self._stopping.is_set():
                return
            await self.run_pass()

    async def run_pass(self) -> ScrubReport:
        """One paced pass over the coordinator's files, handing each finding on as a read meeting it would."""
        loop = asyncio.get_running_loop()
        started_ms = self._clock.monotonic_ms()
        steps = scrub_pass(self._directory, self._settings.scrub_step_bytes, self._settings.state_page_checksums)
        read_bytes, findings, complete = 0, list[ScrubFinding](), False
        try:
            while not self._stopping.is_set():
                async with self._files_lock:
                    try:
                        self._subject.require_active()
                    except CoordinatorUnavailable:
                        break  # loading, failed or repairing: the next pass reads what it then holds
                    step: ScrubStep | None = await loop.run_in_executor(self._executor, _next_step, steps)
                    if step is not None and step.finding is not None:
                        findings.append(step.finding)
                        if not await self._hand_on(step.finding):
                            read_bytes += step.read_bytes
                            self._count(step.read_bytes)
                            break
                if step is None:
                    complete = True
                    break
                read_bytes += step.read_bytes
                self._count(step.read_bytes)
                await self._pace(started_ms, read_bytes)
        finally:
            await loop.run_in_executor(self._executor, steps.close)
        duration_ms = self._clock.monotonic_ms() - started_ms
        self._passes += 1
        self._last_pass_ms, self._last_pass_bytes = duration_ms, read_bytes
        self._metrics.scrub_passes.labels(str(self.coordinator_id)).observe(duration_ms / 1000)
        log.info(
            "coordinator %d: scrub pass %s: %d bytes in %.1f s, %d damaged",
            self.coordinator_id, "done" if complete else "ended early", read_bytes, duration_ms / 1000, len(findings),
        )  # fmt: skip
        return ScrubReport(read_bytes, duration_ms, tuple(findings), complete)

    def _count(self, read_bytes: int) -> None:
        self._scrubbed_bytes += read_bytes
        self._metrics.scrubbed_bytes.labels(str(self.coordinator_id)).inc(read_bytes)

    async def _pace(self, started_ms: int, read_bytes: int) -> None:
        """Waits until `read_bytes` is within the rate bound of the time since the pass began (no bound at 0: a
        pass asked for while the background scrub is off)."""
        if self._settings.scrub_bytes_per_second <= 0:
            return
        due_ms = -(-read_bytes * 1000 // self._settings.scrub_bytes_per_second)  # rounded up: never ahead
        wait_ms = due_ms - (self._clock.monotonic_ms() - started_ms)
        if wait_ms > 0:
            await self._clock.wait_event(self._stopping, wait_ms)

    async def _hand_on(self, finding: ScrubFinding) -> bool:
        """Reports a finding and starts its repair (`files_lock` held); False when the pass must end here."""
        self._damage_found += 1
        self._last_damage = f"{finding.kind}: {finding.problem}"
        self._metrics.scrub_damage.labels(str(self.coordinator_id), finding.kind).inc()
        in_cluster = self._subject.role is not None
        if finding.kind == STATE or (finding.kind == LOG and in_cluster):
            log.error(
                "coordinator %d: the scrub found damage no read had met: %s", self.coordinator_id, finding.problem
            )
            self._subject.report_damage(finding.error)
            return False  # the files are about to be rebuilt or set aside: the next pass reads the new ones
        if finding.kind == SNAPSHOT:
            assert finding.manifest is not None
            folder = await asyncio.get_running_loop().run_in_executor(
                self._executor,
                set_snapshot_aside,
                self._directory,
                [finding.manifest.data_path, manifest_file(finding.manifest)],
                self._clock.now_ms(),
                self._settings.damaged_retained_count,
            )
            log.error(
                "coordinator %d: the scrub found snapshot %s damaged (%s): moved to %s; taking a new one",
                self.coordinator_id, finding.manifest.snapshot_id, finding.problem, folder.name,
            )  # fmt: skip
            self._request_snapshot()
            return True
        return await self._log_damage_alone(finding)

    async def _log_damage_alone(self, finding: ScrubFinding) -> bool:
        """Alone: reported, and a snapshot taken at once if the damage lies above the newest one."""
        assert isinstance(finding.error, CorruptLogError) and finding.error.damage is not None
        damaged_offset = finding.error.damage.expected_offset
        newest = await asyncio.get_running_loop().run_in_executor(
            self._executor, list_snapshots, snapshot_directory(self._directory)
        )
        needed = not newest or newest[0].snapshot_id.end_offset <= damaged_offset
        log.error(
            "coordinator %d: the scrub found a sealed log segment damaged: %s. %s",
            self.coordinator_id, finding.problem,
            "Taking a snapshot now, so that rebuilding the state never needs the damaged records"
            if needed else "The newest snapshot ends past it: a rebuild does not need it, and pruning removes it",
        )  # fmt: skip
        if needed:
            self._request_snapshot()
        return True


def _next_step(steps: Generator[ScrubStep, None, None]) -> ScrubStep | None:
    return next(steps, None)
