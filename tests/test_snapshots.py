"""Snapshots, pruning and recovery (DESIGN §6) on a real node and real files.

The node runs in the test's process (tests/in_process.py); the tests that kill it -9 or wait on
the snapshot timer's real time run `diskless serve`.

Taking: by log bytes, by time (only when something was applied), on demand, and as one consistent
point under steady commits. Pruning: the newest K snapshots stay and the log from the oldest of them.
Recovery: missing, truncated or corrupt SQLite, or SQLite behind the log start, is replaced by the
newest snapshot that verifies (a bad one falls back to the one before), then the log tail replays;
the result equals a replay of the whole log (I1).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import apsw
import pytest

from coordinator.base.clock import SystemClock
from coordinator.config.settings import Settings
from coordinator.machine.records import encode_batch, leader_change
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.shard import CoordinatorShard, LoadFailed
from coordinator.runtime.shard.log_replay import logical_dump, rebuild_from_log
from coordinator.runtime.shard.pruning import delete_snapshots, prune_log
from protos import admin_pb2 as admin
from snapshot import snapshots
from snapshot.durable_files import file_checksum
from snapshot.snapshots import list_snapshots, take_snapshot, verify_snapshot
from tests.harness import Broker, ServerProcess, describe_coordinators
from tests.in_process import InProcessNode
from tests.snapshot_helpers import (
    COORDINATORS,
    MANUAL_SNAPSHOTS,
    Committer,
    admin_stub,
    create_snapshots,
    delete_state,
    fill,
    link_segments,
    segment_bases,
    served,
    snapshot_names,
)


def start(tmp_path: Path, **settings: str) -> InProcessNode:
    return InProcessNode(
        tmp_path / "data", coordinators=COORDINATORS, settings={**MANUAL_SNAPSHOTS, **settings}
    ).start()


def start_process(tmp_path: Path, **settings: str) -> ServerProcess:
    return ServerProcess(
        tmp_path / "data", coordinators=COORDINATORS, settings={**MANUAL_SNAPSHOTS, **settings}
    ).start()


def stop_if_running(server: InProcessNode | ServerProcess) -> None:
    """Stops a node a failed test left running."""
    if isinstance(server, InProcessNode):
        if server.is_running():
            server.stop()
    elif server.process and server.process.poll() is None:
        server.kill()


def directory(server: InProcessNode | ServerProcess, coordinator_id: int) -> Path:
    return server.data_dir / f"coordinator-{coordinator_id}"


def topics_of(server: InProcessNode | ServerProcess, partitions: int = 6) -> dict[bytes, int]:
    return {Broker(server.stub, COORDINATORS).create_topic(f"snap-{i}", partitions): partitions for i in range(2)}


def wait_until(condition, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_snapshots_every_interval_bytes_keep_the_newest_k_and_prune_the_log_below_them(tmp_path: Path) -> None:
    server = start(
        tmp_path,
        **{"diskless.coordinator.snapshot.interval.bytes": "4096", "diskless.coordinator.snapshot.retained.count": "2"},
    )
    try:
        topics = topics_of(server)
        fill(Broker(server.stub, COORDINATORS), topics, 300)
        wait_until(lambda: all(c.log_start_offset > 0 for c in describe_coordinators(server.stub).values()))
        before = served(server, topics)
        assert server.stop() == 0
        on_disk = {}
        for coordinator_id in range(COORDINATORS):
            manifests = [n for n in snapshot_names(directory(server, coordinator_id)) if n.endswith(".manifest")]
            ends = sorted(int(n.split("-")[0]) for n in manifests)
            assert 1 <= len(ends) <= 2, manifests  # the newest K = 2 are kept
            bases = segment_bases(directory(server, coordinator_id))
            assert 0 < bases[0] <= ends[0], "the log must hold the oldest kept snapshot's tail"
            assert len(bases) == 1 or bases[1] > ends[0], f"segment {bases[0]} lies wholly below snapshot {ends[0]}"
            on_disk[coordinator_id] = (bases[0], ends[-1])
        server.start()
        for coordinator_id, description in describe_coordinators(server.stub).items():
            assert (description.log_start_offset, description.last_snapshot_end_offset) == on_disk[coordinator_id]
        assert served(server, topics) == before
    finally:
        stop_if_running(server)


@pytest.mark.slow
def test_snapshot_every_interval_ms_only_when_something_was_applied(tmp_path: Path) -> None:
    server = start_process(tmp_path, **{"diskless.coordinator.snapshot.interval.ms": "300"})
    try:
        fill(Broker(server.stub, COORDINATORS), topics_of(server, 2), 10)
        wait_until(
            lambda: all(
                c.last_snapshot_end_offset == c.applied_offset for c in describe_coordinators(server.stub).values()
            )
        )
        names = {i: snapshot_names(directory(server, i)) for i in range(COORDINATORS)}
        time.sleep(1.0)  # three intervals with nothing applied: no new snapshot
        assert {i: snapshot_names(directory(server, i)) for i in range(COORDINATORS)} == names
        assert server.stop() == 0
    finally:
        stop_if_running(server)


def test_on_demand_snapshots_under_steady_commits_are_consistent_points(tmp_path: Path) -> None:
    """Each snapshot equals a replay of the log up to its end offset, although commits never paused."""
    server = start(tmp_path, **{"diskless.coordinator.snapshot.retained.count": "10"})
    full = tmp_path / "full"
    try:
        topics = topics_of(server)
        fill(Broker(server.stub, COORDINATORS), topics, 100)
        for i in range(COORDINATORS):
            link_segments(directory(server, i), full / f"coordinator-{i}")
        # The oldest kept snapshot from here on (retained 10): later ones prune nothing, so `full` misses nothing.
        taken = [(r.coordinator_id, r.snapshot) for r in create_snapshots(server).results]
        committer = Committer(server.address, [(t, p) for t, n in topics.items() for p in range(n)])
        committer.start()
        wait_until(lambda: len(committer.acknowledged) > 20)
        for _ in range(3):
            acknowledged_before = len(committer.acknowledged)
            response = create_snapshots(server)
            taken += [(r.coordinator_id, r.snapshot) for r in response.results]
            wait_until(lambda n=acknowledged_before: len(committer.acknowledged) > n + 5)  # commits flowed meanwhile
        committer.stop.set()
        committer.join(timeout=30)
        assert not committer.errors
        assert all(c.log_start_offset > 0 for c in describe_coordinators(server.stub).values()), "pruned"
        assert server.stop() == 0
        for i in range(COORDINATORS):
            link_segments(directory(server, i), full / f"coordinator-{i}")
        for coordinator_id, info in taken:
            assert info.applied_offset == info.end_offset > 0
            rebuilt = tmp_path / f"rebuilt-{coordinator_id}-{info.end_offset}.sqlite"
            rebuild_from_log(full / f"coordinator-{coordinator_id}", coordinator_id, rebuilt, info.end_offset)
            assert logical_dump(Path(info.path)) == logical_dump(rebuilt), f"snapshot {info.end_offset}-{info.epoch}"
    finally:
        stop_if_running(server)


@pytest.mark.slow
def test_state_rebuilt_from_a_snapshot_and_the_log_tail_equals_a_full_replay(tmp_path: Path) -> None:
    """I1: delete SQLite after a snapshot pruned the log; the restart restores it; it equals the whole log's."""
    server = start_process(tmp_path)
    full = tmp_path / "full"
    try:
        topics = topics_of(server)
        broker = Broker(server.stub, COORDINATORS)
        fill(broker, topics, 150)
        for i in range(COORDINATORS):
            link_segments(directory(server, i), full / f"coordinator-{i}")
        for result in create_snapshots(server).results:
            assert result.log_start_offset > 0 and result.deleted_segments > 0, result
        fill(broker, topics, 100, seed=3)  # the tail after the snapshot
        before = served(server, topics)
        server.kill()
        for i in range(COORDINATORS):
            link_segments(directory(server, i), full / f"coordinator-{i}")
            delete_state(directory(server, i))
        server.start()
        assert "restored snapshot" in "".join(server.output)
        assert served(server, topics) == before
        assert server.stop() == 0
        for i in range(COORDINATORS):
            link_segments(directory(server, i), full / f"coordinator-{i}")
            rebuilt = tmp_path / f"rebuilt-{i}.sqlite"
            rebuild_from_log(full / f"coordinator-{i}", i, rebuilt)
            assert logical_dump(directory(server, i) / "state.sqlite") == logical_dump(rebuilt)
    finally:
        stop_if_running(server)


