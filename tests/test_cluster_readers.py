"""Reader processes on every node of a cluster (issue #30 item 7): real node processes on a real etcd.

Each node's readers serve FindBatches for the replicas it hosts, leaders and followers, from the replica's state
file, which holds records only up to the replica's high watermark; FindCoordinator names each replica's own
node's readers. A follower's readers never answer a record its node holds past its high watermark; readers follow
a leader change and a follower's snapshot install (a replaced state file is reopened, never served).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos import admin_pb2
from protos import admin_pb2_grpc as admin_grpc
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.cluster_harness import Cluster, stub_at, wait_for
from tests.harness import ServerProcess, batch, fetch_all_batches

pytestmark = pytest.mark.slow


def _commit(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, coordinator_id: int, timeout_s: float = 10) -> int:
    """One plain batch to partition 0; its answer's error code (NONE when acknowledged)."""
    answer = stub.CommitFile(
        pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100, uploader_broker_id=1,
            owner_ids=[coordinator_id], batches=[batch(topic_id, 0)],
        ),
        timeout=timeout_s,
    )  # fmt: skip
    return answer.batches[0].error_code


def replica_readers(via: ServerProcess, topic_id: bytes) -> dict[int, tuple[str, ...]]:
    """node id -> the reader addresses FindCoordinator (asked of `via`) names for the partition's replica there."""
    found = via.stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[0])]),
        timeout=5,
    )
    return {r.node_id: tuple(r.read_addresses) for r in found.coordinators[0].replicas}


def readers_of(cluster: Cluster, node: ServerProcess, topic_id: bytes) -> tuple[str, ...]:
    """The node's readers, once every node names them alike."""
    node_id = cluster.nodes.index(node)

    def named() -> tuple[str, ...] | None:
        views = {replica_readers(n, topic_id).get(node_id, ()) for n in cluster.live()}
        return views.pop() if len(views) == 1 and all(views) else None

    return wait_for(f"node {node_id}'s readers named by every node", named)


def offsets_read(address: str, topic_id: bytes) -> list[int]:
    """The batches' base offsets a reader answers for partition 0 (raises on a per-item error)."""
    return [b.base_offset for b in fetch_all_batches(stub_at(address), topic_id, 0)[0]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, coordinators=1).start()
    try:
        yield running
    finally:
        running.stop()
        for node in running.nodes:  # shown when the test fails
            print(f"--- node {node.arguments[1]} (port {node.port}), last lines:\n" + "".join(node.output[-30:]))


def test_readers_serve_on_leader_and_followers_each_named_with_its_node_and_follow_a_leader_change(
    cluster: Cluster,
) -> None:
    topic_id = cluster.create_topic("read-everywhere", 1)
    leader = wait_for("a leader", lambda: cluster.leader_of(0))
    for _ in range(3):
        assert _commit(leader.stub, topic_id, 0) == pb.NONE
    readers = {cluster.nodes.index(n): readers_of(cluster, n, topic_id) for n in cluster.nodes}
    everyone = [a for addresses in readers.values() for a in addresses]
    assert len(set(everyone)) == len(everyone) == 3, readers  # one reader per node, each node's its own
    for node in cluster.nodes:
        assert node.address not in everyone
    # Every replica's reader answers what was acknowledged: the leader's at once, a follower's once it applied.
    for node_id, addresses in readers.items():
        wait_for(f"node {node_id}'s reader serves the 3 batches", lambda a=addresses[0]: offsets_read(a, topic_id)
                 == [0, 1, 2])  # fmt: skip

    # The leader killed: its readers go with it; a follower leads, and its readers serve what is committed since.
    old = cluster.nodes.index(leader)
    leader.kill()
    new_leader = wait_for("a new leader", lambda: cluster.leader_of(0))
    assert _commit(new_leader.stub, topic_id, 0) == pb.NONE
    for node in cluster.live():
        node_id = cluster.nodes.index(node)
        assert offsets_read(readers[node_id][0], topic_id)[:3] == [0, 1, 2]
        wait_for(f"node {node_id}'s reader serves the 4th batch",
                 lambda a=readers[node_id][0]: offsets_read(a, topic_id) == [0, 1, 2, 3])  # fmt: skip
    # The old leader back: a follower now; its new readers are named and serve everything once it caught up.
    leader.start()
    back = readers_of(cluster, leader, topic_id)
    wait_for("the old leader's reader serves as a follower", lambda: offsets_read(back[0], topic_id) == [0, 1, 2, 3])
    assert cluster.describe(leader, 0).role == "FOLLOWER"
    assert old != cluster.nodes.index(new_leader)


