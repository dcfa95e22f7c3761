"""A crash at each step of a snapshot or a prune leaves a data dir that starts and serves every acknowledged commit.

The crash is forced at the fault point `<step>` (coordinator/fault_points.py) by the node's launcher
tests/crashing_serve.py (`os._exit(137)` there) while a committer keeps committing. After the crash the
node restarts on the same data dir; every acknowledged batch must be served; then SQLite is deleted and
the node restarts again, so the state must also be rebuildable from what the crash left of snapshots and
log alone.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from protos import admin_pb2 as admin
from tests.crashing_serve import CRASH_EXIT_CODE, crashing_at
from tests.harness import Broker, ServerProcess, describe_coordinators
from tests.snapshot_helpers import (
    COORDINATORS,
    MANUAL_SNAPSHOTS,
    Committer,
    admin_stub,
    assert_acknowledged_are_served,
    delete_state,
    fill,
    segment_bases,
    snapshot_names,
)

pytestmark = pytest.mark.slow

SETTINGS = {
    **MANUAL_SNAPSHOTS,
    "diskless.coordinator.snapshot.retained.count": "1",
    "diskless.coordinator.snapshot.copy.step.pages": "2",  # many steps: the crash lands inside the copy
}


def _left_behind(step: str, coordinator_directory: Path, segments_before: list[int]) -> None:
    """What the crash must have left, which proves it struck at `step`."""
    names = snapshot_names(coordinator_directory)
    segments = segment_bases(coordinator_directory)
    if step == "snapshot.copy":
        assert [n for n in names if n.endswith(".sqlite.part")] and not [n for n in names if n.endswith(".manifest")]
    elif step == "snapshot.before_rename":
        assert any(n.endswith(".manifest.part") for n in names) and not any(n.endswith(".manifest") for n in names)
    elif step == "snapshot.after_rename":
        assert any(n.endswith(".manifest") for n in names) and segments[0] == 0, "renamed, not pruned"
    else:
        # Exactly the oldest segment is gone (the committer may have rolled new ones meanwhile).
        assert segments[: len(segments_before) - 1] == segments_before[1:], "exactly one segment deleted"
        assert any(n.endswith(".manifest") for n in names)


@pytest.mark.parametrize("step", ["snapshot.copy", "snapshot.before_rename", "snapshot.after_rename", "prune.midway"])
def test_a_crash_at_each_snapshot_step_loses_nothing_acknowledged(step: str, tmp_path: Path) -> None:
    with crashing_at(ServerProcess(tmp_path / "data", coordinators=COORDINATORS, settings=SETTINGS), step) as server:
        server.start()
    try:
        broker = Broker(server.stub, COORDINATORS)
        topics = {broker.create_topic(f"crash-{i}", 4): 4 for i in range(2)}
        fill(broker, topics, 150)
        # Only coordinator 0 snapshots: the one process exit must happen inside its steps.
        coordinator_directory = server.data_dir / "coordinator-0"
        segments_before = segment_bases(coordinator_directory)
        assert len(segments_before) >= 3
        committer = Committer(server.address, [(t, p) for t, n in topics.items() for p in range(n)])
        committer.start()
        deadline = time.monotonic() + 20
        while len(committer.acknowledged) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(grpc.RpcError):
            admin_stub(server).CreateSnapshot(admin.CreateSnapshotRequest(coordinator_ids=[0]), timeout=30)
        assert server.process is not None
        assert server.process.wait(timeout=30) == CRASH_EXIT_CODE, "the fault hook must end the process"
        committer.join(timeout=30)
        assert not committer.errors and len(committer.acknowledged) >= 20
        _left_behind(step, coordinator_directory, segments_before)

        server.start()
        assert not [n for n in snapshot_names(coordinator_directory) if n.endswith(".part")]
        for description in describe_coordinators(server.stub).values():
            assert description.state == "ACTIVE" and description.applied_offset == description.log_end_offset
        assert_acknowledged_are_served(server, committer.acknowledged)

        # What the crash left of snapshots and log alone must rebuild the state.
        server.kill()
        delete_state(coordinator_directory)
        server.start()
        assert_acknowledged_are_served(server, committer.acknowledged)
        assert server.stop() == 0
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()
