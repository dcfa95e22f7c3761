"""`diskless describe` and `diskless snapshot create|list|verify|restore`, run as the operator runs them.

Against a running node over gRPC (`--bootstrap`) and against a stopped node's data dir (`--data-dir`):
JSON output parsed, exit codes, one-line reasons, and a restore that the next start continues from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.main import main
from tests.harness import REPO, Broker, ServerProcess, describe_coordinators
from tests.snapshot_helpers import COORDINATORS, MANUAL_SNAPSHOTS, delete_state, fill, served


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def as_json(*args: str) -> Any:
    done = diskless(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def filled(tmp_path: Path) -> Any:
    server = ServerProcess(tmp_path / "data", coordinators=COORDINATORS, settings=MANUAL_SNAPSHOTS).start()
    broker = Broker(server.stub, COORDINATORS)
    topics = {broker.create_topic(f"ops-{i}", 4): 4 for i in range(2)}
    fill(broker, topics, 80)
    yield server, topics
    if server.process is not None and server.process.poll() is None:
        server.kill()


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    # One run as the operator runs it; the others in this process (a process start per command cost seconds).
    done = diskless("snapshot", "--help")
    assert done.returncode == 0 and "usage: diskless" in done.stdout, done.stderr
    for command in (["describe"], *(["snapshot", a] for a in ("create", "list", "verify", "restore"))):
        with pytest.raises(SystemExit) as exited:
            main([*command, "--help"])
        captured = capsys.readouterr()
        assert exited.value.code == 0 and "usage: diskless" in captured.out, (command, captured.err)


@pytest.mark.slow
def test_commands_against_a_running_node(filled: Any) -> None:
    server, _ = filled
    created = as_json("snapshot", "create", "--bootstrap", server.address)["snapshots"]
    assert sorted(s["coordinator_id"] for s in created) == list(range(COORDINATORS))
    listed = as_json("snapshot", "list", "--bootstrap", f"127.0.0.1:1,{server.address}")["snapshots"]
    assert [(s["coordinator_id"], s["snapshot"]) for s in listed] == [
        (s["coordinator_id"], s["snapshot"]) for s in created
    ]
    verified = as_json("snapshot", "verify", "--bootstrap", server.address)["snapshots"]
    assert all(s["verified"] is True for s in verified)
    described = {c["coordinator_id"]: c for c in as_json("describe", "--bootstrap", server.address)["coordinators"]}
    for coordinator_id, description in describe_coordinators(server.stub).items():
        row = described[coordinator_id]
        assert row["state"] == "ACTIVE" and row["applied_offset"] == description.applied_offset
        assert row["log_start_offset"] == description.log_start_offset > 0, "the snapshot pruned the log"
        assert row["log_end_offset"] == description.log_end_offset
        assert row["newest_snapshot"] == next(s["snapshot"] for s in created if s["coordinator_id"] == coordinator_id)
        assert row["live_batches"] == description.live_batch_count > 0
        assert row["partitions"] == description.partition_count and row["live_files"] == description.live_file_count
        assert row["state_bytes"] > 0 and row["log_bytes"] > 0 and row["snapshot_bytes"] > 0, row
        assert row["producers"] == description.producer_count
    table = diskless("describe", "--bootstrap", server.address)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:4] == [
        "coordinator_id",
        "state",
        "role",
        "leader",
    ]
    refused = diskless("snapshot", "restore", "--data-dir", str(server.data_dir), "--coordinator", "0")
    assert refused.returncode == 2 and "in use" in refused.stderr and len(refused.stderr.splitlines()) == 1
    unreachable = diskless("describe", "--bootstrap", "127.0.0.1:1")
    assert unreachable.returncode == 2 and "UNAVAILABLE" in unreachable.stderr


@pytest.mark.slow
def test_commands_on_a_stopped_data_dir_and_a_restore_the_next_start_continues(filled: Any) -> None:
    server, topics = filled
    data_dir = str(server.data_dir)
    before = served(server, topics)
    assert server.stop() == 0
    created = as_json("snapshot", "create", "--data-dir", data_dir)["snapshots"]
    assert len(created) == COORDINATORS
    described = as_json("describe", "--data-dir", data_dir)["coordinators"]
    assert [c["newest_snapshot"] for c in described] == [s["snapshot"] for s in created]
    assert all(c["applied_offset"] == c["log_end_offset"] and c["live_batches"] > 0 for c in described)

    delete_state(server.data_dir / "coordinator-1")
    restored = as_json("snapshot", "restore", "--data-dir", data_dir, "--coordinator", "1")["restored"]
    assert restored[0]["snapshot"] == created[1]["snapshot"]
    server.start()
    assert served(server, topics) == before
    assert server.stop() == 0

    snapshot_file = Path(created[0]["path"])
    snapshot_file.write_bytes(snapshot_file.read_bytes()[:-10])
    failed = diskless("snapshot", "verify", "--data-dir", data_dir)
    assert failed.returncode == 1 and f"snapshot {created[0]['snapshot']}" in failed.stderr
    listed = as_json("snapshot", "list", "--data-dir", data_dir)["snapshots"]
    assert len(listed) >= COORDINATORS
    no_usable = diskless(
        "snapshot", "restore", "--data-dir", data_dir, "--coordinator", "0", "--snapshot", created[0]["snapshot"]
    )
    assert no_usable.returncode == 2 and "no snapshot verifies" in no_usable.stderr
