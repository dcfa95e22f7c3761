"""Online reassignment in a real cluster (`diskless serve --etcd` processes, DESIGN §6a), through the command line as
an operator runs it: `diskless reassign` moves a coordinator onto a node added after formation and back, commits
going on, and refuses bad requests with a one-line reason; `diskless rebalance` plans and runs the fewest moves to
an even placement, and `--exclude` empties a node."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest

from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from tests.cluster_harness import CLUSTER_SETTINGS, Cluster, wait_for
from tests.harness import REPO, ServerProcess, batch, fetch_all_batches

pytestmark = pytest.mark.slow


def _diskless(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *arguments], cwd=REPO, capture_output=True, text=True, timeout=180
    )


def _add_node(cluster: Cluster, tmp_path: Path) -> ServerProcess:
    """A node registered after the cluster formed: it holds no replica until a reassignment gives it some."""
    node_id = len(cluster.nodes)
    node = ServerProcess(
        tmp_path / f"node{node_id}", coordinators=cluster.coordinators, settings=dict(CLUSTER_SETTINGS),
        arguments=["--node-id", str(node_id), "--etcd", cluster.etcd.endpoints],
    )  # fmt: skip
    cluster.nodes.append(node)  # stopped with the others
    node.start()
    return node


def _placement(node: ServerProcess) -> admin.ListReassignmentsResponse:
    with grpc.insecure_channel(node.address) as channel:
        request = admin.ListReassignmentsRequest(all_coordinators=True)
        return admin_pb2_grpc.CoordinatorAdminStub(channel).ListReassignments(request, timeout=10)


class Committer:
    """Commits to one partition in a thread, at whichever live node leads its coordinator, until stopped."""

    def __init__(self, cluster: Cluster, topic_id: bytes, partition: int) -> None:
        self.cluster, self.topic_id, self.partition = cluster, topic_id, partition
        self.acknowledged: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Committer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            for node in self.cluster.live():
                key = f"wal/{uuid.uuid4()}"
                try:
                    coordinator_id = Cluster.coordinator_of(node, self.topic_id, self.partition)
                    request = pb.CommitFileRequest(
                        object_key=key, object_format=1, file_size=100, uploader_broker_id=1,
                        owner_ids=[coordinator_id], batches=[batch(self.topic_id, self.partition)],
                    )  # fmt: skip
                    answer = node.stub.CommitFile(request, timeout=10).batches[0]
                except (grpc.RpcError, AssertionError):
                    continue
                if answer.error_code == pb.NONE:
                    assert answer.assigned_base_offset not in self.acknowledged
                    self.acknowledged[answer.assigned_base_offset] = key
                    break
            time.sleep(0.02)

    def check_found(self, node: ServerProcess) -> None:
        batches, _, _ = fetch_all_batches(node.stub, self.topic_id, self.partition)
        found = {b.base_offset: b.object_key for b in batches}
        lost = {o: k for o, k in self.acknowledged.items() if found.get(o) != k}
        assert not lost, f"acknowledged batches lost or moved: {sorted(lost.items())[:5]}"
        assert self.acknowledged, "nothing acknowledged: nothing checked"


def test_reassign_moves_a_coordinator_to_a_new_node_under_commits_and_refuses_bad_requests(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, coordinators=2)
    cluster.start()
    try:
        cluster.wait_fully_in_sync()
        topic_id = cluster.create_topic("moved", 1)
        coordinator_id = Cluster.coordinator_of(cluster.nodes[0], topic_id, 0)
        added = _add_node(cluster, tmp_path)
        bootstrap = cluster.nodes[0].address
        for replicas, reason in (
            ("1,1,2", "node 1 is named more than once"),
            ("9,1,2", "node 9 is not registered in the cluster"),
            ("1", "fewer than min.insync.replicas 2"),
        ):
            refused = _diskless("reassign", "--bootstrap", bootstrap, "--coordinator", str(coordinator_id),
                                "--replicas", replicas)  # fmt: skip
            assert refused.returncode == 1 and reason in refused.stderr, refused
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        before = next(c for c in _placement(added).coordinators if c.coordinator_id == coordinator_id)
        leaving = before.leader  # the leader leaves: leadership moves first
        target = [3, *[n for n in before.replicas if n != leaving]]
        with Committer(cluster, topic_id, 0) as committer:
            wait_for("commits flow", lambda: len(committer.acknowledged) >= 10)
            moved = _diskless("reassign", "--bootstrap", bootstrap, "--coordinator", str(coordinator_id),
                              "--replicas", ",".join(map(str, target)), "--wait")  # fmt: skip
            assert moved.returncode == 0, moved
            assert "reassigning to" in moved.stdout, moved.stdout
            count = len(committer.acknowledged)
            wait_for("commits go on after the move", lambda: len(committer.acknowledged) >= count + 10)
        after = next(c for c in _placement(added).coordinators if c.coordinator_id == coordinator_id)
        assert list(after.replicas) == target and not after.reassigning and after.leader in target
        gone = cluster.nodes[leaving].data_dir / f"coordinator-{coordinator_id}"
        wait_for(f"node {leaving} deleted the coordinator's files", lambda: not gone.exists())
        leader = wait_for("a leader", lambda: cluster.leader_of(coordinator_id))
        committer.check_found(leader)
        assert cluster.log_lines("never retrieved") == []
    except BaseException:
        cluster.print_state()
        raise
    finally:
        cluster.stop()


def test_rebalance_gives_a_new_node_its_share_and_exclude_empties_it(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, coordinators=4)
    cluster.start()
    try:
        cluster.wait_fully_in_sync()
        topic_id = cluster.create_topic("spread", 4)
        added = _add_node(cluster, tmp_path)
        bootstrap = cluster.nodes[0].address
        planned = _diskless("rebalance", "--bootstrap", bootstrap, "--dry-run", "--json")
        assert planned.returncode == 0, planned
        plan = json.loads(planned.stdout)
        assert plan["moves"] and all(3 in m["to"] for m in plan["moves"])
        assert plan["after"]["replicas"] == {"0": 3, "1": 3, "2": 3, "3": 3}
        assert all(not c.reassigning for c in _placement(added).coordinators), "a dry run started something"
        with Committer(cluster, topic_id, 0) as committer:
            wait_for("commits flow", lambda: len(committer.acknowledged) >= 10)
            ran = _diskless("rebalance", "--bootstrap", bootstrap, "--wait")
            assert ran.returncode == 0, ran
            counts = {n: sum(n in c.replicas for c in _placement(added).coordinators) for n in range(4)}
            assert counts == {0: 3, 1: 3, 2: 3, 3: 3}
            assert "preferred leaders elected" in ran.stdout, ran.stdout
            wait_for("each node leads one coordinator", lambda: sorted(cluster.leaders().values()) == [0, 1, 2, 3])
            emptied = _diskless("rebalance", "--bootstrap", bootstrap, "--exclude", "3", "--wait", "--json")
            assert emptied.returncode == 0, emptied
            assert all(3 not in c.replicas for c in _placement(added).coordinators)
        leader = wait_for("a leader", lambda: cluster.leader_of(Cluster.coordinator_of(added, topic_id, 0)))
        committer.check_found(leader)
        for coordinator_id in range(4):
            gone = added.data_dir / f"coordinator-{coordinator_id}"
            wait_for("node 3 deleted every coordinator's files", lambda gone=gone: not gone.exists())
    except BaseException:
        cluster.print_state()
        raise
    finally:
        cluster.stop()
