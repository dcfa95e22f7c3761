"""The life of a WAL file end to end (DESIGN §5): hand-over between coordinators, deletion after grace, faults.

Every test runs a real node on a real object store, both backends: a local
directory and S3 (moto's server, behind a proxy the test can cut). The node
runs in the test's process on a clock the test moves (tests/in_process.py):
the file workers run a cycle at each interval of that clock, so "not deleted
before the grace period" is shown by moving time up to it, and a deletion by
moving it past. A crash point exits its process: that test runs `diskless
serve` on real time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from coordinator.files.object_store import ObjectStore, new_wal_key
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from protos import internal_pb2 as internal
from protos import internal_pb2_grpc as internal_grpc
from tests.certificates import channel_credentials, issue
from tests.crashing_serve import CRASH_EXIT_CODE, crashing_at
from tests.harness import (
    Broker,
    ServerProcess,
    assert_state_equals_log_rebuild,
    batch,
    delete_records,
    describe_coordinator,
    describe_file,
    fetch,
    topic_name,
)
from tests.in_process import InProcessNode
from tests.object_stores import ObjectStoreUnderTest

# Clock times (the test's clock): a grace period of ten worker intervals, a probe delay a bit longer.
INTERVAL_MS = 1000
GRACE_MS = 10 * INTERVAL_MS
PROBE_DELAY_MS = 13 * INTERVAL_MS
FILE_WORKERS = {
    "diskless.coordinator.file.worker.interval.ms": str(INTERVAL_MS),
    "diskless.coordinator.file.deletion.grace.period.ms": str(GRACE_MS),
    "diskless.coordinator.file.handover.probe.delay.ms": str(PROBE_DELAY_MS),
    "diskless.coordinator.file.retry.backoff.ms": str(INTERVAL_MS),
    "diskless.coordinator.file.retry.backoff.max.ms": str(4 * INTERVAL_MS),
}
# The same on real time, for the `diskless serve` process of the crash-point test.
REAL_TIME_FILE_WORKERS = {
    "diskless.coordinator.file.worker.interval.ms": "100",
    "diskless.coordinator.file.deletion.grace.period.ms": "600",
    "diskless.coordinator.file.handover.probe.delay.ms": "800",
    "diskless.coordinator.file.retry.backoff.ms": "100",
    "diskless.coordinator.file.retry.backoff.max.ms": "400",
}
WAIT_S = 20
# Enough clock time for any hand-over chain and deletion of these tests (probe delay, grace, backoffs).
SETTLE_MS = PROBE_DELAY_MS + GRACE_MS + 10 * INTERVAL_MS


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


class Cluster:
    """A node with 4 coordinators on the store under test, and a broker that uploads before it commits."""

    def __init__(self, node: InProcessNode | ServerProcess, store_under_test: ObjectStoreUnderTest) -> None:
        self.node = node
        self.store_under_test = store_under_test
        self.store: ObjectStore = store_under_test.open()
        self.broker = Broker(node.stub, node.coordinators)

    @property
    def stub(self) -> pb_grpc.DisklessCoordinatorStub:
        return self.node.stub

    def upload(self, size: int = 300) -> str:
        key = new_wal_key(self.store_under_test.config.prefix)
        self.store.put(key, b"w" * size)
        return key

    def exists(self, key: str) -> bool:
        return self.store.head(key) is not None

    def partitions_on(self, *coordinators: int) -> tuple[bytes, dict[int, int]]:
        """A topic with a partition on each of `coordinators`: (topic id, coordinator -> partition)."""
        topic_id = self.broker.create_topic(topic_name(), self.node.coordinators)
        found = self.node.stub.FindCoordinator(
            pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(self.node.coordinators))]
            )
        )
        by_coordinator = {p.coordinator_id: p.partition for p in found.topics[0].partitions}
        return topic_id, {c: by_coordinator[c] for c in coordinators}

    def commit(self, key: str, topic_id: bytes, partitions: list[int], owner_ids: list[int]) -> None:
        batches = [batch(topic_id, p, byte_offset=i * 100) for i, p in enumerate(partitions)]
        response = self.broker.commit(batches, object_key=key, owner_ids=owner_ids, file_size=300)
        assert all(b.error_code == pb.NONE for b in response.batches), response

    def empty(self, topic_id: bytes, partition: int) -> None:
        """DeleteRecords up to the high watermark: no live batch of the partition is left."""
        end = fetch(self.node.stub, topic_id, partition, 0).high_watermark
        assert delete_records(self.node.stub, topic_id, partition, end).error_code == pb.NONE

    def state(self, key: str) -> tuple[int, list[int]]:
        described = describe_file(self.node.stub, key)
        assert described.error_code == pb.NONE, described
        return described.state, list(described.coordinator_ids)

    def gone(self, key: str) -> bool:
        return self.state(key) == (pb.FILE_STATE_UNKNOWN, [])

    def advance(self, duration_ms: int) -> None:
        """Moves the node's clock; every file-worker cycle due meanwhile has run when it returns."""
        assert isinstance(self.node, InProcessNode)
        self.node.advance(duration_ms)

    def run_until(self, condition: Callable[[], bool], what: str, within_ms: int = SETTLE_MS) -> int:
        """Moves the clock one worker interval at a time until `condition`; the clock time it took."""
        assert isinstance(self.node, InProcessNode)
        started_ms = self.node.clock.now_ms()
        while not condition():
            waited_ms = self.node.clock.now_ms() - started_ms
            assert waited_ms < within_ms, f"not {what} after {waited_ms} ms of the node's clock"
            self.advance(INTERVAL_MS)
        return self.node.clock.now_ms() - started_ms

    def wait_deleted(self, key: str) -> int:
        """Runs the workers until the file has left every coordinator; the clock time it took."""
        took_ms = self.run_until(lambda: self.gone(key), f"{key} leaves every coordinator")
        assert not self.exists(key)
        return took_ms

    def internal(self) -> internal_grpc.CoordinatorInternalStub:
        return internal_grpc.CoordinatorInternalStub(grpc.insecure_channel(self.node.address))


