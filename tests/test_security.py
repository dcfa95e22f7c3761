"""TLS, mutual TLS, ACLs and the safe-by-default rules, against a real `diskless serve` (DESIGN §9, issue 7)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from coordinator.config.settings import Settings, SettingsError
from coordinator.edge.tls import is_loopback
from coordinator.node.assembly import check_exposure
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.certificates import Identity, channel_credentials, issue
from tests.harness import REPO, Broker, ServerProcess, batch, laid_out

ACL = "# who may do what\nUser:broker CLUSTER_ACTION\nUser:operator DESCRIBE   # read-only\n"


@dataclass
class Cluster:
    server: ServerProcess
    ca: Identity
    broker: Identity
    operator: Identity
    stranger: Identity
    acl_file: Path
    tls_dir: Path

    def stub(self, client: Identity | None, ca: Identity | None = None) -> pb_grpc.DisklessCoordinatorStub:
        channel = grpc.secure_channel(self.server.address, channel_credentials(ca or self.ca, client))
        return pb_grpc.DisklessCoordinatorStub(channel)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("tls")
    ca = issue("diskless-test-ca", ca=True)
    node = issue("localhost", ca, server=True)
    broker, operator = issue("broker", ca), issue("operator", ca)
    stranger = issue("broker", issue("another-ca", ca=True))  # right name, wrong CA
    certificate, key = node.write(directory, "node")
    (directory / "ca.crt").write_bytes(ca.certificate_pem)
    acl_file = directory / "acl"
    acl_file.write_text(ACL)
    server = ServerProcess(
        directory / "data",
        settings={
            "diskless.ssl.certificate.location": str(certificate),
            "diskless.ssl.key.location": str(key),
            "diskless.ssl.ca.location": str(directory / "ca.crt"),
            "diskless.ssl.client.auth": "required",
            "diskless.acl.file": str(acl_file),
            "diskless.acl.reload.interval.ms": "0",
        },
        credentials=channel_credentials(ca, broker),
    ).start()
    yield Cluster(server, ca, broker, operator, stranger, acl_file, directory)
    assert server.stop() == 0


def describe(stub: pb_grpc.DisklessCoordinatorStub) -> pb.DescribeCoordinatorsResponse:
    return stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=10)


@pytest.mark.slow
def test_plaintext_caller_never_reaches_a_tls_server(cluster: Cluster) -> None:
    with grpc.insecure_channel(cluster.server.address) as channel, pytest.raises(grpc.RpcError) as refused:
        describe(pb_grpc.DisklessCoordinatorStub(channel))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.slow
def test_caller_without_a_certificate_is_refused(cluster: Cluster) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        describe(cluster.stub(None))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # refused at the TLS handshake


@pytest.mark.slow
def test_certificate_from_another_ca_is_refused(cluster: Cluster) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        describe(cluster.stub(cluster.stranger))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.slow
def test_broker_with_cluster_action_commits_and_finds_its_coordinator(cluster: Cluster) -> None:
    stub = cluster.stub(cluster.broker)
    topic = Broker(stub, 4).create_topic("secured", 2)
    response = Broker(stub, 4).commit(laid_out([batch(topic, 0, 3), batch(topic, 1, 2)]))
    assert [b.error_code for b in response.batches] == [pb.NONE, pb.NONE]


@pytest.mark.slow
def test_principal_without_the_permission_is_denied_naming_it_and_logged(cluster: Cluster) -> None:
    stub = cluster.stub(cluster.operator)
    assert len(describe(stub).coordinators) == 4  # DESCRIBE is granted
    with pytest.raises(grpc.RpcError) as denied:
        stub.CommitFile(pb.CommitFileRequest(object_key="wal/x", object_format=1, file_size=1, owner_ids=[0]))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "User:operator" in (denied.value.details() or "")
    assert "CLUSTER_ACTION" in (denied.value.details() or "")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if any("denied CommitFile to User:operator: missing CLUSTER_ACTION" in line for line in cluster.server.output):
            return
        time.sleep(0.05)
    raise AssertionError("the denial was not logged with the principal and the RPC")


@pytest.mark.slow
def test_repeated_denials_are_logged_at_a_bounded_rate(cluster: Cluster) -> None:
    stub = cluster.stub(cluster.operator)
    request = pb.CommitFileRequest(object_key="wal/y", object_format=1, file_size=1, owner_ids=[0])
    for _ in range(200):
        with pytest.raises(grpc.RpcError) as denied:
            stub.CommitFile(request)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    lines = [line for line in cluster.server.output if "denied CommitFile to User:operator" in line]
    assert 1 <= len(lines) <= 2, lines  # one per 10 s interval (the test before may have logged the first)


@pytest.mark.slow
def test_acl_change_takes_effect_without_restart(cluster: Cluster) -> None:
    operator = cluster.stub(cluster.operator)
    broker = cluster.stub(cluster.broker)
    request = pb.CreatePartitionsRequest(
        topics=[pb.CreatePartitionsRequest.Topic(topic_id=bytes(range(1, 17)), name="by-operator", num_partitions=1)]
    )
    with pytest.raises(grpc.RpcError):
        operator.CreatePartitions(request, timeout=10)
    try:
        cluster.acl_file.write_text("User:operator CLUSTER_ACTION\n")
        assert operator.CreatePartitions(request, timeout=10).topics[0].error_code == pb.NONE
        with pytest.raises(grpc.RpcError) as denied:
            describe(broker)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        cluster.acl_file.write_text("User:broker CLUSTER_ACTION,,NOT_A_PERMISSION\n")  # a typo keeps the last ACL
        time.sleep(0.01)
        assert operator.CreatePartitions(request, timeout=10).topics[0].error_code == pb.NONE
    finally:
        cluster.acl_file.write_text(ACL)
    time.sleep(0.01)
    assert len(describe(broker).coordinators) == 4


@pytest.mark.slow
def test_server_certificate_is_reloaded_without_restart(cluster: Cluster) -> None:
    old_ca_stub = cluster.stub(cluster.broker)
    assert len(describe(old_ca_stub).coordinators) == 4
    new_ca = issue("rotated-ca", ca=True)
    node_certificate, node_key = cluster.tls_dir / "node.crt", cluster.tls_dir / "node.key"
    saved = node_certificate.read_bytes(), node_key.read_bytes()
    try:
        issue("localhost", new_ca, server=True).write(cluster.tls_dir, "node")
        with grpc.secure_channel(cluster.server.address, channel_credentials(new_ca, cluster.broker)) as channel:
            # The node now presents a certificate of the new CA; callers still use the old CA's certificates.
            assert len(describe(pb_grpc.DisklessCoordinatorStub(channel)).coordinators) == 4
        with pytest.raises(grpc.RpcError):
            describe(cluster.stub(cluster.broker))  # a new connection trusting only the old CA
    finally:
        node_certificate.write_bytes(saved[0])
        node_key.write_bytes(saved[1])
    assert len(describe(cluster.stub(cluster.broker)).coordinators) == 4


@pytest.mark.parametrize(
    ("settings", "flags", "reason"),
    [
        # check_exposure's two refusals are tested in-process below: their process cases are slow.
        pytest.param({"diskless.listen": "0.0.0.0:0"}, [], "not a loopback address", marks=pytest.mark.slow),
        pytest.param(
            {"diskless.listen": "0.0.0.0:0"}, ["--allow-plaintext"], "without authorisation", marks=pytest.mark.slow
        ),
        ({"diskless.ssl.client.auth": "requested"}, [], "requested"),
        ({"diskless.ssl.certificate.location": "/nonexistent.crt"}, [], "diskless.ssl.key.location"),
        ({"diskless.ssl.ca.location": "/x.crt"}, [], "need TLS"),
    ],
)
def test_unsafe_or_incomplete_setups_refuse_to_start(
    tmp_path: Path, settings: dict[str, str], flags: list[str], reason: str
) -> None:
    config = tmp_path / "node.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    finished = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--data-dir", str(tmp_path / "d"), "--config", str(config),
         *flags],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert finished.returncode == 2, finished.stderr
    assert reason in finished.stderr


def test_tls_without_an_acl_refuses_to_start(tmp_path: Path) -> None:
    ca = issue("ca", ca=True)
    certificate, key = issue("localhost", ca, server=True).write(tmp_path, "node")
    settings = Settings().with_overrides(
        {"diskless.ssl.certificate.location": str(certificate), "diskless.ssl.key.location": str(key)}
    )
    with pytest.raises(SettingsError, match="without authorisation"):
        check_exposure(settings, tls=True)


def test_plaintext_is_allowed_off_loopback_only_with_the_flag_and_an_acl() -> None:
    wide = Settings().with_overrides({"diskless.listen": "192.0.2.1:9092"})
    with pytest.raises(SettingsError):
        check_exposure(wide, tls=False)
    allowed = wide.with_overrides({"diskless.allow.plaintext": "true", "diskless.acl.file": "/etc/acl"})
    check_exposure(allowed, tls=False)
    check_exposure(Settings(), tls=False)  # loopback, plaintext, no ACL: the embedded default


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.4.5", True), ("localhost", True), ("[::1]", True), ("0.0.0.0", False),
     ("::", False), ("10.0.0.1", False), ("example.com", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.slow
def test_operator_commands_speak_mutual_tls_and_obey_the_acl(cluster: Cluster) -> None:
    certificate, key = cluster.operator.write(cluster.tls_dir, "operator")
    tls = ["--bootstrap", cluster.server.address, "--ca", str(cluster.tls_dir / "ca.crt"),
           "--cert", str(certificate), "--key", str(key)]  # fmt: skip
    described = subprocess.run(
        [sys.executable, "-m", "coordinator", "describe", "--json", *tls],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    assert '"coordinator_id": 3' in described.stdout.replace("'", '"')
    refused = subprocess.run(
        [sys.executable, "-m", "coordinator", "snapshot", "create", *tls],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "ALTER" in refused.stderr


@pytest.mark.slow
def test_a_reader_process_obeys_the_same_tls_and_acl(cluster: Cluster) -> None:
    """FindBatches served by a reader process (diskless.server.read.processes, default 1): the node's TLS and ACL."""
    broker_stub = cluster.stub(cluster.broker)
    topic = Broker(broker_stub, 4).create_topic("secured-reads", 1)
    Broker(broker_stub, 4).commit(laid_out([batch(topic, 0, 3)]))
    found = broker_stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic, partitions=[0])]),
        timeout=10,
    )
    (reader,) = found.coordinators[0].replicas[0].read_addresses
    request = pb.FindBatchesRequest(
        fetch_max_bytes=1 << 20,
        topics=[pb.FindBatchesRequest.Topic(topic_id=topic, partitions=[pb.FindBatchesRequest.Partition(
            partition=0, offset=0, max_partition_fetch_bytes=1 << 20)])],
    )  # fmt: skip

    def reader_stub(client: Identity | None) -> pb_grpc.DisklessCoordinatorStub:
        return pb_grpc.DisklessCoordinatorStub(grpc.secure_channel(reader, channel_credentials(cluster.ca, client)))

    answer = reader_stub(cluster.broker).FindBatches(request, timeout=10)
    assert answer == broker_stub.FindBatches(request, timeout=10) and len(answer.topics[0].partitions[0].batches) == 1
    for refused_client in (None, cluster.stranger):  # no certificate, another CA: refused at the handshake
        with pytest.raises(grpc.RpcError) as refused:
            reader_stub(refused_client).FindBatches(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(reader) as plaintext, pytest.raises(grpc.RpcError) as refused:
        pb_grpc.DisklessCoordinatorStub(plaintext).FindBatches(request, timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.RpcError) as denied:  # DESCRIBE only: FindBatches needs CLUSTER_ACTION
        reader_stub(cluster.operator).FindBatches(request, timeout=10)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "User:operator" in (denied.value.details() or "")
