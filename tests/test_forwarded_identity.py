"""A call a node passes on keeps its caller's identity (issue #30 item 8, Kafka's KIP-590 envelope).

Two in-process nodes over real gRPC with mutual TLS and ACLs: the forwarding node is told to pass catalog calls to
the other (as a node holding no replica passes them to coordinator 0's leader). The forwarding node checks the caller
itself, then sends the caller's principal along (`diskless-forwarded-for` metadata); the receiving node takes it only
from a peer holding INTERNAL and authorises the call as that caller. The nodes' own principal holds INTERNAL alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from coordinator.edge.access_control import FORWARDED_FOR
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.certificates import Identity, channel_credentials, issue
from tests.cluster_harness import CLUSTER_SETTINGS, Cluster
from tests.harness import ServerProcess, batch
from tests.in_process import InProcessNode

# The node's certificate (CN localhost) holds INTERNAL only: passing a broker's call on needs no broker permission.
ACL = "User:broker CLUSTER_ACTION\nUser:reader DESCRIBE\nUser:localhost INTERNAL\n"


@dataclass
class Nodes:
    holder: InProcessNode  # answers the calls passed on
    forwarder: InProcessNode  # passes catalog calls on to the holder
    ca: Identity
    identities: dict[str, Identity]
    forwarder_acl: Path

    def stub(self, node: InProcessNode, who: str) -> pb_grpc.DisklessCoordinatorStub:
        channel = grpc.secure_channel(node.address, channel_credentials(self.ca, self.identities[who]))
        return pb_grpc.DisklessCoordinatorStub(channel)


def _tls_settings(directory: Path, ca: Identity, node: Identity, acl: str, name: str) -> tuple[dict[str, str], Path]:
    certificate, key = node.write(directory, name)
    (directory / "ca.crt").write_bytes(ca.certificate_pem)
    acl_file = directory / f"{name}.acl"
    acl_file.write_text(acl)
    return {
        "diskless.ssl.certificate.location": str(certificate),
        "diskless.ssl.key.location": str(key),
        "diskless.ssl.ca.location": str(directory / "ca.crt"),
        "diskless.ssl.client.auth": "required",
        "diskless.acl.file": str(acl_file),
        "diskless.acl.reload.interval.ms": "0",
    }, acl_file


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    ca = issue("diskless-test-ca", ca=True)
    node = issue("localhost", ca, server=True)
    identities = {"broker": issue("broker", ca), "reader": issue("reader", ca), "node": node}
    holder_settings, _ = _tls_settings(tmp_path, ca, node, ACL, "holder")
    forwarder_settings, forwarder_acl = _tls_settings(tmp_path, ca, node, ACL, "forwarder")
    credentials = channel_credentials(ca, identities["broker"])
    holder = InProcessNode(tmp_path / "holder", coordinators=2, settings=holder_settings, credentials=credentials)
    forwarder = InProcessNode(tmp_path / "fwd", coordinators=2, settings=forwarder_settings, credentials=credentials)
    holder.start()
    try:
        forwarder.start()
        try:
            # As a node holding no replica: its catalog calls go whole to the node holding the catalog.
            forwarder.node.router._catalog_holder = lambda: holder.address
            yield Nodes(holder, forwarder, ca, identities, forwarder_acl)
        finally:
            forwarder.stop()
    finally:
        holder.stop()


def _create(name: str) -> tuple[bytes, pb.CreatePartitionsRequest]:
    topic_id = uuid.uuid4().bytes
    topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=2)
    return topic_id, pb.CreatePartitionsRequest(topics=[topic], timeout_ms=10_000)


def _knows(node: InProcessNode, topic_id: bytes) -> bool:
    return node.loop.call(lambda: node.node.catalog.topic(topic_id) is not None)


def _calls(node: InProcessNode, method: str) -> float:
    counter = node.node.metrics.rpc_requests
    return sum(
        sample.value
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("method") == method
    )


def test_an_allowed_callers_call_passed_on_succeeds_with_the_nodes_principal_holding_internal_only(
    nodes: Nodes,
) -> None:
    topic_id, request = _create("passed-on")
    answer = nodes.stub(nodes.forwarder, "broker").CreatePartitions(request, timeout=30)
    assert answer.topics[0].error_code == pb.NONE, answer
    assert _knows(nodes.holder, topic_id), "the holder did not make the change"
    assert not _knows(nodes.forwarder, topic_id), "the forwarder made the change itself: nothing was passed on"
    found = nodes.stub(nodes.forwarder, "reader").FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[0, 1])]),
        timeout=10,
    )  # a read passed on as the reader, who may describe
    assert [p.error_code for p in found.topics[0].partitions] == [pb.NONE, pb.NONE], found


def test_a_refused_call_never_leaves_the_forwarding_node(nodes: Nodes) -> None:
    before = _calls(nodes.holder, "CreatePartitions")
    topic_id, request = _create("refused-here")
    with pytest.raises(grpc.RpcError) as refused:
        nodes.stub(nodes.forwarder, "reader").CreatePartitions(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "User:reader lacks the CLUSTER_ACTION permission" in (refused.value.details() or "")
    assert _calls(nodes.holder, "CreatePartitions") == before, "the refused call reached the holder"
    assert not _knows(nodes.holder, topic_id)


def test_the_receiving_node_authorises_the_original_caller_not_the_forwarding_node(nodes: Nodes) -> None:
    """Even a forwarding node whose ACL lets the reader write (a stale copy) gets no write done in the reader's name."""
    nodes.forwarder_acl.write_text(ACL.replace("User:reader DESCRIBE", "User:reader CLUSTER_ACTION"))
    topic_id, request = _create("refused-there")
    with pytest.raises(grpc.RpcError) as refused:
        nodes.stub(nodes.forwarder, "reader").CreatePartitions(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    details = refused.value.details() or ""
    assert "User:reader (passed on by User:localhost) lacks the CLUSTER_ACTION permission" in details, details
    assert not _knows(nodes.holder, topic_id) and not _knows(nodes.forwarder, topic_id)


@pytest.mark.parametrize("claimed", ["User:broker", "User:localhost"])
def test_a_non_node_client_claiming_a_forwarded_principal_is_refused(nodes: Nodes, claimed: str) -> None:
    """A broker (CLUSTER_ACTION, not INTERNAL) naming any principal, its own or the node's, is never trusted."""
    topic_id, request = _create("claimed")
    with pytest.raises(grpc.RpcError) as refused:
        nodes.stub(nodes.holder, "broker").CreatePartitions(request, timeout=30, metadata=((FORWARDED_FOR, claimed),))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "User:broker may not pass CreatePartitions on for another principal" in (refused.value.details() or "")
    assert not _knows(nodes.holder, topic_id)


def test_a_node_passing_a_call_on_gets_only_what_the_original_caller_may(nodes: Nodes) -> None:
    node = nodes.stub(nodes.holder, "node")
    topic_id, request = _create("as-the-caller")
    with pytest.raises(grpc.RpcError) as refused:
        node.CreatePartitions(request, timeout=30, metadata=((FORWARDED_FOR, "User:reader"),))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as malformed:
        node.CreatePartitions(request, timeout=30, metadata=((FORWARDED_FOR, "reader"),))
    assert malformed.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not _knows(nodes.holder, topic_id)
    answer = node.CreatePartitions(request, timeout=30, metadata=((FORWARDED_FOR, "User:broker"),))
    assert answer.topics[0].error_code == pb.NONE, answer
    # The node's own principal, without a forwarded one, holds no broker permission.
    with pytest.raises(grpc.RpcError) as alone:
        node.CreatePartitions(_create("alone")[1], timeout=30)
    assert alone.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.slow
def test_a_node_spread_over_processes_passes_calls_to_its_commit_processes_in_the_callers_name(
    tmp_path: Path,
) -> None:
    """The first process passes CommitFile on to the commit process leading each coordinator: as the broker, so the
    node's principal (INTERNAL only) needs no broker permission, and a reader gets nothing committed."""
    ca = issue("diskless-test-ca", ca=True)
    node_identity = issue("localhost", ca, server=True)
    settings, _ = _tls_settings(tmp_path, ca, node_identity, ACL, "node")
    node = ServerProcess(
        tmp_path / "data",
        coordinators=4,
        settings={**settings, "diskless.node.processes": "2"},
        credentials=channel_credentials(ca, issue("broker", ca)),
    ).start()
    try:
        topic_id, request = _create("spread")
        assert node.stub.CreatePartitions(request, timeout=30).topics[0].error_code == pb.NONE
        found = node.stub.FindCoordinator(
            pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[0, 1])]),
            timeout=10,
        )
        owners = sorted({p.coordinator_id for p in found.topics[0].partitions})
        commit = pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=200, uploader_broker_id=1, owner_ids=owners,
            batches=[batch(topic_id, 0), batch(topic_id, 1, byte_offset=100)],
        )  # fmt: skip
        answer = node.stub.CommitFile(commit, timeout=30)
        assert [b.error_code for b in answer.batches] == [pb.NONE, pb.NONE], answer
        reader = pb_grpc.DisklessCoordinatorStub(
            grpc.secure_channel(node.address, channel_credentials(ca, issue("reader", ca)))
        )
        with pytest.raises(grpc.RpcError) as refused:
            reader.CommitFile(commit, timeout=30)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        assert node.stop() == 0


