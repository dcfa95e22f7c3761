"""This coordinator as a benchmarked system: `diskless serve` processes (one node, or a cluster's) driven over gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.acknowledged import AcknowledgedBatches
from bench.cluster_views import readers_problem, replication_problem
from bench.systems import Counters, FindOutcome, FindPosition, process_tree, processes_counters
from bench.workload import CommitSpec
from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parent.parent
STARTUP_LINE = re.compile(r"listening on (\S+):(\d+),")
START_TIMEOUT_S = 600  # a large prebuilt state is loaded before the server listens
CALL_TIMEOUT_S = 60
STOP_TIMEOUT_S = 60
RECONNECT_BACKOFF_MS = 100
CLUSTER_READY_TIMEOUT_S = 120
CLUSTER_POLL_S = 0.05
DESCRIBE_TIMEOUT_S = 2.0
OUTPUT_LINES_KEPT = 200  # of each node's output, shown when it fails to start
MESSAGE_MAX_BYTES = 64 * 1024 * 1024


class CoordinatorServer:
    """One `diskless serve` node on a loopback port, with a properties file of settings.

    `arguments` are more `serve` flags (a cluster node's `--node-id` and `--etcd`). A restart keeps the data
    directory and the port the first start was given, so the address etcd and the other nodes hold stays right.
    """

    def __init__(
        self,
        data_dir: Path,
        coordinators: int,
        settings: dict[str, str],
        profile_to: Path | None = None,
        arguments: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.profile_to = profile_to  # run the server under cProfile, its stats written here on exit
        self.coordinators = coordinators
        self.settings = settings
        self.arguments = tuple(arguments)
        self.process: subprocess.Popen[str] | None = None
        self.port = 0  # 0 until the first start has bound one
        self.output: list[str] = []
        # The source tree the node runs from (bench.read_overload runs an older commit's node beside this bench).
        self.tree = REPO
        self._listening = threading.Event()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}" if self.port else ""

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Starts the node and returns once it listens (a cluster node: once the cluster has formed)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir.parent / f"{self.data_dir.name}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        self._listening.clear()
        self.process = subprocess.Popen(
            [sys.executable, *self._profiler(), "-m", "coordinator", "serve", "--data-dir", str(self.data_dir),
             "--listen", f"127.0.0.1:{self.port}", "--coordinators", str(self.coordinators), "--config", str(config),
             *self.arguments],
            cwd=self.tree, env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(self.tree)), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        # A thread reads the output, so the wait below has a deadline even if the node prints nothing.
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not self._listening.wait(timeout=0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"diskless serve {' '.join(self.arguments)} did not start within {timeout_s:.0f} s:\n"
                    + "".join(self.output[-20:])
                )

    def _profiler(self) -> list[str]:
        return [] if self.profile_to is None else ["-m", "cProfile", "-o", str(self.profile_to)]

    def _drain(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.output.append(line)
            del self.output[:-OUTPUT_LINES_KEPT]
            if not self._listening.is_set():
                match = STARTUP_LINE.search(line)
                if match:
                    self.port = int(match.group(2))
                    self._listening.set()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9: no drain; what the node had not fsynced is gone."""
        if self.running:
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        self.terminate()
        self.wait_stopped(STOP_TIMEOUT_S)

    def terminate(self) -> None:
        """SIGTERM: the node drains its calls and exits (`wait_stopped` waits for it)."""
        if self.running:
            assert self.process is not None
            self.process.terminate()

    def wait_stopped(self, timeout_s: float) -> None:
        """Waits for the node to exit; kill -9 if it has not within `timeout_s`."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


def _commit_request(topic_id: bytes, owners: Sequence[int], spec: CommitSpec) -> pb.CommitFileRequest:
    batch = pb.CommitFileRequest.Batch
    return pb.CommitFileRequest(
        object_key=spec.object_key,
        object_format=1,
        file_size=spec.file_size,
        uploader_broker_id=spec.broker_id,
        owner_ids=owners,
        batches=[
            batch(
                magic=2, topic_id=topic_id, partition=b.partition, byte_offset=b.byte_offset, size=b.size,
                base_offset=b.base_offset, last_offset=b.last_offset, batch_max_timestamp=b.max_timestamp,
                timestamp_type=pb.CREATE_TIME, producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                base_sequence=b.base_sequence, last_sequence=b.last_sequence,
            )
            for b in spec.batches
        ],
    )  # fmt: skip


class CoordinatorSystem:
    """`coordinator` (group commit), `coordinator-sequential` (pipeline.enable=false) or `coordinator-replicated`
    (three nodes of a cluster) over gRPC.

    The calls a broker makes go through the project's routing client, as a broker's would, bootstrapped from every
    node; health and the counters use a channel of their own to each node, and the counters sum over the nodes.
    """

    def __init__(self, name: str, servers: Sequence[CoordinatorServer]) -> None:
        if not servers:
            raise ValueError("a coordinator system needs at least one node")
        self.name = name
        self.servers = tuple(servers)
        self._channels: list[grpc.aio.Channel] = []
        self._client: RoutingClient | None = None
        self._topics: list[tuple[bytes, list[int]]] = []
        # Set by a scenario that checks afterwards that nothing acknowledged was lost (the failover).
        self.acknowledged: AcknowledgedBatches | None = None
        # A cluster's consumers each read from one replica (KIP-392), not each coordinator's leader: one client
        # per node preferring that node's replicas (`read_node_id`); set per scenario.
        self.reads_from_one_replica = False
        self._read_clients: list[RoutingClient] = []

    async def open(self) -> None:
        # Short reconnect backoff: a node killed and restarted (the failover) is described again at once.
        options = [("grpc.max_send_message_length", MESSAGE_MAX_BYTES),
                   ("grpc.max_receive_message_length", MESSAGE_MAX_BYTES),
                   ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
                   ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
                   ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS)]  # fmt: skip
        self._channels = [grpc.aio.insecure_channel(s.address, options=options) for s in self.servers]
        timeout_ms = CALL_TIMEOUT_S * 1000
        self._client = RoutingClient(
            [s.address for s in self.servers], deadline_ms=timeout_ms, rpc_timeout_ms=timeout_ms,
            message_max_bytes=MESSAGE_MAX_BYTES,
        )  # fmt: skip
        if len(self.servers) > 1:
            self._read_clients = [
                RoutingClient([s.address for s in self.servers], deadline_ms=timeout_ms, rpc_timeout_ms=timeout_ms,
                              message_max_bytes=MESSAGE_MAX_BYTES, read_node_id=node_id)
                for node_id in range(len(self.servers))
            ]  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        for channel in self._channels:
            if not await wait_serving(channel, deadline):
                raise RuntimeError(f"{self.name} not SERVING after {START_TIMEOUT_S} s")
        if len(self.servers) > 1:
            await self._wait_replicating()

    async def _wait_replicating(self) -> None:
        """Until every follower fetches from its leader: a follower whose first fetches found the leader still
        loading backs off (up to the session timeout), and the first figures would measure that wait. And until
        every node names every replica's readers: the client's first routes are the ones it keeps."""
        deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
        problem = "not asked yet"
        readers = self.servers[0].settings.get("diskless.server.read.processes", "1") != "0"
        while time.monotonic() < deadline:
            described = await self.described()
            problem = replication_problem(described) or (readers_problem(described) if readers else "")
            if not problem:
                return
            await asyncio.sleep(CLUSTER_POLL_S)
        raise RuntimeError(f"{self.name} not replicating after {CLUSTER_READY_TIMEOUT_S} s: {problem}")

    async def describe(self, node: int) -> list[pb.CoordinatorDescription] | None:
        """The node's own description of its coordinators; None if it does not answer (killed, starting)."""
        try:
            answer = await self.stub(node).DescribeCoordinators(
                pb.DescribeCoordinatorsRequest(), timeout=DESCRIBE_TIMEOUT_S
            )
        except grpc.aio.AioRpcError:
            return None
        return list(answer.coordinators)

    async def described(self, nodes: Sequence[int] | None = None) -> dict[int, list[pb.CoordinatorDescription] | None]:
        """Node id (its index) -> its description, for the nodes given (default every node)."""
        chosen = range(len(self.servers)) if nodes is None else nodes
        return {node: await self.describe(node) for node in chosen}

    def stub(self, node: int = 0) -> pb_grpc.DisklessCoordinatorAsyncStub:
        """A stub of the node's own channel (not routed): for what is asked of one node in particular."""
        return pb_grpc.DisklessCoordinatorStub(self._channels[node])

    @property
    def client(self) -> RoutingClient:
        assert self._client is not None
        return self._client

    def topic_id(self, topic: int) -> bytes:
        return self._topics[topic][0]

    async def create_topic(self, name: str, partitions: int) -> int:
        topic_id = uuid.uuid4().bytes
        created = await self.client.create_partitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
            )
        )
        if created.topics[0].error_code != pb.NONE:
            raise RuntimeError(f"CreatePartitions {name}: {created.topics[0]}")
        # The routes are cached here, so the load's calls are routed from the first one (on one node, the
        # client's fast path). In a cluster a node learns the partitions as its replicas apply the topic's
        # records, so the node asked may not know them all yet: asked again until it does.
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while True:
            found = await self.client.coordinators_of(topic_id, range(partitions))
            if -1 not in found:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{name}: partitions {found.count(-1)} without a coordinator after {CALL_TIMEOUT_S} s"
                )
            await asyncio.sleep(0.05)
        for read_client in self._read_clients:  # a follower read finds the topic once the follower applied it
            while -1 in await read_client.coordinators_of(topic_id, range(partitions)) or not await self._applied_on(
                read_client, topic_id, partitions
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: not on every replica after {CALL_TIMEOUT_S} s")
                await asyncio.sleep(0.05)
        self._topics.append((topic_id, sorted(set(found))))
        return len(self._topics) - 1

    @staticmethod
    async def _applied_on(read_client: RoutingClient, topic_id: bytes, partitions: int) -> bool:
        """Whether the replica the client reads from knows every partition (a follower may not have applied it)."""
        answer = await read_client.find_batches(
            pb.FindBatchesRequest(
                fetch_max_bytes=1,
                topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
                    pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1)
                    for p in range(partitions)])],
            )
        )  # fmt: skip
        return all(result.error_code == pb.NONE for result in answer.topics[0].partitions)

    async def commit(self, topic: int, spec: CommitSpec) -> int:
        topic_id, owners = self._topics[topic]
        response = await self.client.commit_file(_commit_request(topic_id, owners, spec))
        stored = 0
        for answer in response.batches:
            if answer.error_code != pb.NONE:
                raise RuntimeError(f"CommitFile {spec.object_key}: {answer}")
            stored += not answer.is_duplicate
        if stored != len(spec.batches) - spec.duplicates:
            raise RuntimeError(f"CommitFile {spec.object_key}: {stored} stored, {spec.duplicates} duplicates sent")
        if self.acknowledged is not None:
            self.acknowledged.add(
                spec.object_key,
                [(b.partition, a.assigned_base_offset) for b, a in zip(spec.batches, response.batches, strict=True)
                 if not a.is_duplicate],
            )  # fmt: skip
        return stored

    async def find(self, topic: int, positions: Sequence[FindPosition], fetch_max_bytes: int) -> list[FindOutcome]:
        topic_id, _ = self._topics[topic]
        request = pb.FindBatchesRequest(
            fetch_max_bytes=fetch_max_bytes,
            topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
                pb.FindBatchesRequest.Partition(partition=p.partition, offset=p.offset,
                                                max_partition_fetch_bytes=p.max_bytes) for p in positions])],
        )  # fmt: skip
        client = self.client
        if self.reads_from_one_replica and self._read_clients:
            # A consumer's partitions are fixed (bench/driver.py), so its first one fixes its replica: a consumer
            # never moves between replicas (an offset one gave may be past another's high watermark).
            client = self._read_clients[positions[0].partition % len(self._read_clients)]
        response = await client.find_batches(request)
        outcomes = []
        for position, result in zip(positions, response.topics[0].partitions, strict=True):
            if result.error_code != pb.NONE:
                raise RuntimeError(f"FindBatches partition {position.partition}: {result}")
            batches = result.batches
            next_offset = batches[-1].last_offset + 1 if batches else position.offset
            outcomes.append(FindOutcome(position.partition, len(batches), next_offset))
        return outcomes

    async def counters(self) -> Counters:
        """CPU and bytes written of every node's process; fsyncs of every replica's log (followers' included)."""
        fsyncs = 0
        for node in range(len(self.servers)):
            described = await self.stub(node).DescribeCoordinators(
                pb.DescribeCoordinatorsRequest(), timeout=CALL_TIMEOUT_S
            )
            fsyncs += sum(c.log_flush_count for c in described.coordinators)
        return processes_counters([pid for s in self.servers for pid in process_tree(s.pid)], fsyncs)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        for read_client in self._read_clients:
            await read_client.close()
        self._read_clients = []
        for channel in self._channels:
            await channel.close()
        self._channels = []


async def wait_serving(channel: grpc.aio.Channel, deadline: float) -> bool:
    """Whether the node behind `channel` answers the health check SERVING before `deadline` (monotonic)."""
    health = health_pb2_grpc.HealthStub(channel)
    while time.monotonic() < deadline:
        with contextlib.suppress(grpc.aio.AioRpcError):
            answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                return True
        await asyncio.sleep(0.05)
    return False