def test_a_corrupt_newest_snapshot_falls_back_to_the_one_before(tmp_path: Path) -> None:
    server = start(tmp_path)
    try:
        topics = topics_of(server)
        broker = Broker(server.stub, COORDINATORS)
        fill(broker, topics, 60)
        older = {r.coordinator_id: r.snapshot.end_offset for r in create_snapshots(server).results}
        fill(broker, topics, 60, seed=5)
        newest = {r.coordinator_id: r.snapshot for r in create_snapshots(server).results}
        before = served(server, topics)
        assert server.stop() == 0
        for i, info in newest.items():
            data = bytearray(Path(info.path).read_bytes())
            data[len(data) // 2] ^= 0xFF
            Path(info.path).write_bytes(bytes(data))
            delete_state(directory(server, i))
        listed = admin_stub(server.start()).ListSnapshots(admin.ListSnapshotsRequest(verify=True))
        output = "".join(server.output)
        assert "does not verify" in output
        for i, end in older.items():
            assert f"coordinator {i}: " in output and f"restored snapshot {end}-" in output
        assert served(server, topics) == before
        for entry in listed.coordinators:
            assert [s.verified for s in entry.snapshots] == [False, True]
            assert "CRC-32" in entry.snapshots[0].problem
        assert server.stop() == 0
    finally:
        stop_if_running(server)


def test_a_truncated_state_is_replaced_by_the_newest_snapshot(tmp_path: Path) -> None:
    server = start(tmp_path)
    try:
        topics = topics_of(server)
        fill(Broker(server.stub, COORDINATORS), topics, 120)
        create_snapshots(server)
        before = served(server, topics)
        assert server.stop() == 0
        state = directory(server, 0) / "state.sqlite"
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
        server.start()
        output = "".join(server.output)
        assert "(truncated)" in output and "coordinator 0: " in output and "restored snapshot" in output
        assert served(server, topics) == before
        assert server.stop() == 0
    finally:
        stop_if_running(server)


def test_a_state_behind_the_log_start_is_replaced_by_a_snapshot(tmp_path: Path) -> None:
    server = start(tmp_path, **{"diskless.coordinator.snapshot.retained.count": "1"})
    try:
        topics = topics_of(server)
        broker = Broker(server.stub, COORDINATORS)
        fill(broker, topics, 40)
        assert server.stop() == 0
        stale = (directory(server, 1) / "state.sqlite").read_bytes()
        server.start()
        fill(Broker(server.stub, COORDINATORS), topics, 120, seed=1)
        result = {r.coordinator_id: r for r in create_snapshots(server).results}[1]
        before = served(server, topics)
        assert server.stop() == 0
        delete_state(directory(server, 1))
        (directory(server, 1) / "state.sqlite").write_bytes(stale)
        server.start()
        assert f"below the log start {result.log_start_offset}" in "".join(server.output)
        assert served(server, topics) == before
        assert server.stop() == 0
    finally:
        stop_if_running(server)


def test_a_pruned_log_without_a_snapshot_that_verifies_refuses_to_load(tmp_path: Path) -> None:
    """Never an empty or partial state: the coordinator stays down and says what to restore."""
    coordinator_directory = tmp_path / "coordinator-0"
    metadata_log = MetadataLog(coordinator_directory / "log", 1024)
    for epoch in range(1, 200):  # LeaderChange frames over several segments
        end = metadata_log.end_offset
        metadata_log.append(encode_frame(end, epoch, 1, encode_batch([leader_change(epoch, 0)])), end + 1, epoch)
    assert metadata_log.delete_segments_below(100)
    metadata_log.close()
    shard = CoordinatorShard(0, coordinator_directory, Settings(log_segment_bytes=1024), SystemClock())
    with pytest.raises(LoadFailed, match="no snapshot verifies and the log starts at"):
        asyncio.run(shard.load())


def test_deleting_segments_leaves_a_contiguous_log_that_reopens_at_its_new_start(tmp_path: Path) -> None:
    metadata_log = MetadataLog(tmp_path / "log", 1024)
    for epoch in range(1, 200):
        end = metadata_log.end_offset
        metadata_log.append(encode_frame(end, epoch, 1, encode_batch([leader_change(epoch, 0)])), end + 1, epoch)
    bases = sorted(int(p.name.split(".")[0]) for p in (tmp_path / "log").glob("*.log"))
    assert len(bases) >= 4
    deleted = metadata_log.delete_segments_below(bases[2] + 1)  # inside the third segment
    assert deleted == bases[:2]
    assert metadata_log.position().start_offset == bases[2]
    assert next(f.base_offset for f in metadata_log.read(bases[2] + 1)) == bases[2] + 1
    assert metadata_log.delete_segments_below(10**9) == bases[2:-1], "the active segment always stays"
    metadata_log.close()
    reopened = MetadataLog(tmp_path / "log", 1024)
    assert reopened.position().start_offset == bases[-1] and reopened.position().end_offset == 199
    reopened.close()


def _state_file(path: Path, applied_offset: int, blob_count: int) -> apsw.Connection:
    """A WAL-mode SQLite file with what a snapshot reads (`meta`) and enough pages to copy in many steps."""
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA journal_mode=WAL")
    with connection:
        connection.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER)")
        meta = [("applied_offset", applied_offset), ("leader_epoch", 3), ("coordinator_id", 0)]
        connection.executemany("INSERT INTO meta VALUES (?, ?)", meta)
        connection.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, body BLOB)")
        connection.executemany("INSERT INTO blobs VALUES (?, randomblob(3000))", [(i,) for i in range(blob_count)])
    return connection


