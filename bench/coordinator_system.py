"""This coordinator as a benchmarked system: a `diskless serve` process driven over gRPC."""

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

from bench.systems import Counters, FindOutcome, FindPosition, process_cpu_s, process_write_bytes
from bench.workload import CommitSpec
from coordinator.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parent.parent
STARTUP_LINE = re.compile(r"listening on (\S+):(\d+),")
START_TIMEOUT_S = 600  # a large prebuilt state is loaded before the server listens
CALL_TIMEOUT_S = 60
MESSAGE_MAX_BYTES = 64 * 1024 * 1024


class CoordinatorServer:
    """One `diskless serve` node on a loopback port, with a properties file of settings."""

    def __init__(
        self, data_dir: Path, coordinators: int, settings: dict[str, str], profile_to: Path | None = None
    ) -> None:
        self.data_dir = data_dir
        self.profile_to = profile_to  # run the server under cProfile, its stats written here on exit
        self.coordinators = coordinators
        self.settings = settings
        self.process: subprocess.Popen[str] | None = None
        self.address = ""
        self.output: list[str] = []

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir.parent / f"{self.data_dir.name}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        self.process = subprocess.Popen(
            [sys.executable, *self._profiler(), "-m", "coordinator", "serve", "--data-dir", str(self.data_dir),
             "--listen", "127.0.0.1:0", "--coordinators", str(self.coordinators), "--config", str(config)],
            cwd=REPO, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        for line in self.process.stdout:
            self.output.append(line)
            match = STARTUP_LINE.search(line)
            if match:
                self.address = f"127.0.0.1:{match.group(2)}"
                break
            if time.monotonic() > deadline:
                break
        if not self.address:
            self.stop()
            raise RuntimeError("diskless serve did not start:\n" + "".join(self.output[-20:]))
        threading.Thread(target=self._drain, daemon=True).start()

    def _profiler(self) -> list[str]:
        return [] if self.profile_to is None else ["-m", "cProfile", "-o", str(self.profile_to)]

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            del self.output[:-200]

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


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
    """`coordinator` (group commit) or `coordinator-sequential` (pipeline.enable=false) over gRPC.

    The calls a broker makes go through the project's routing client, as a broker's would; health and the
    counters use a channel of their own.
    """

    def __init__(self, name: str, server: CoordinatorServer) -> None:
        self.name = name
        self.server = server
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.DisklessCoordinatorAsyncStub | None = None
        self._client: RoutingClient | None = None
        self._topics: list[tuple[bytes, list[int]]] = []

    async def open(self) -> None:
        options = [("grpc.max_send_message_length", MESSAGE_MAX_BYTES),
                   ("grpc.max_receive_message_length", MESSAGE_MAX_BYTES)]  # fmt: skip
        self._channel = grpc.aio.insecure_channel(self.server.address, options=options)
        self._stub = pb_grpc.DisklessCoordinatorStub(self._channel)
        timeout_ms = CALL_TIMEOUT_S * 1000
        self._client = RoutingClient(
            self.server.address, deadline_ms=timeout_ms, rpc_timeout_ms=timeout_ms, message_max_bytes=MESSAGE_MAX_BYTES
        )
        await self._channel.channel_ready()
        health = health_pb2_grpc.HealthStub(self._channel)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(grpc.aio.AioRpcError):
                answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} not SERVING after {START_TIMEOUT_S} s")

    @property
    def stub(self) -> pb_grpc.DisklessCoordinatorAsyncStub:
        assert self._stub is not None
        return self._stub

    @property
    def client(self) -> RoutingClient:
        assert self._client is not None
        return self._client

    async def create_topic(self, name: str, partitions: int) -> int:
        topic_id = uuid.uuid4().bytes
        created = await self.client.create_partitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
            )
        )
        if created.topics[0].error_code != pb.NONE:
            raise RuntimeError(f"CreatePartitions {name}: {created.topics[0]}")
        # The routes are cached here, so the load's calls take the client's fast path from the first one.
        owners = sorted(set(await self.client.coordinators_of(topic_id, range(partitions))))
        self._topics.append((topic_id, owners))
        return len(self._topics) - 1

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
        return stored

    async def find(self, topic: int, positions: Sequence[FindPosition], fetch_max_bytes: int) -> list[FindOutcome]:
        topic_id, _ = self._topics[topic]
        request = pb.FindBatchesRequest(
            fetch_max_bytes=fetch_max_bytes,
            topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
                pb.FindBatchesRequest.Partition(partition=p.partition, offset=p.offset,
                                                max_partition_fetch_bytes=p.max_bytes) for p in positions])],
        )  # fmt: skip
        response = await self.client.find_batches(request)
        outcomes = []
        for position, result in zip(positions, response.topics[0].partitions, strict=True):
            if result.error_code != pb.NONE:
                raise RuntimeError(f"FindBatches partition {position.partition}: {result}")
            batches = result.batches
            next_offset = batches[-1].last_offset + 1 if batches else position.offset
            outcomes.append(FindOutcome(position.partition, len(batches), next_offset))
        return outcomes

    async def counters(self) -> Counters:
        described = await self.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=CALL_TIMEOUT_S)
        fsyncs = sum(c.log_flush_count for c in described.coordinators)
        return Counters(process_cpu_s(self.server.pid), process_write_bytes(self.server.pid), fsyncs)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