@pytest.fixture
def cluster(tmp_path: Path, object_store_under_test: ObjectStoreUnderTest) -> Iterator[Cluster]:
    node = InProcessNode(
        tmp_path / "data", coordinators=4, settings={**object_store_under_test.settings, **FILE_WORKERS}
    )
    node.start()
    yield Cluster(node, object_store_under_test)
    if node.is_running():
        assert node.stop() == 0, "".join(node.output)


def test_the_last_owner_deletes_the_object_after_the_grace_period(cluster: Cluster) -> None:
    topic_id, partitions = cluster.partitions_on(2)
    key = cluster.upload()
    cluster.commit(key, topic_id, [partitions[2]], [2])
    assert cluster.state(key) == (pb.FILE_STATE_LIVE, [2])
    cluster.advance(3 * GRACE_MS)  # thirty worker cycles
    assert cluster.exists(key), "a live file is never deleted"

    cluster.empty(topic_id, partitions[2])
    assert cluster.state(key) == (pb.FILE_STATE_AWAITING_DELETION, [2])
    assert describe_coordinator(cluster.stub, 2).files_awaiting_deletion == 1
    # The deletion is scheduled at the first cycle after the emptying: a grace period later, it is still there.
    cluster.advance(GRACE_MS)
    assert cluster.exists(key), "deleted before the grace period ended"
    assert cluster.state(key) == (pb.FILE_STATE_AWAITING_DELETION, [2])
    assert cluster.wait_deleted(key) == INTERVAL_MS, "deleted at the first cycle after the grace period"
    assert describe_coordinator(cluster.stub, 2).files_awaiting_deletion == 0


