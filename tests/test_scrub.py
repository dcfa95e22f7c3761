"""The scrub (issue #40 item 2): one pass finds damage no read had met, in a sealed log segment, an older snapshot
and a state page, and hands it on as a read meeting it would; its rate bound holds on a fake clock.

Seeded: the byte and bit of each flip come from DISKLESS_SCRUB_SEED (printed), which replays a failure.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from coordinator.base.clock import ManualClock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.executors import InlineExecutor
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.runtime.log.damage import CorruptLogError
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.replication.role import ReplicaRole
from coordinator.runtime.shard.availability import ShardState
from coordinator.runtime.shard.damaged_files import damaged_folders
from coordinator.runtime.shard.scrub_reads import LOG, SNAPSHOT, STATE, ScrubStep, scrub_pass
from coordinator.runtime.shard.scrubber import Scrubber
from protos import coordinator_pb2 as pb
from snapshot.snapshots import list_snapshots, snapshot_directory
from tests.in_process import InProcessNode, wait_until
from tests.storage_faults import COORDINATORS, SETTINGS, check_node, flip_bit, in_process_repairs, load, settle
from tests.test_storage_fault_sweep import PAGE_BYTES, first_page_of

SCRUB_SETTINGS = {**SETTINGS, "diskless.coordinator.scrub.bytes.per.second": "0"}  # passes asked for, unpaced


def seeded() -> random.Random:
    seed = int(os.environ.get("DISKLESS_SCRUB_SEED", random.randrange(2**32)))
    print(f"seed {seed} (replay: DISKLESS_SCRUB_SEED={seed})")
    return random.Random(seed)


def flip_somewhere(path: Path, rng: random.Random, low: int = 0, high: int | None = None) -> int:
    offset = rng.randrange(low, high if high is not None else path.stat().st_size)
    flip_bit(path, offset, rng.randrange(8))
    return offset


def test_one_pass_finds_a_flipped_bit_in_a_sealed_segment_an_older_snapshot_and_a_state_page_nothing_reads(
    tmp_path: Path,
) -> None:
    """Each flip is where no start-up nor any read goes (a sealed segment below the applied offset, the older
    snapshot, a page of the batches no FindBatches asked for): nothing reports it, and one pass finds all three.
    The state is set aside and rebuilt (every answer right after), the snapshot set aside and replaced, the segment
    reported with a snapshot taken above it (alone, no replica to repair from)."""
    rng = seeded()
    node = InProcessNode(tmp_path / "data", coordinators=COORDINATORS, settings=SCRUB_SETTINGS).start()
    try:
        model = load(node)
    finally:
        node.stop()
    directory = tmp_path / "data" / "coordinator-0"
    segments = sorted((directory / "log").glob("*.log"))
    assert len(segments) >= 2, segments
    sealed = rng.choice(segments[:-1])
    older = list_snapshots(snapshot_directory(directory))[1]
    state = directory / "state.sqlite"
    page = first_page_of(state, "batches")
    print(
        f"flipped {sealed.name} at byte {flip_somewhere(sealed, rng)}, {older.data_path.name} at byte "
        f"{flip_somewhere(older.data_path, rng)}, state page {page} at byte "
        f"{flip_somewhere(state, rng, (page - 1) * PAGE_BYTES, page * PAGE_BYTES - 8)}"
    )
    node = InProcessNode(tmp_path / "data", coordinators=COORDINATORS, settings=SCRUB_SETTINGS).start()
    try:
        shard = node.node.shards[0]
        assert shard.state is ShardState.ACTIVE and not [line for line in node.output if " ERROR " in line], (
            "a start met the damage: the test must place it where nothing reads"
        )
        report = node.loop.run(shard.scrub())
        kinds = {finding.kind for finding in report.findings}
        assert kinds == {LOG, SNAPSHOT, STATE}, report
        assert not report.complete  # the state's damage ends the pass: the state is being rebuilt
        assert shard.scrub_statistics().damage_found == 3
        metrics = node.node.metrics.render().decode()
        for kind in (LOG, SNAPSHOT, STATE):
            assert f'diskless_scrub_damage_total{{coordinator="0",kind="{kind}"}} 1.0' in metrics, metrics
        settle(node, "after the scrub")
        wait_until(lambda: shard.state is ShardState.ACTIVE, "the state rebuilt")
        assert list(directory.glob("state.sqlite.corrupt-*")), "the damaged state set aside"
        after = check_node(node, model, "after the scrub", lambda: settle(node, "after"), in_process_repairs(node))
        assert after.outcome in (
            "intact",
            "repaired",
        )
        (folder,) = damaged_folders(directory)
        assert (folder / older.data_path.name).exists(), "the damaged snapshot kept for the operator"
        node.advance(node.node.settings.snapshot_retry_backoff_ms)  # its first try met the state being rebuilt
        wait_until(
            lambda: (
                older.snapshot_id not in [m.snapshot_id for m in list_snapshots(snapshot_directory(directory))]
                and len(list_snapshots(snapshot_directory(directory))) >= 2
            ),
            "a new snapshot in place of the damaged one",
        )
        output = "".join(node.output)
        assert "the scrub found a sealed log segment damaged" in output, output
        again = node.loop.run(shard.scrub())
        assert {finding.kind for finding in again.findings} <= {LOG}, again  # the segment waits for pruning
        assert again.complete
        (described,) = node.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(coordinator_ids=[0])).coordinators
        assert described.scrub_damage_found == 3 + len(again.findings), described
        assert described.last_scrub_damage.startswith(LOG if again.findings else STATE), described
    finally:
        node.stop()


def test_a_pass_over_sound_files_finds_nothing_and_reads_every_byte(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=COORDINATORS, settings=SCRUB_SETTINGS).start()
    try:
        load(node)
        shard = node.node.shards[0]
        report = node.loop.run(shard.scrub())
        assert report.complete and not report.findings, report
        directory = tmp_path / "data" / "coordinator-0"
        sealed = sorted((directory / "log").glob("*.log"))[:-1]
        snapshots = list(snapshot_directory(directory).glob("*.sqlite"))
        expected = sum(p.stat().st_size for p in [*sealed, *snapshots])
        state_bytes = (directory / "state.sqlite").stat().st_size
        assert expected < report.read_bytes <= expected + state_bytes, (report.read_bytes, expected, state_bytes)
        (described,) = node.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(coordinator_ids=[0])).coordinators
        assert described.scrubbed_bytes == report.read_bytes and described.scrub_damage_found == 0, described
        assert described.last_scrub_pass_ms >= 0 and not described.last_scrub_damage
    finally:
        node.stop()


# ---------------------------------------------------------------------- the rate bound, on a fake clock


class Subject:
    def __init__(self, role: ReplicaRole | None = None) -> None:
        self.role = role
        self.reported: list[Exception] = []
        self.active = True

    def require_active(self) -> None:
        if not self.active:
            raise CoordinatorUnavailable(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "loading")

    def report_damage(self, error: Exception) -> None:
        self.reported.append(error)


class RecordingExecutor(Executor):
    """Runs steps inline and notes, for each, the clock time it began and the bytes it read."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.steps: list[tuple[int, int]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        started = self.clock.now_ms()
        future = InlineExecutor().submit(fn, *args, **kwargs)
        result = future.result()
        if isinstance(result, ScrubStep):
            self.steps.append((started, result.read_bytes))
        return future


