"""Preferred leaders in a real cluster (`diskless serve --etcd` processes, DESIGN §6a): `diskless elect-leaders`
after a failover, through the command line as an operator runs it, and leadership going back by itself on the
periodic check; the command's errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from coordinator.cli.main import main
from protos import coordinator_pb2 as pb
from tests.cluster_harness import Cluster, wait_for
from tests.harness import REPO, ServerProcess, batch, fetch_all_batches

pytestmark = pytest.mark.slow


def _elect_leaders(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "elect-leaders", *arguments],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _preferred(cluster: Cluster) -> dict[int, int]:
    """coordinator id -> its preferred replica (the first), as a node describes it."""
    described = cluster.descriptions(cluster.live()[0])
    return {c: d.replica_node_ids[0] for c, d in described.items()}


def _commit(node: ServerProcess, topic_id: bytes, partition: int) -> int | None:
    """The offset acknowledged, or None when refused (the caller retries at the current leader)."""
    request = pb.CommitFileRequest(
        object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100, uploader_broker_id=1,
        owner_ids=[Cluster.coordinator_of(node, topic_id, partition)], batches=[batch(topic_id, partition)],
    )  # fmt: skip
    answer = node.stub.CommitFile(request, timeout=10).batches[0]
    return answer.assigned_base_offset if answer.error_code == pb.NONE else None


def test_elect_leaders_gives_leadership_back_after_a_failover_and_nothing_acknowledged_is_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = Cluster(tmp_path, coordinators=3, settings={"diskless.cluster.auto.leader.rebalance.enable": "false"})
    cluster.start()
    try:
        cluster.wait_fully_in_sync()
        preferred = _preferred(cluster)
        assert cluster.leaders() == preferred, "each coordinator starts led by its first replica"
        topic_id = cluster.create_topic("leaders", 1)
        coordinator_id = Cluster.coordinator_of(cluster.nodes[0], topic_id, 0)
        victim = cluster.nodes[preferred[coordinator_id]]
        acknowledged = [_commit(victim, topic_id, 0) for _ in range(3)]
        assert acknowledged == [0, 1, 2]

        victim.kill()
        survivors = [n for n in cluster.nodes if n is not victim]
        new_leader = wait_for("a new leader", lambda: cluster.leader_of(coordinator_id, among=survivors))
        not_possible = _elect_leaders("--bootstrap", survivors[0].address, "--coordinator", str(coordinator_id))
        assert not_possible.returncode == 1, not_possible
        assert f"coordinator {coordinator_id}: the preferred replica, node {cluster.nodes.index(victim)}, is not live" \
            in not_possible.stderr  # fmt: skip
        acknowledged.append(_commit(new_leader, topic_id, 0))
        assert acknowledged[-1] == 3

        victim.start()
        cluster.wait_fully_in_sync()
        moved = {c for c, node_id in preferred.items() if node_id == cluster.nodes.index(victim)}
        assert all(cluster.leaders()[c] != preferred[c] for c in moved), "moved back with the periodic check off"

        elected = _elect_leaders("--bootstrap", survivors[0].address, "--json")
        assert elected.returncode == 0, elected.stderr
        rows = {r["coordinator_id"]: r for r in json.loads(elected.stdout)["coordinators"]}
        assert {c: r["outcome"] for c, r in rows.items()} == {
            c: "elected" if c in moved else "already preferred" for c in preferred
        }
        assert all(r["leader"] == r["preferred_leader"] == preferred[c] for c, r in rows.items())
        wait_for("the preferred replicas lead", lambda: cluster.leaders() == preferred)
        acknowledged.append(_commit(victim, topic_id, 0))
        assert acknowledged[-1] == 4
        batches, _, _ = fetch_all_batches(victim.stub, topic_id, 0)
        assert [b.base_offset for b in batches] == [0, 1, 2, 3, 4]

        # The same through main(argv), as a table: nothing left to elect.
        capsys.readouterr()
        assert main(["elect-leaders", "--bootstrap", victim.address]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split()[:2] == ["coordinator_id", "outcome"]
        assert all("already preferred" in line for line in table[1:]) and len(table) == 1 + len(preferred)
        assert cluster.log_lines("never retrieved") == []
    except BaseException:
        cluster.print_state()
        raise
    finally:
        cluster.stop()


def test_leadership_goes_back_by_itself_within_the_check_interval(tmp_path: Path) -> None:
    """The periodic check on (every 2 s here): a killed preferred leader, once restarted and in sync again, leads
    its coordinators again without any command. Prints the failover and leader-return times of each kill."""
    interval_ms = 2000
    cluster = Cluster(
        tmp_path, coordinators=3, settings={"diskless.cluster.leader.imbalance.check.interval.ms": str(interval_ms)}
    )
    cluster.start()
    try:
        cluster.wait_fully_in_sync()
        preferred = _preferred(cluster)
        for victim_id in range(len(cluster.nodes)):
            victim = cluster.nodes[victim_id]
            led = [c for c, node_id in preferred.items() if node_id == victim_id]
            killed_at = time.monotonic()
            victim.kill()
            wait_for("its coordinators led elsewhere", lambda: all(
                cluster.leaders().get(c, victim_id) != victim_id for c in led  # noqa: B023
            ))  # fmt: skip
            failover_s = time.monotonic() - killed_at
            restarted_at = time.monotonic()
            victim.start()
            cluster.wait_fully_in_sync()
            in_sync_s = time.monotonic() - restarted_at
            wait_for("leadership back to the preferred replicas", lambda: cluster.leaders() == preferred,
                     timeout_s=interval_ms / 1000 + 10)  # fmt: skip
            print(
                f"node {victim_id}: failover {failover_s:.2f} s; restarted and in sync in {in_sync_s:.2f} s; "
                f"leading its coordinators again {time.monotonic() - restarted_at:.2f} s after its restart"
            )
        assert cluster.log_lines("never retrieved") == []
    except BaseException:
        cluster.print_state()
        raise
    finally:
        cluster.stop()


def test_elect_leaders_on_a_node_without_a_cluster_fails_with_one_line(tmp_path: Path) -> None:
    node = ServerProcess(tmp_path / "alone", coordinators=2).start()
    try:
        refused = _elect_leaders("--bootstrap", node.address)
        assert refused.returncode == 2
        assert refused.stderr.count("\n") == 1 and "not part of a cluster" in refused.stderr, refused.stderr
        unreachable = _elect_leaders("--bootstrap", "127.0.0.1:1")
        assert unreachable.returncode == 2 and "UNAVAILABLE" in unreachable.stderr
    finally:
        node.stop()