def test_the_owner_hands_the_file_to_the_next_owner_which_deletes_it_last(cluster: Cluster) -> None:
    topic_id, partitions = cluster.partitions_on(1, 3)
    key = cluster.upload()
    cluster.commit(key, topic_id, [partitions[1], partitions[3]], [1, 3])
    assert cluster.state(key) == (pb.FILE_STATE_LIVE, [1, 3])

    # The later owner empties first: it waits for the ownership, the object stays.
    cluster.empty(topic_id, partitions[3])
    cluster.advance(3 * GRACE_MS)
    assert cluster.state(key) == (pb.FILE_STATE_LIVE, [1, 3])
    assert describe_coordinator(cluster.stub, 3).files_awaiting_handover == 1
    assert cluster.exists(key)

    cluster.empty(topic_id, partitions[1])
    cluster.wait_deleted(key)
    for coordinator_id in range(4):
        described = describe_coordinator(cluster.stub, coordinator_id)
        assert (described.files_awaiting_handover, described.files_awaiting_deletion) == (0, 0)


def test_a_handed_over_file_stays_live_where_batches_remain(cluster: Cluster) -> None:
    topic_id, partitions = cluster.partitions_on(0, 2)
    key = cluster.upload()
    cluster.commit(key, topic_id, [partitions[0], partitions[2]], [0, 2])
    cluster.empty(topic_id, partitions[0])
    cluster.run_until(lambda: cluster.state(key) == (pb.FILE_STATE_LIVE, [2]), "coordinator 0 hands the file to 2")
    cluster.advance(3 * GRACE_MS)
    assert cluster.exists(key)
    assert cluster.state(key) == (pb.FILE_STATE_LIVE, [2])
    assert [b.object_key for b in fetch(cluster.stub, topic_id, partitions[2], 0).batches] == [key]
    cluster.empty(topic_id, partitions[2])
    cluster.wait_deleted(key)


def test_a_commit_that_missed_a_later_owner_is_accepted_there_at_hand_over(cluster: Cluster) -> None:
    topic_id, partitions = cluster.partitions_on(1)
    key = cluster.upload()
    cluster.commit(key, topic_id, [partitions[1]], [1, 2])  # coordinator 2 never heard of the file
    assert cluster.state(key) == (pb.FILE_STATE_LIVE, [1])
    cluster.empty(topic_id, partitions[1])
    cluster.run_until(
        lambda: cluster.state(key) == (pb.FILE_STATE_AWAITING_DELETION, [2]), "coordinator 2 accepts the file"
    )
    cluster.wait_deleted(key)


def test_a_commit_that_missed_the_first_owner_is_taken_after_the_probe_delay(cluster: Cluster) -> None:
    topic_id, partitions = cluster.partitions_on(3)
    key = cluster.upload()
    cluster.commit(key, topic_id, [partitions[3]], [0, 3])  # the first owner, 0, never heard of it
    cluster.empty(topic_id, partitions[3])
    assert cluster.state(key) == (pb.FILE_STATE_AWAITING_HANDOVER, [3])
    cluster.advance(PROBE_DELAY_MS - INTERVAL_MS)
    assert cluster.state(key) == (pb.FILE_STATE_AWAITING_HANDOVER, [3]), "taken before the probe delay"
    taken_ms = cluster.run_until(
        lambda: cluster.state(key) == (pb.FILE_STATE_AWAITING_DELETION, [3]), "coordinator 3 takes the file"
    )
    assert taken_ms <= 2 * INTERVAL_MS, "taken at the first cycle past the probe delay"
    cluster.advance(GRACE_MS - INTERVAL_MS)
    assert cluster.exists(key), "deleted before the grace period ended"
    cluster.wait_deleted(key)


def test_a_store_outage_delays_deletions_and_commits_go_on(cluster: Cluster) -> None:
    topic_id, partitions = cluster.partitions_on(1)
    key = cluster.upload()
    cluster.commit(key, topic_id, [partitions[1]], [1])
    with cluster.store_under_test.outage():
        cluster.empty(topic_id, partitions[1])
        cluster.advance(GRACE_MS + 4 * INTERVAL_MS)  # the deletion is due and fails, with backoff
        failures = [line for line in cluster.node.output if "deleting objects failed" in line]
        assert failures, "the failure is logged"
        # Commits do not wait for the store (a broker uploaded this one before the outage, say).
        committed = cluster.broker.commit([batch(topic_id, partitions[1])], owner_ids=[1])
        assert committed.batches[0].error_code == pb.NONE
        assert cluster.state(key) == (pb.FILE_STATE_AWAITING_DELETION, [1])
    assert cluster.exists(key), "nothing was deleted while the store was away"
    cluster.wait_deleted(key)
    assert any("retrying in" in line for line in failures), "the failure says when it is retried"