def test_a_followers_readers_never_answer_past_its_high_watermark(tmp_path: Path) -> None:
    """A follower holds a record in its log the leader has not committed (another in-sync follower is paused, so
    the high watermark cannot pass it until that one leaves the ISR): neither its readers nor the leader's answer it
    meanwhile; once committed (acknowledged) they do."""
    cluster = Cluster(tmp_path, coordinators=1, settings={"diskless.coordinator.replica.lag.time.max.ms": "8000"})
    cluster.start()
    try:
        topic_id = cluster.create_topic("hw", 1)
        cluster.wait_fully_in_sync()
        leader = wait_for("a leader", lambda: cluster.leader_of(0))
        assert _commit(leader.stub, topic_id, 0) == pb.NONE
        follower, paused = [n for n in cluster.nodes if n is not leader]
        readers = {n.address: readers_of(cluster, n, topic_id)[0] for n in (leader, follower)}
        for address in readers.values():
            wait_for("the first batch on every reader", lambda a=address: offsets_read(a, topic_id) == [0])
        cluster.pause(paused)  # its node stops fetching: the high watermark waits for it while it is in the ISR
        answer: list[int] = []
        committing = threading.Thread(target=lambda: answer.append(_commit(leader.stub, topic_id, 0, 30)))
        committing.start()

        def past_hw() -> bool:
            described = cluster.describe(follower, 0)
            return described.log_end_offset > described.high_watermark

        wait_for("the follower holding a record past its high watermark", past_hw, every_s=0.02)
        seen_past = 0
        while committing.is_alive():
            if past_hw():
                seen_past += 1
                for address in readers.values():
                    answered = offsets_read(address, topic_id)
                    if answered != [0]:
                        # The paused follower may have just left the ISR: the leader's high watermark then passed the
                        # batch before this follower heard of it. Read after the answer, a high watermark still below
                        # the batch proves the reader answered it uncommitted.
                        assert answered == [0, 1], answered
                        leaders_hw = cluster.describe(leader, 0).high_watermark
                        assert leaders_hw >= 2, f"a reader answered an uncommitted batch (high watermark {leaders_hw})"
            time.sleep(0.05)
        committing.join()
        assert answer == [pb.NONE]  # acknowledged once the paused follower left the ISR
        assert seen_past >= 10, seen_past
        for address in readers.values():
            wait_for("the committed batch on every reader", lambda a=address: offsets_read(a, topic_id) == [0, 1])
        cluster.resume(paused)
    finally:
        for node in cluster.nodes:
            if cluster.nodes.index(node) in cluster.paused:
                cluster.resume(node)
        cluster.stop()


def test_a_followers_readers_reopen_the_state_its_snapshot_install_replaced(tmp_path: Path) -> None:
    """The follower's node paused (its reader runs on, its connection open on the state file) until the leader's
    log starts past it: resumed, it installs the leader's snapshot, which replaces its state file. The reader then
    answers from the new file (every batch, as the leader), never from the old one it had open."""
    settings = {
        "diskless.coordinator.log.segment.bytes": "1024",
        "diskless.coordinator.snapshot.retained.count": "1",
    }
    cluster = Cluster(tmp_path, coordinators=1, settings=settings).start()
    try:
        topic_id = cluster.create_topic("snapshotted", 1)
        cluster.wait_fully_in_sync()
        leader = wait_for("a leader", lambda: cluster.leader_of(0))
        assert _commit(leader.stub, topic_id, 0) == pb.NONE
        follower = next(n for n in cluster.nodes if n is not leader)
        reader = readers_of(cluster, follower, topic_id)[0]
        wait_for("the first batch on the follower's reader", lambda: offsets_read(reader, topic_id) == [0])
        cluster.pause(follower)
        wait_for("the ISR without the paused follower",
                 lambda: cluster.nodes.index(follower) not in cluster.describe(leader, 0).isr)  # fmt: skip
        for _ in range(40):
            assert _commit(leader.stub, topic_id, 0) == pb.NONE
        # Paused, its node never reloads: its reader still answers from the file it has open, as it was.
        assert offsets_read(reader, topic_id) == [0]
        admin = admin_grpc.CoordinatorAdminStub(grpc.insecure_channel(leader.address))
        taken = admin.CreateSnapshot(admin_pb2.CreateSnapshotRequest(coordinator_ids=[0]), timeout=30)
        assert taken.results[0].error_code == pb.NONE, taken
        assert cluster.describe(leader, 0).log_start_offset > 5
        cluster.resume(follower)
        everything = list(range(41))
        wait_for("the follower's reader serves every batch", lambda: offsets_read(reader, topic_id) == everything)
        assert any("installed snapshot" in line for line in follower.output)
        assert offsets_read(reader, topic_id) == [b.base_offset for b in fetch_all_batches(leader.stub, topic_id, 0)[0]]
    finally:
        for node in cluster.nodes:
            if cluster.nodes.index(node) in cluster.paused:
                cluster.resume(node)
        cluster.stop()
