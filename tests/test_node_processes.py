"""A node spread over commit processes (`diskless.node.processes`, coordinator/node/processes/), through
`diskless serve`.

Brokers that send everything to the listen address keep working; a routing client reaches each commit process
directly; a commit process killed with -9 is started again and every acknowledged batch is served where it was.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, fetch, new_topic_id
from tests.test_coordinator_faults import (
    PARTITIONS,
    Acknowledged,
    assert_every_acknowledged_batch_served,
    commit_round,
    fill,
    wait_for,
)

COORDINATORS = 4
PROCESSES = 2
COMMIT_PROCESS_LINE = re.compile(r"commit process (\d+) \(pid (\d+)\) listening on port (\d+)")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path / "data", coordinators=COORDINATORS, settings={"diskless.node.processes": str(PROCESSES)}
    )
    yield process
    if process.process is not None and process.process.poll() is None:
        process.kill()


def commit_processes(node: ServerProcess) -> dict[int, tuple[int, int]]:
    """Commit process index -> (pid, port), the latest start of each, from the node's log."""
    found: dict[int, tuple[int, int]] = {}
    for line in list(node.output):
        match = COMMIT_PROCESS_LINE.search(line)
        if match:
            found[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
    return found


@pytest.mark.slow
def test_find_coordinator_names_the_commit_process_leading_each_coordinator_and_the_listen_address_serves_all(
    node: ServerProcess,
) -> None:
    node.start()
    acknowledged = fill(node, commits=30)
    ports = {index: port for index, (_, port) in commit_processes(node).items()}
    assert sorted(ports) == list(range(PROCESSES)) and node.port not in ports.values()
    found = node.stub.FindCoordinator(
        pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=acknowledged.topic_id, partitions=range(PARTITIONS))]
        )
    )
    assert all(p.error_code == pb.NONE for p in found.topics[0].partitions), found
    for endpoint in found.coordinators:
        assert endpoint.port == ports[endpoint.coordinator_id % PROCESSES], endpoint
    described = node.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest())
    assert [d.coordinator_id for d in described.coordinators] == list(range(COORDINATORS))
    assert all(d.error_code == pb.NONE and d.state == "ACTIVE" for d in described.coordinators), described
    assert sum(d.partition_count for d in described.coordinators) >= PARTITIONS
    # Through the listen address: every acknowledged batch, offsets contiguous, as a node alone serves them.
    assert_every_acknowledged_batch_served(node, acknowledged)
    offsets = node.stub.ListOffsets(
        pb.ListOffsetsRequest(
            topics=[
                pb.ListOffsetsRequest.Topic(
                    topic_id=acknowledged.topic_id,
                    partitions=[pb.ListOffsetsRequest.Partition(partition=p, timestamp=-1) for p in range(PARTITIONS)],
                )
            ]
        )
    )
    assert [p.offset for p in offsets.topics[0].partitions] == [30 * 3] * PARTITIONS, offsets
    assert fetch(node.stub, new_topic_id(), 0, 0).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    # DescribeFiles: each commit process answers for the coordinators it leads and asks the others (KnownFiles).
    key = next(iter(acknowledged.offsets[0].values()))[0]
    files = node.stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=[key, "wal/never-committed"])).files
    assert [(f.error_code, f.state) for f in files] == [(pb.NONE, pb.FILE_STATE_LIVE), (pb.NONE, pb.FILE_STATE_UNKNOWN)]


@pytest.mark.slow
def test_a_routing_client_commits_to_each_commit_process_directly(node: ServerProcess) -> None:
    import asyncio

    node.start()
    broker = Broker(node.stub, COORDINATORS)
    topic_id = broker.create_topic("routed", PARTITIONS)
    acknowledged = Acknowledged(topic_id)

    async def routed() -> set[str]:
        async with RoutingClient([node.address]) as client:
            await client.coordinators_of(topic_id, range(PARTITIONS))
            addresses = {route.leader_address for route in client.routes().values()}
            return {a for a in addresses if a is not None}

    addresses = asyncio.run(routed())
    ports = {port for _, port in commit_processes(node).values()}
    assert {int(a.rpartition(":")[2]) for a in addresses} == ports  # both commit processes, never the listen port
    for _ in range(5):
        response = commit_round(broker, acknowledged)
        assert all(r.error_code == pb.NONE for r in response.batches), response
    assert_every_acknowledged_batch_served(node, acknowledged)

    async def read_routed() -> list[pb.FindBatchesResponse.PartitionResult]:
        request = pb.FindBatchesRequest(
            fetch_max_bytes=1 << 30,
            topics=[pb.FindBatchesRequest.Topic(
                topic_id=topic_id,
                partitions=[pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1 << 30)
                            for p in range(PARTITIONS)],
            )],
        )  # fmt: skip
        async with RoutingClient([node.address]) as client:
            await client.find_batches(request)  # learns the routes: the next read goes in one call to the shared reader
            return list((await client.find_batches(request)).topics[0].partitions)

    for p, result in enumerate(asyncio.run(read_routed())):
        assert result.error_code == pb.NONE, result
        assert [b.base_offset for b in result.batches] == sorted(acknowledged.offsets[p]), result