def test_a_topic_deleted_while_its_file_holds_another_topics_batches(cluster: Cluster) -> None:
    doomed, doomed_partitions = cluster.partitions_on(2)
    kept, kept_partitions = cluster.partitions_on(2)
    key = cluster.upload()
    batches = [batch(doomed, doomed_partitions[2]), batch(kept, kept_partitions[2], byte_offset=100)]
    assert all(b.error_code == pb.NONE for b in cluster.broker.commit(batches, object_key=key, owner_ids=[2]).batches)
    deleted = cluster.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[doomed]))
    assert deleted.topics[0].error_code == pb.NONE
    cluster.advance(3 * GRACE_MS)
    assert cluster.state(key) == (pb.FILE_STATE_LIVE, [2])
    assert cluster.exists(key)
    assert [b.object_key for b in fetch(cluster.stub, kept, kept_partitions[2], 0).batches] == [key]
    assert cluster.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[kept])).topics[0].error_code == pb.NONE
    cluster.wait_deleted(key)


@pytest.mark.slow
def test_a_restart_between_the_receivers_record_and_the_senders(
    object_store_under_test: ObjectStoreUnderTest, tmp_path: Path
) -> None:
    """A crash point exits the process: a `diskless serve` process, on real time."""
    node = ServerProcess(
        tmp_path / "data", coordinators=4, settings={**object_store_under_test.settings, **REAL_TIME_FILE_WORKERS}
    ).start()
    cluster = Cluster(node, object_store_under_test)
    try:
        topic_id, partitions = cluster.partitions_on(0, 1)
        key = cluster.upload()
        cluster.commit(key, topic_id, [partitions[0], partitions[1]], [0, 1])
        node.stop()
        with crashing_at(node, "handover.after_peer"):
            node.start()
        cluster.broker = Broker(node.stub, node.coordinators)
        cluster.empty(topic_id, partitions[0])
        assert node.process is not None
        assert node.process.wait(timeout=WAIT_S) == CRASH_EXIT_CODE  # coordinator 1 recorded it, 0 did not
        node.start()
        cluster.broker = Broker(node.stub, node.coordinators)
        wait_until(lambda: cluster.state(key) == (pb.FILE_STATE_LIVE, [1]), "the hand-over is repeated and ends")
        cluster.empty(topic_id, partitions[1])
        wait_until(lambda: cluster.gone(key), f"{key} leaves every coordinator")
        assert not cluster.exists(key)
    finally:
        if node.process is not None and node.process.poll() is None:
            assert node.stop() == 0
    assert_state_equals_log_rebuild(node.data_dir, node.coordinators, tmp_path / "rebuild")


def test_a_hand_over_refused_for_a_while_is_retried(
    tmp_path: Path, local_store_under_test: ObjectStoreUnderTest
) -> None:
    acl = tmp_path / "acl"
    acl.write_text("User:ANONYMOUS CLUSTER_ACTION\n")  # no INTERNAL: coordinators cannot hand files over
    node = InProcessNode(
        tmp_path / "data",
        settings={
            **local_store_under_test.settings,
            **FILE_WORKERS,
            "diskless.acl.file": str(acl),
            "diskless.acl.reload.interval.ms": "0",
        },
    ).start()
    try:
        cluster = Cluster(node, local_store_under_test)
        topic_id, partitions = cluster.partitions_on(0)
        key = cluster.upload()
        cluster.commit(key, topic_id, [partitions[0]], [0, 1])
        cluster.empty(topic_id, partitions[0])
        cluster.advance(3 * GRACE_MS)
        assert cluster.state(key) == (pb.FILE_STATE_AWAITING_HANDOVER, [0])
        refusals = [line for line in node.output if "hand-over to coordinator 1 failed" in line]
        assert len(refusals) >= 3, "retried, with backoff"
        acl.write_text("User:ANONYMOUS CLUSTER_ACTION,INTERNAL\n")
        cluster.wait_deleted(key)
    finally:
        assert node.stop() == 0