@pytest.mark.slow
def test_a_node_added_to_a_real_cluster_passes_calls_on_in_the_callers_name(tmp_path: Path) -> None:
    """Real nodes on etcd, mutual TLS: nodes 0 and 1 hold every replica, node 7 (added later) none and passes catalog
    calls on to coordinator 0's leader; the nodes' principal holds INTERNAL only."""
    ca = issue("diskless-test-ca", ca=True)
    node_identity = issue("localhost", ca, server=True)
    settings, _ = _tls_settings(tmp_path, ca, node_identity, ACL, "cluster")
    late_settings, late_acl = _tls_settings(tmp_path, ca, node_identity, ACL, "late")
    two_replicas = {"diskless.coordinator.replication.factor": "2"}
    broker = channel_credentials(ca, issue("broker", ca))
    cluster = Cluster(tmp_path / "cluster", size=2, settings={**settings, **two_replicas})
    for node in cluster.nodes:
        node.credentials = broker
    cluster.start()
    late: ServerProcess | None = None
    try:
        late = ServerProcess(
            tmp_path / "node7",
            coordinators=cluster.coordinators,
            settings={**CLUSTER_SETTINGS, **late_settings, **two_replicas},
            arguments=["--node-id", "7", "--etcd", cluster.etcd.endpoints],
            credentials=broker,
        ).start()
        reader = pb_grpc.DisklessCoordinatorStub(
            grpc.secure_channel(late.address, channel_credentials(ca, issue("reader", ca)))
        )
        topic_id, request = _create("added-late")
        created = late.stub.CreatePartitions(request, timeout=30)
        assert created.topics[0].error_code == pb.NONE, created
        ask = pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[0, 1])])
        found = cluster.nodes[0].stub.FindCoordinator(ask, timeout=10)
        assert [p.error_code for p in found.topics[0].partitions] == [pb.NONE, pb.NONE], found

        refused_topic, refused_request = _create("not-for-readers")
        with pytest.raises(grpc.RpcError) as here:
            reader.CreatePartitions(refused_request, timeout=30)
        assert here.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "passed on" not in (here.value.details() or ""), "refused by node 0, not by the node called first"

        late_acl.write_text(ACL.replace("User:reader DESCRIBE", "User:reader CLUSTER_ACTION"))  # a stale ACL copy
        with pytest.raises(grpc.RpcError) as there:
            reader.CreatePartitions(refused_request, timeout=30)
        assert there.value.code() == grpc.StatusCode.PERMISSION_DENIED
        details = there.value.details() or ""
        assert "User:reader (passed on by User:localhost) lacks the CLUSTER_ACTION permission" in details, details
        gone = cluster.nodes[0].stub.FindCoordinator(
            pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=refused_topic, partitions=[0])]),
            timeout=10,
        )
        assert gone.topics[0].partitions[0].error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        if late is not None:
            late.kill()
            print("--- node 7:\n" + "".join(late.output[-30:]))
        cluster.stop()
        print("--- node 0:\n" + "".join(cluster.nodes[0].output[-40:]))