@pytest.mark.slow
def test_a_killed_commit_process_is_started_again_and_loses_nothing_acknowledged(node: ServerProcess) -> None:
    node.start()
    acknowledged = fill(node, commits=40)
    pid, port = commit_processes(node)[1]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: commit_processes(node)[1][0] != pid, "commit process 1 is started again")
    assert commit_processes(node)[1][1] == port  # on the same port: brokers' routes stay right
    wait_for(lambda: node.health() == health_pb2.HealthCheckResponse.SERVING, "the node serves again")
    broker = Broker(node.stub, COORDINATORS)
    deadline = time.monotonic() + 30
    while True:  # the restarted process's coordinators answer retriably until loaded
        try:
            response = commit_round(broker, acknowledged)
        except grpc.RpcError:
            response = None
        if response is not None and all(r.error_code == pb.NONE for r in response.batches):
            break
        assert time.monotonic() < deadline, response
        time.sleep(0.1)
    assert_every_acknowledged_batch_served(node, acknowledged)
    assert node.stop() == 0
    assert all(not _alive(pid) for pid, _ in commit_processes(node).values())  # stopped with the node


def test_processes_are_refused_in_a_cluster_and_past_the_coordinator_count(tmp_path: Path) -> None:
    from coordinator.config.rules import check
    from coordinator.config.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match=r"diskless\.node\.processes"):
        check(Settings(data_dir=tmp_path, coordinators=2, node_processes=3))
    with pytest.raises(SettingsError, match=r"diskless\.node\.processes"):
        check(Settings(data_dir=tmp_path, node_processes=2, etcd_endpoints="127.0.0.1:2379"))
    with pytest.raises(SettingsError, match=r"diskless\.node\.processes"):
        check(Settings(data_dir=tmp_path, node_processes=0))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.slow
def test_topic_configs_are_changed_and_read_through_the_listen_address_and_each_commit_process(
    node: ServerProcess,
) -> None:
    """The first process runs AlterTopicConfigs (its commit processes pass it there), asking the process leading each
    coordinator; every process describes the change; offloads are refused through the listen address as directly."""
    node.start()
    topic_id = new_topic_id()
    created = node.stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[pb.CreatePartitionsRequest.Topic(
        topic_id=topic_id, name="configured", num_partitions=PARTITIONS,
        configs=[pb.TopicConfig(name="retention.ms", value="1000")])]))  # fmt: skip
    assert created.topics[0].error_code == pb.NONE, created
    stubs = [node.stub]
    for _, port in commit_processes(node).values():
        stubs.append(pb_grpc.DisklessCoordinatorStub(grpc.insecure_channel(f"127.0.0.1:{port}")))
    change = pb.AlterTopicConfigsRequest.Topic(
        topic_id=topic_id, set=[pb.TopicConfig(name="remote.storage.enable", value="true")], delete=["retention.ms"]
    )
    altered = stubs[-1].AlterTopicConfigs(pb.AlterTopicConfigsRequest(topics=[change]), timeout=30)
    assert altered.topics[0].error_code == pb.NONE, altered
    for stub in stubs:
        (result,) = stub.DescribeTopicConfigs(pb.DescribeTopicConfigsRequest(topic_ids=[topic_id]), timeout=30).topics
        assert {e.name: e.value for e in result.configs if not e.is_default} == {"remote.storage.enable": "true"}
    offload = pb.CommitRemoteLogSegmentsRequest(topics=[pb.CommitRemoteLogSegmentsRequest.Topic(
        topic_id=topic_id, partitions=[pb.CommitRemoteLogSegmentsRequest.Partition(partition=p, end_offset=1)
                                       for p in range(PARTITIONS)])])  # fmt: skip
    refused = node.stub.CommitRemoteLogSegments(offload, timeout=30).topics[0].partitions
    assert [r.error_code for r in refused] == [pb.OFFSET_OUT_OF_RANGE] * PARTITIONS  # allowed; nothing to offload
    node.restart()
    (result,) = node.stub.DescribeTopicConfigs(pb.DescribeTopicConfigsRequest(topic_ids=[topic_id]), timeout=30).topics
    assert {e.name: e.value for e in result.configs if not e.is_default} == {"remote.storage.enable": "true"}