def test_hand_over_calls_with_nonsense_are_refused_and_a_repeat_changes_nothing(cluster: Cluster) -> None:
    internal_stub = cluster.internal()
    key = new_wal_key()
    handed = internal.HandedOverFile(object_key=key, file_size=10, uploader_broker_id=1, owner_ids=[0, 1])

    def hand_over(**fields: object) -> internal.HandOverFilesResponse:
        request = internal.HandOverFilesRequest(from_coordinator_id=0, to_coordinator_id=1, files=[handed])
        for name, value in fields.items():
            if name == "files":
                del request.files[:]
                request.files.extend(value)  # type: ignore[arg-type]
            else:
                setattr(request, name, value)
        return internal_stub.HandOverFiles(request)

    assert hand_over(to_coordinator_id=9).error_code == pb.NOT_COORDINATOR
    assert hand_over(from_coordinator_id=2).error_code == pb.INVALID_REQUEST  # not the owner before 1
    assert hand_over(files=[handed, handed]).error_code == pb.INVALID_REQUEST
    bad_key = internal.HandedOverFile(object_key="../escape", owner_ids=[0, 1])
    assert hand_over(files=[bad_key]).error_code == pb.INVALID_REQUEST
    assert hand_over(files=[internal.HandedOverFile(object_key=key, owner_ids=[0, 7])]).error_code == pb.INVALID_REQUEST
    assert cluster.state(key) == (pb.FILE_STATE_UNKNOWN, [])  # nothing recorded by a refused call

    log_end = describe_coordinator(cluster.stub, 1).log_end_offset
    assert hand_over(timeout_ms=5000).error_code == pb.NONE
    assert cluster.state(key)[1] == [1]
    assert hand_over().error_code == pb.NONE  # a retried hand-over: already the owner
    # The first call wrote one record, the repeat none (the workers run only when the test moves the clock).
    assert describe_coordinator(cluster.stub, 1).log_end_offset - log_end == 1
    cluster.wait_deleted(key)  # an unknown file handed over is deleted like any other (missing counts as deleted)

    known = internal_stub.KnownFiles(internal.KnownFilesRequest(coordinator_ids=[0, 9], object_keys=[key]))
    assert known.error_code == pb.NOT_COORDINATOR


def test_hand_over_under_mutual_tls_uses_the_nodes_own_certificate(
    tmp_path: Path, local_store_under_test: ObjectStoreUnderTest
) -> None:
    ca = issue("diskless-test-ca", ca=True)
    certificate, key = issue("localhost", ca, server=True).write(tmp_path, "node")
    (tmp_path / "ca.crt").write_bytes(ca.certificate_pem)
    acl = tmp_path / "acl"
    acl.write_text("User:broker CLUSTER_ACTION\nUser:localhost INTERNAL  # the node itself\n")
    node = InProcessNode(
        tmp_path / "data",
        settings={
            **local_store_under_test.settings,
            **FILE_WORKERS,
            "diskless.ssl.certificate.location": str(certificate),
            "diskless.ssl.key.location": str(key),
            "diskless.ssl.ca.location": str(tmp_path / "ca.crt"),
            "diskless.ssl.client.auth": "required",
            "diskless.acl.file": str(acl),
        },
        credentials=channel_credentials(ca, issue("broker", ca)),
    ).start()
    try:
        cluster = Cluster(node, local_store_under_test)
        topic_id, partitions = cluster.partitions_on(0, 3)
        key_name = cluster.upload()
        cluster.commit(key_name, topic_id, [partitions[0], partitions[3]], [0, 3])
        cluster.empty(topic_id, partitions[0])
        cluster.run_until(
            lambda: cluster.state(key_name) == (pb.FILE_STATE_LIVE, [3]), "coordinator 0 hands the file to 3"
        )
        assert not any("failed" in line for line in node.output), "".join(node.output)
    finally:
        assert node.stop() == 0