def write_log(directory: Path, frames: int, segment_bytes: int) -> None:
    metadata_log = MetadataLog(directory / "log", segment_bytes)
    for offset in range(frames):
        metadata_log.append(
            encode_frame(offset, 1, 1, b"\x0a\x02" + bytes([offset % 256]) * 2 + b"x" * 300), offset + 1, 1
        )
    metadata_log.close()


def scrubber(directory: Path, clock: ManualClock, executor: Executor, subject: Subject, **changes: Any) -> Scrubber:
    settings = replace(Settings(), **changes)
    return Scrubber(0, directory, settings, clock, executor, subject, asyncio.Lock(), lambda: None, Metrics())


async def run_on_clock(clock: ManualClock, coroutine: Any) -> Any:
    """Runs `coroutine`, moving the fake clock to each next wake-up whenever it waits on it."""
    task = asyncio.ensure_future(coroutine)
    while not task.done():
        await asyncio.sleep(0)
        wake_up = clock.next_wake_up_ms()
        if wake_up is not None and not task.done():
            clock.advance(max(0, wake_up - clock.now_ms()))
    return task.result()


def test_a_pass_never_reads_ahead_of_its_rate_on_a_fake_clock(tmp_path: Path) -> None:
    """Before each step, the bytes already read are within `rate x time since the pass began`; the pass takes the
    time its bytes need at that rate (and not much more: it is paced, not stalled)."""
    write_log(tmp_path, 400, 16 * 1024)
    clock = ManualClock(0)
    executor = RecordingExecutor(clock)
    rate, step = 50_000, 4096
    scrub = scrubber(tmp_path, clock, executor, Subject(), scrub_bytes_per_second=rate, scrub_step_bytes=step)
    report = asyncio.run(run_on_clock(clock, scrub.run_pass()))
    assert report.complete and not report.findings and report.read_bytes > 5 * step, report
    read = 0
    for started_ms, step_bytes in executor.steps:
        assert read * 1000 <= rate * started_ms, (read, started_ms)  # never ahead of the rate
        assert step_bytes <= step
        read += step_bytes
    assert read == report.read_bytes
    assert (
        report.read_bytes * 1000 // rate
        <= report.duration_ms
        <= report.read_bytes * 1000 // rate + 1000 * step // rate + 1
    )


