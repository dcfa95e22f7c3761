"""A real cluster for tests: an etcd of its own and `diskless serve --node-id --etcd` node processes."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc

from coordinator.cluster.local_etcd import EtcdCluster
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import ServerProcess

T = TypeVar("T")

# Short session and refresh times so failovers take seconds in tests (the defaults are 3 s and 200 ms).
CLUSTER_SETTINGS = {
    "diskless.node.session.timeout.ms": "2000",
    "diskless.node.heartbeat.interval.ms": "250",
    "diskless.cluster.refresh.interval.ms": "100",
    "diskless.coordinator.replica.lag.time.max.ms": "4000",
    "diskless.coordinator.replica.fetch.wait.max.ms": "200",
    "diskless.shutdown.drain.timeout.ms": "2000",
}
RETRIABLE = {
    pb.NOT_COORDINATOR,
    pb.NOT_LEADER_OR_FOLLOWER,
    pb.COORDINATOR_NOT_AVAILABLE,
    pb.COORDINATOR_LOAD_IN_PROGRESS,
    pb.REQUEST_TIMED_OUT,
    pb.NOT_ENOUGH_REPLICAS,
    pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
}


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 30.0, every_s: float = 0.1) -> T:
    """Polls `probe` until it returns something true (a non-empty list, True, a node); fails naming `what`."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (grpc.RpcError, AssertionError) as error:  # not there yet: a node loading, a read refused
            last_error = error
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {timeout_s} s (last error: {last_error})")


class Cluster:
    """`size` nodes on one etcd; nodes keep their ports and data directories across restarts."""

    def __init__(
        self, directory: Path, size: int = 3, coordinators: int = 2, settings: dict[str, str] | None = None
    ) -> None:
        self.etcd = EtcdCluster(directory / "etcd")
        self.coordinators = coordinators
        self.nodes = [
            ServerProcess(
                directory / f"node{i}",
                coordinators=coordinators,
                settings={**CLUSTER_SETTINGS, **(settings or {})},
                arguments=["--node-id", str(i), "--etcd", "ETCD"],
            )
            for i in range(size)
        ]

    def start(self) -> Cluster:
        self.etcd.start()
        for node in self.nodes:
            node.arguments = tuple(self.etcd.endpoints if a == "ETCD" else a for a in node.arguments)
        starting = [threading.Thread(target=node.start) for node in self.nodes]  # they form together
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                raise RuntimeError("a node did not start:\n" + "".join(node.output))
        return self

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGCONT)
                node.kill()
        self.etcd.stop()

    def live(self) -> list[ServerProcess]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def node_at(self, port: int) -> ServerProcess:
        return next(n for n in self.nodes if n.port == port)

    def describe(self, node: ServerProcess, coordinator_id: int) -> pb.CoordinatorDescription:
        answer = node.stub.DescribeCoordinators(
            pb.DescribeCoordinatorsRequest(coordinator_ids=[coordinator_id]), timeout=5
        )
        return answer.coordinators[0]

    def leader_of(self, coordinator_id: int, among: Sequence[ServerProcess] | None = None) -> ServerProcess | None:
        """The node that says it leads the coordinator and serves it, or None."""
        for node in among if among is not None else self.live():
            try:
                description = self.describe(node, coordinator_id)
            except grpc.RpcError:
                continue
            if description.error_code == pb.NONE and description.role == "LEADER":
                return node
        return None

    def create_topic(self, name: str, partitions: int) -> bytes:
        topic_id = uuid.uuid4().bytes
        request = pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
        )
        answer = self.live()[0].stub.CreatePartitions(request, timeout=30)
        assert answer.topics[0].error_code == pb.NONE, answer
        # Each node learns the partitions as its replicas apply them (up to their high watermark).
        for node in self.live():
            wait_for(f"node {node.port} knows the topic", lambda n=node: self.coordinator_of(n, topic_id, 0) >= 0)
        return topic_id

    @staticmethod
    def coordinator_of(node: ServerProcess, topic_id: bytes, partition: int) -> int:
        return coordinator_of(node.stub, topic_id, partition)


def coordinator_of(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int) -> int:
    """The partition's coordinator as the node behind `stub` knows it (-1 when it does not)."""
    found = stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[partition])]),
        timeout=5,
    )
    return found.topics[0].partitions[0].coordinator_id


def stub_at(address: str) -> pb_grpc.DisklessCoordinatorStub:
    return pb_grpc.DisklessCoordinatorStub(grpc.insecure_channel(address))