def test_a_paced_copy_in_small_steps_verifies_while_the_state_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy holds its starting point although the writer commits meanwhile; it verifies; the rate bound holds."""
    writer = _state_file(tmp_path / "state.sqlite", 42, 600)
    before = writer.execute("SELECT sum(length(body)), count(*) FROM blobs").fetchall()
    changed = False
    pace = snapshots._pace

    def commit_then_pace(started: float, copied_bytes: int, bytes_per_second_max: int) -> None:
        nonlocal changed
        if not changed:  # a writer commit between two copy steps
            changed = True
            with writer:
                writer.execute("UPDATE meta SET value = 43 WHERE name = 'applied_offset'")
                writer.execute("DELETE FROM blobs WHERE id < 300")
        pace(started, copied_bytes, bytes_per_second_max)

    monkeypatch.setattr(snapshots, "_pace", commit_then_pace)
    rate = 4 * 1024 * 1024
    started = time.monotonic()
    manifest = take_snapshot(tmp_path / "state.sqlite", tmp_path / "snapshots", 7, 1, rate)
    elapsed_s = time.monotonic() - started
    assert changed, "the writer committed while the copy ran"
    assert manifest.snapshot_id.end_offset == manifest.applied_offset == 42
    assert verify_snapshot(manifest) is None
    assert file_checksum(manifest.data_path) == (manifest.size_bytes, manifest.crc32)
    assert elapsed_s >= 0.8 * manifest.size_bytes / rate, "paced to the rate bound"
    copied = apsw.Connection(str(manifest.data_path), flags=apsw.SQLITE_OPEN_READONLY)
    assert copied.execute("SELECT sum(length(body)), count(*) FROM blobs").fetchall() == before
    assert copied.execute("PRAGMA journal_mode").fetchall() == [("delete",)]
    copied.close()
    writer.close()


def test_pruning_in_two_halves_keeps_the_newest_k_and_their_log(tmp_path: Path) -> None:
    """The log half on the log's thread, the snapshot half after it (a node runs it on the snapshot thread)."""
    coordinator_directory = tmp_path / "coordinator-0"
    metadata_log = MetadataLog(coordinator_directory / "log", 1024)
    writer = _state_file(tmp_path / "state.sqlite", 0, 50)
    kept_in = coordinator_directory / "snapshots"
    for epoch in range(1, 200):
        end = metadata_log.end_offset
        metadata_log.append(encode_frame(end, epoch, 1, encode_batch([leader_change(epoch, 0)])), end + 1, epoch)
        if epoch % 60 == 0:
            with writer:
                writer.execute("UPDATE meta SET value = ? WHERE name = 'applied_offset'", (end + 1,))
            take_snapshot(tmp_path / "state.sqlite", kept_in, 4, epoch, 0)
    assert [m.snapshot_id.end_offset for m in list_snapshots(kept_in)] == [180, 120, 60]
    pruned = prune_log(kept_in, metadata_log, 2)
    assert [s.end_offset for s in pruned.kept] == [180, 120]
    assert [s.end_offset for s in pruned.deleted_snapshots] == [60]
    assert 0 < pruned.log_start_offset <= 120 and pruned.deleted_segments
    assert len(list_snapshots(kept_in)) == 3, "the log half deletes no snapshot"
    delete_snapshots(kept_in, pruned.deleted_snapshots)
    assert [m.snapshot_id.end_offset for m in list_snapshots(kept_in)] == [180, 120]
    assert sorted(os.listdir(kept_in)) == sorted(
        f"{m.snapshot_id.name}{suffix}" for m in list_snapshots(kept_in) for suffix in (".sqlite", ".manifest")
    )
    metadata_log.close()
    writer.close()