def test_no_background_pass_at_a_rate_of_0(tmp_path: Path) -> None:
    """The coordinator starts its SCRUB worker only for a background scrub (tests/test_worker_registry.py checks
    that a node at rate 0 runs none)."""
    clock = ManualClock(0)
    assert not scrubber(tmp_path, clock, InlineExecutor(), Subject(), scrub_bytes_per_second=0).background
    assert scrubber(tmp_path, clock, InlineExecutor(), Subject()).background


def test_a_background_pass_runs_every_interval_on_the_clock(tmp_path: Path) -> None:
    write_log(tmp_path, 100, 8 * 1024)
    clock = ManualClock(0)

    async def passes() -> int:
        scrub = scrubber(tmp_path, clock, InlineExecutor(), Subject(), scrub_interval_ms=10_000)
        running = asyncio.create_task(scrub.run())  # as the node's worker supervisor runs it
        for _ in range(50):
            await asyncio.sleep(0)
        assert scrub.statistics().passes == 0  # the first one an interval after the start
        while clock.now_ms() < 25_000:
            await asyncio.sleep(0)
            clock.advance(100)
        scrub.request_stop()
        await running
        return scrub.statistics().passes

    assert asyncio.run(passes()) == 2


def test_in_a_cluster_a_damaged_sealed_segment_is_reported_as_a_read_meeting_it_would(tmp_path: Path) -> None:
    """A replica's report of damage in its log is what makes it leave the ISR and repair from a healthy replica
    (tests/test_simulation_repair.py); alone the coordinator goes on and a snapshot is asked for instead."""
    write_log(tmp_path, 100, 8 * 1024)
    segment = sorted((tmp_path / "log").glob("*.log"))[0]
    flip_bit(segment, 1000, 2)
    role = ReplicaRole.__new__(ReplicaRole)  # only its presence matters here: in a cluster
    subject = Subject(role)
    clock = ManualClock(0)
    report = asyncio.run(run_on_clock(clock, scrubber(tmp_path, clock, InlineExecutor(), subject).run_pass()))
    assert [f.kind for f in report.findings] == [LOG] and not report.complete
    (error,) = subject.reported
    assert isinstance(error, CorruptLogError) and error.damage is not None
    assert error.damage.segment_path == segment.absolute()

    alone = Subject()
    snapshots: list[int] = []
    scrub = Scrubber(
        0, tmp_path, Settings(), clock, InlineExecutor(), alone, asyncio.Lock(), lambda: snapshots.append(1)
    )
    report = asyncio.run(run_on_clock(clock, scrub.run_pass()))
    assert [f.kind for f in report.findings] == [LOG] and report.complete
    assert not alone.reported and snapshots == [1]  # no snapshot above the damage yet: one is taken


def test_a_pass_ends_while_the_coordinator_does_not_serve(tmp_path: Path) -> None:
    write_log(tmp_path, 100, 8 * 1024)
    subject = Subject()
    subject.active = False
    clock = ManualClock(0)
    report = asyncio.run(run_on_clock(clock, scrubber(tmp_path, clock, InlineExecutor(), subject).run_pass()))
    assert not report.complete and report.read_bytes == 0


@pytest.mark.parametrize("step_bytes", [1, 100, 4096, 1 << 20])
def test_frames_split_across_steps_verify_whatever_the_step(tmp_path: Path, step_bytes: int) -> None:
    write_log(tmp_path, 60, 4 * 1024)
    steps = list(scrub_pass(tmp_path, step_bytes))
    assert not [s.finding for s in steps if s.finding is not None]
    sealed = sorted((tmp_path / "log").glob("*.log"))[:-1]
    assert sum(s.read_bytes for s in steps) == sum(p.stat().st_size for p in sealed)
