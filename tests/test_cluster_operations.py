"""A cluster as an operator and a broker's client see it: each replica's lag and fetches (DescribeCoordinators,
`diskless describe`, metrics), a node added after the cluster formed, and the routing client across a failover.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from tests.cluster_harness import CLUSTER_SETTINGS, Cluster, wait_for
from tests.harness import REPO, ServerProcess, batch
from tests.test_metrics import scrape, total

pytestmark = pytest.mark.slow

METRICS = {"diskless.metrics.listen": "127.0.0.1:0"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, settings=METRICS).start()
    try:
        yield running
    finally:
        running.stop()
        for node in running.nodes:  # shown when the test fails
            print(f"--- node {node.arguments[1]} (port {node.port}), last lines:\n" + "".join(node.output[-30:]))


def _commit(node: ServerProcess, topic_id: bytes, coordinator_id: int, count: int, partition: int = 0) -> None:
    for _ in range(count):
        answer = node.stub.CommitFile(
            pb.CommitFileRequest(
                object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100, uploader_broker_id=1,
                owner_ids=[coordinator_id], batches=[batch(topic_id, partition)],
            ),
            timeout=10,
        )  # fmt: skip
        assert answer.batches[0].error_code == pb.NONE, answer


def _progress(cluster: Cluster, leader: ServerProcess, coordinator_id: int) -> dict[int, pb.ReplicaProgress]:
    return {p.node_id: p for p in cluster.describe(leader, coordinator_id).replica_progress}


def test_the_leader_reports_each_replicas_lag_and_the_followers_count_their_fetches(cluster: Cluster) -> None:
    topic_id = cluster.create_topic("lagging", 1)
    coordinator_id = cluster.coordinator_of(cluster.nodes[0], topic_id, 0)
    leader = cluster.leader_of(coordinator_id)
    assert leader is not None
    followers = [n for n in cluster.nodes if n is not leader]
    _commit(leader, topic_id, coordinator_id, 10)

    # Caught up: every replica at the leader's log end, in sync, fetching.
    progress = wait_for(
        "every replica caught up",
        lambda: (
            (p := _progress(cluster, leader, coordinator_id))
            and all(x.lag == 0 and x.in_sync for x in p.values())
            and p
        ),
    )
    assert sorted(progress) == sorted(cluster.describe(leader, coordinator_id).replica_node_ids)
    described = cluster.describe(leader, coordinator_id)
    assert all(p.log_end_offset == described.log_end_offset for p in progress.values())
    assert all(0 <= p.last_fetch_age_ms < 5000 for n, p in progress.items() if n != described.node_id)
    on_follower = cluster.describe(followers[0], coordinator_id)
    assert on_follower.role == "FOLLOWER" and not on_follower.replica_progress
    follower_lag = lambda: cluster.describe(followers[0], coordinator_id).replica_lag  # noqa: E731
    wait_for("the follower's own lag is 0", lambda: follower_lag() == 0)
    fetched = scrape(followers[0])
    fetches = total(fetched, "diskless_replica_fetch_seconds_count", coordinator=str(coordinator_id), returned="frames")
    assert fetches > 0
    led = scrape(leader)
    for follower in followers:
        replica = follower.arguments[1]
        assert total(led, "diskless_coordinator_follower_lag", coordinator=str(coordinator_id), replica=replica) == 0

    # A paused follower falls behind: the leader shows by how much, in DescribeCoordinators and `diskless describe`.
    paused = followers[1]
    assert paused.process is not None
    paused.process.send_signal(signal.SIGSTOP)
    try:
        _commit(leader, topic_id, coordinator_id, 5)
        behind = _progress(cluster, leader, coordinator_id)[int(paused.arguments[1])]
        assert behind.lag >= 5, behind
        table = subprocess.run(
            [sys.executable, "-m", "coordinator", "describe", "--bootstrap", leader.address, "--coordinator",
             str(coordinator_id)],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert table.returncode == 0, table.stderr
        header, row = table.stdout.splitlines()[:2]
        lag_cell = row.split()[header.split().index("lag")]
        replicas_cell = row.split()[header.split().index("replicas")]
        assert replicas_cell == ",".join(map(str, cluster.describe(leader, coordinator_id).replica_node_ids))
        assert f"{paused.arguments[1]}:{behind.lag}" in lag_cell.split(","), table.stdout
    finally:
        paused.process.send_signal(signal.SIGCONT)
    wait_for("the paused follower catches up", lambda: _progress(cluster, leader, coordinator_id)[
        int(paused.arguments[1])].lag == 0 or None)  # fmt: skip

    # A failover: the survivors count a new leadership.
    before = {n.arguments[1]: cluster.describe(n, coordinator_id).leader_changes for n in followers}
    leader.kill()
    new_leader = wait_for("a new leader", lambda: cluster.leader_of(coordinator_id, among=followers))
    assert cluster.describe(new_leader, coordinator_id).leader_changes > before[new_leader.arguments[1]]
    assert total(scrape(new_leader), "diskless_coordinator_leader_changes_total", coordinator=str(coordinator_id)) >= 1


def _add_node(cluster: Cluster, directory: Path, node_id: int) -> ServerProcess:
    node = ServerProcess(
        directory / f"node{node_id}",
        coordinators=cluster.coordinators,
        settings=CLUSTER_SETTINGS,
        arguments=["--node-id", str(node_id), "--etcd", cluster.etcd.endpoints],
    )
    return node.start()


def test_a_node_added_after_the_cluster_formed_holds_no_replica_and_passes_catalog_calls_on(
    cluster: Cluster, tmp_path: Path
) -> None:
    late = _add_node(cluster, tmp_path, 7)
    try:
        for description in late.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=5).coordinators:
            assert description.error_code == pb.NOT_LEADER_OR_FOLLOWER, description

        # Topic changes and FindCoordinator reach it like any node: it passes them to a node that holds the catalog.
        topic_id = uuid.uuid4().bytes
        created = late.stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name="added-late", num_partitions=4)]
            ),
            timeout=30,
        )
        assert created.topics[0].error_code == pb.NONE, created
        ask = pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[0, 3])])
        # Each node's catalog follows its replicas as they apply (up to their high watermark): a moment after.
        found = wait_for(
            "the partitions found through the added node",
            lambda: (
                (f := late.stub.FindCoordinator(ask, timeout=5))
                and all(p.error_code == pb.NONE for p in f.topics[0].partitions)
                and f
            ),
        )
        for endpoint in found.coordinators:
            leader = cluster.leader_of(endpoint.coordinator_id)
            assert leader is not None and endpoint.port == leader.port, endpoint
            assert 7 not in [r.node_id for r in endpoint.replicas]

        # Data calls it cannot serve get NOT_LEADER_OR_FOLLOWER (retriable: a broker asks FindCoordinator again).
        refused = late.stub.CommitFile(
            pb.CommitFileRequest(
                object_key="wal/late", object_format=1, file_size=100, uploader_broker_id=1,
                owner_ids=[found.topics[0].partitions[0].coordinator_id], batches=[batch(topic_id, 0)],
            ),
            timeout=10,
        )  # fmt: skip
        assert refused.batches[0].error_code == pb.NOT_LEADER_OR_FOLLOWER, refused

        # The routing client bootstrapped at the added node only: it commits and reads through the leaders.
        async def through_the_routing_client() -> tuple[list[int], list[int]]:
            async with RoutingClient(late.address, deadline_ms=30_000) as client:
                owners = sorted(set(await client.coordinators_of(topic_id, range(4))))
                committed = await client.commit_file(
                    pb.CommitFileRequest(
                        object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=400, uploader_broker_id=1,
                        owner_ids=owners, batches=[batch(topic_id, p, byte_offset=100 * p) for p in range(4)],
                    )
                )  # fmt: skip
                read = await client.find_batches(
                    pb.FindBatchesRequest(
                        fetch_max_bytes=1 << 20,
                        topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
                            pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1 << 20)
                            for p in range(4)])],
                    )
                )  # fmt: skip
                return [b.error_code for b in committed.batches], [len(p.batches) for p in read.topics[0].partitions]

        codes, counts = asyncio.run(through_the_routing_client())
        assert codes == [pb.NONE] * 4
        assert counts == [1] * 4
    finally:
        late.kill()


def test_the_routing_client_carries_a_producer_across_a_leader_kill_without_losing_or_repeating_a_batch(
    cluster: Cluster,
) -> None:
    topic_id = cluster.create_topic("routed", 1)
    coordinator_id = cluster.coordinator_of(cluster.nodes[0], topic_id, 0)
    leader = cluster.leader_of(coordinator_id)
    assert leader is not None
    bootstrap = [n.address for n in cluster.nodes]

    async def produce() -> dict[int, int]:
        acknowledged: dict[int, int] = {}  # sequence -> offset
        async with RoutingClient(bootstrap, deadline_ms=20_000) as client:
            for sequence in range(60):
                if sequence == 20:
                    leader.kill()  # mid-stream: the client finds the new leader and resends
                answer = await client.commit_file(
                    pb.CommitFileRequest(
                        object_key=f"wal/routed-{sequence}", object_format=1, file_size=100, uploader_broker_id=1,
                        owner_ids=[coordinator_id],
                        batches=[batch(topic_id, 0, producer_id=42, epoch=0, sequence=sequence)],
                    )
                )  # fmt: skip
                result = answer.batches[0]
                assert result.error_code == pb.NONE, result
                acknowledged[sequence] = result.assigned_base_offset
        return acknowledged

    acknowledged = asyncio.run(produce())
    assert [acknowledged[s] for s in range(60)] == list(range(60))  # one offset each, in order: none lost or doubled
    new_leader = cluster.leader_of(coordinator_id)
    assert new_leader is not None and new_leader is not leader


def test_every_node_stops_on_sigterm_without_waiting_out_its_drain_the_last_one_too(cluster: Cluster) -> None:
    """Stopping the nodes one by one: each later one leads what the earlier ones led, then has no follower left.

    A leader closing its replication at once answers what followers have not confirmed with NOT_COORDINATOR,
    instead of waiting for an ISR that can no longer shrink (nor, if it became leader while stopping, forever).
    """
    topic_id = cluster.create_topic("stopping", 2)
    for partition in (0, 1):
        coordinator_id = cluster.coordinator_of(cluster.nodes[0], topic_id, partition)
        leader = wait_for("a leader", lambda c=coordinator_id: cluster.leader_of(c))
        _commit(leader, topic_id, coordinator_id, 2, partition)
    for node in cluster.nodes:  # back to back: the next node takes over while it is being stopped
        started = time.monotonic()
        assert node.stop() == 0
        took = time.monotonic() - started
        assert took < float(CLUSTER_SETTINGS["diskless.shutdown.drain.timeout.ms"]) / 1000, (node.arguments, took)


def test_a_topic_is_known_on_every_node_at_once_after_one_acknowledged_it(cluster: Cluster) -> None:
    """Issue #30's run: CreatePartitions answered by a node, then FindCoordinator at once on it and on the others
    (before, 4 of 5 tries answered UNKNOWN_TOPIC_OR_PARTITION for up to half a second)."""
    cluster.wait_fully_in_sync()
    for attempt in range(5):
        creator = cluster.nodes[attempt % len(cluster.nodes)]
        topic_id = uuid.uuid4().bytes
        topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=f"at-once-{attempt}", num_partitions=8)
        answer = creator.stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[topic]), timeout=30)
        assert answer.topics[0].error_code == pb.NONE, answer
        for node in (creator, *(n for n in cluster.nodes if n is not creator)):
            found = node.stub.FindCoordinator(
                pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id,
                                                                                  partitions=range(8))]),
                timeout=10,
            )  # fmt: skip
            codes = [p.error_code for p in found.topics[0].partitions]
            assert codes == [pb.NONE] * 8, (attempt, cluster.nodes.index(node), codes)
