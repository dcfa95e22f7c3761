"""A real cluster for tests: an etcd of its own (one member or several) and `diskless serve --node-id --etcd` node
processes, which tests kill, pause and restart."""

from __future__ import annotations

import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc

from bench.local_etcd import EtcdCluster
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
# etcd's election scaled with the short session: a renewal in flight when etcd's leader dies waits for the next
# leader (its election timeout, randomized up to twice that, then a poll of one more timeout on the member that
# forwards it), and must still come back within the session. etcd's default 1000 ms cannot (see the etcd fault test).
ETCD_ELECTION_TIMEOUT_MS = 500
LOG_RECORD_START = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")  # a node's log line begins with its time
RETRIABLE = {
    pb.NOT_COORDINATOR,
    pb.NOT_LEADER_OR_FOLLOWER,
    pb.COORDINATOR_NOT_AVAILABLE,
    pb.COORDINATOR_LOAD_IN_PROGRESS,
    pb.REQUEST_TIMED_OUT,
    pb.NOT_ENOUGH_REPLICAS,
    pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
}


_RETRIABLE_TOPIC_ERRORS = frozenset({pb.COORDINATOR_NOT_AVAILABLE, pb.NOT_COORDINATOR, pb.COORDINATOR_LOAD_IN_PROGRESS})


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
        self,
        directory: Path,
        size: int = 3,
        coordinators: int = 2,
        settings: dict[str, str] | None = None,
        etcd_members: int = 1,
        etcd_election_timeout_ms: int | None = ETCD_ELECTION_TIMEOUT_MS,
    ) -> None:
        self.etcd = EtcdCluster(directory / "etcd", size=etcd_members, election_timeout_ms=etcd_election_timeout_ms)
        self.coordinators = coordinators
        self.paused: set[int] = set()  # node ids stopped by SIGSTOP
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
        """Starts etcd and every node; stops whatever started if a node does not."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Cluster:
        self.etcd.start()
        wait_for("an etcd leader", self.etcd.leader, timeout_s=20)  # nodes' first requests need one
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

    def log_lines(self, *texts: str, since: Sequence[int] | None = None) -> list[str]:
        """The nodes' log lines holding any of `texts` (from line `since[node id]` of each node's output on)."""
        return [
            f"node {node_id}: {line.rstrip()}"
            for node_id, node in enumerate(self.nodes)
            for line in node.output[since[node_id] if since else 0 :]
            if any(text in line for text in texts)
        ]

    def log_blocks(self, *texts: str, lines_max: int = 40) -> list[str]:
        """As `log_lines`, each with the lines that follow it up to the next log record (a traceback's frames and
        its exception), at most `lines_max`."""
        blocks = []
        for node_id, node in enumerate(self.nodes):
            output, after_block = list(node.output), 0
            for index, line in enumerate(output):
                if index >= after_block and any(text in line for text in texts):
                    block = [line.rstrip()]
                    for following in output[index + 1 : index + lines_max]:
                        if LOG_RECORD_START.match(following):
                            break
                        block.append(following.rstrip())
                    after_block = index + len(block)  # a CRITICAL line's own traceback is part of its block
                    blocks.append(f"node {node_id}: " + "\n".join(block))
        return blocks

    def print_state(self, last_lines: int = 40) -> None:
        """What each node says of its coordinators, and its last log lines (shown when a test fails)."""
        for node in self.live():
            try:
                for c in node.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=2).coordinators:
                    print(
                        f"node {node.arguments[1]} coordinator {c.coordinator_id}: {c.role} {c.state} isr "
                        f"{list(c.isr)} hw {c.high_watermark} leo {c.log_end_offset} {c.error_message}"
                    )
            except grpc.RpcError as error:
                print(f"node {node.arguments[1]}: {error.code()}")
        for node in self.nodes:
            lines = "".join(node.output[-last_lines:])
            print(f"--- node {node.arguments[1]} (port {node.port}), last lines:\n{lines}")

    @property
    def addresses(self) -> list[str]:
        """Every node's HOST:PORT (a node keeps its port across restarts)."""
        return [node.address for node in self.nodes]

    def pause(self, node: ServerProcess) -> None:
        """SIGSTOP: the node neither answers nor renews its session until `resume`."""
        assert node.process is not None
        node.process.send_signal(signal.SIGSTOP)
        self.paused.add(self.nodes.index(node))

    def resume(self, node: ServerProcess) -> None:
        assert node.process is not None
        node.process.send_signal(signal.SIGCONT)
        self.paused.discard(self.nodes.index(node))

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

    def descriptions(self, node: ServerProcess) -> dict[int, pb.CoordinatorDescription]:
        """Every coordinator as the node describes its own replica, by coordinator id."""
        answer = node.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=5)
        return {c.coordinator_id: c for c in answer.coordinators}

    def leaders(self) -> dict[int, int]:
        """coordinator id -> node id of the node that leads and serves it now (coordinators without one left out)."""
        found: dict[int, int] = {}
        for node in self.live():
            if self.nodes.index(node) in self.paused:
                continue
            try:
                described = self.descriptions(node)
            except grpc.RpcError:
                continue
            for coordinator_id, description in described.items():
                if description.error_code == pb.NONE and description.role == "LEADER":
                    found[coordinator_id] = self.nodes.index(node)
        return found

    def fully_in_sync(self) -> dict[int, pb.CoordinatorDescription] | None:
        """Each coordinator's leader description, if every node runs and every coordinator has one leader serving
        with every replica in its ISR and every other replica following it in the same epoch; else None."""
        if self.paused or len(self.live()) != len(self.nodes):
            return None
        described = [self.descriptions(node) for node in self.nodes]  # a node not answering raises: not yet
        in_sync: dict[int, pb.CoordinatorDescription] = {}
        for coordinator_id in range(self.coordinators):
            replicas = [d[coordinator_id] for d in described]
            leaders = [r for r in replicas if r.role == "LEADER" and r.error_code == pb.NONE and r.state == "ACTIVE"]
            if len(leaders) != 1:
                return None
            leader = leaders[0]
            if sorted(leader.isr) != sorted(leader.replica_node_ids) or len(leader.isr) != len(self.nodes):
                return None
            followers_ok = all(
                r.role == "FOLLOWER" and r.state == "ACTIVE" and r.leader.leader_epoch == leader.leader.leader_epoch
                for r in replicas
                if r is not leader
            )
            if not followers_ok:
                return None
            in_sync[coordinator_id] = leader
        return in_sync

    def wait_fully_in_sync(self, timeout_s: float = 60.0) -> dict[int, pb.CoordinatorDescription]:
        return wait_for("every coordinator led with its full ISR", self.fully_in_sync, timeout_s=timeout_s)

    def create_topic(self, name: str, partitions: int) -> bytes:
        topic_id = uuid.uuid4().bytes
        request = pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
        )

        # As a broker does: a retriable refusal (a cluster still electing its first leaders on a loaded machine) is
        # asked again; CreatePartitions of the same id and count is idempotent.
        def created() -> pb.CreatePartitionsResponse | None:
            answer = self.live()[0].stub.CreatePartitions(request, timeout=30)
            return None if answer.topics[0].error_code in _RETRIABLE_TOPIC_ERRORS else answer

        answer = wait_for(f"topic {name} created", created)
        assert answer.topics[0].error_code == pb.NONE, answer
        # Each node learns the partitions as its replicas apply them (up to their high watermark).
        for node in self.live():

            def knows(node: ServerProcess = node) -> bool:
                return self.coordinator_of(node, topic_id, 0) >= 0

            wait_for(f"node {node.port} knows the topic", knows)
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
