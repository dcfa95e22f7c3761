"""A real `diskless serve` process for tests: started, probed through gRPC health, killed or stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.machine.topic_names import coordinator_for_new_partition
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parent.parent
STARTUP_LINE = re.compile(r"listening on (\S+):(\d+),")
START_TIMEOUT_S = 60
# Most tests assert exact log positions and counts: the WAL-file workers (which append hand-overs and
# deletions in the background) stay idle unless a test sets its own interval (tests/test_wal_files*.py do).
QUIET_FILE_WORKERS = {"diskless.coordinator.file.worker.interval.ms": "3600000"}
# DISKLESS_TEST_NODE_PROCESSES=2 runs every `diskless serve` of the tests spread over 2 commit processes.
NODE_PROCESSES = (
    {"diskless.node.processes": os.environ["DISKLESS_TEST_NODE_PROCESSES"]}
    if os.environ.get("DISKLESS_TEST_NODE_PROCESSES")
    else {}
)


class ServerProcess:
    """One node on a fresh port; `restart()` keeps its data directory."""

    def __init__(
        self,
        data_dir: Path,
        coordinators: int = 4,
        settings: dict[str, str] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        arguments: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.arguments = tuple(arguments)  # more `serve` flags (a cluster node's --node-id, --etcd)
        self.coordinators = coordinators
        # What follows the interpreter: the `diskless` command, or a launcher that crashes it at a fault point.
        self.launcher: tuple[str, ...] = ("-m", "coordinator")
        # What precedes the interpreter (`ip netns exec NAME`: tests/netns_cluster.py) and the host it listens on.
        self.command_prefix: tuple[str, ...] = ()
        self.host = "127.0.0.1"
        self.settings = {**QUIET_FILE_WORKERS, **NODE_PROCESSES, **(settings or {})}
        self.credentials = credentials  # TLS for the test's own channel (and health probe)
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.output: list[str] = []
        self._channel: grpc.Channel | None = None
        self.stub: pb_grpc.DisklessCoordinatorStub

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, wait_serving: bool = True) -> ServerProcess:
        """Starts the node; waits for health SERVING unless told not to (a node with a coordinator out)."""
        config = self.data_dir.parent / f"{self.data_dir.name}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [*self.command_prefix, sys.executable, *self.launcher, "serve", "--data-dir", str(self.data_dir),
             "--listen", f"{self.host}:{self.port}", "--coordinators", str(self.coordinators), "--config", str(config),
             *self.arguments],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            match = STARTUP_LINE.search(line)
            if match:
                self.port = int(match.group(2))
                break
            if time.monotonic() > deadline:
                break
        else:
            raise RuntimeError(f"server exited before listening:\n{''.join(self.output)}")
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        self._channel = (
            grpc.secure_channel(self.address, self.credentials)
            if self.credentials is not None
            else grpc.insecure_channel(self.address)
        )
        self.stub = pb_grpc.DisklessCoordinatorStub(self._channel)
        if wait_serving:
            self.wait_serving(deadline)
        return self

    def health(self) -> int:
        """The node's health status now (health_pb2.HealthCheckResponse.SERVING, NOT_SERVING, ...)."""
        assert self._channel is not None
        return health_pb2_grpc.HealthStub(self._channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status

    def _drain(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.output.append(line)

    def wait_serving(self, deadline: float) -> None:
        health = health_pb2_grpc.HealthStub(self._channel)
        while time.monotonic() < deadline:
            try:
                status = health.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"server not SERVING in time:\n{''.join(self.output)}")

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def kill(self) -> None:
        """kill -9: no drain, no flush beyond what was fsynced."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._close_channel()

    def stop(self) -> int:
        """SIGTERM; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self._close_channel()
        return code

    def restart(self, kill: bool = False) -> ServerProcess:
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()


def new_topic_id() -> bytes:
    return uuid.uuid4().bytes


class Broker:
    """A small client speaking the contract the way a diskless broker does."""

    def __init__(self, stub: pb_grpc.DisklessCoordinatorStub, coordinators: int) -> None:
        self.stub = stub
        self.coordinators = coordinators
        self._files = 0

    def create_topic(self, name: str, partitions: int, topic_id: bytes | None = None) -> bytes:
        topic_id = topic_id or new_topic_id()
        response = self.stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
            )
        )
        assert response.topics[0].error_code == pb.NONE, response
        return topic_id

    def owners_of(self, batches: Sequence[pb.CommitFileRequest.Batch]) -> list[int]:
        found = self.stub.FindCoordinator(
            pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=b.topic_id, partitions=[b.partition]) for b in batches]
            )
        )
        owners: list[int] = []
        for topic in found.topics:
            for partition in topic.partitions:
                # A coordinator out of service answers retriably (no id): a broker would ask again; placement is a
                # function of topic and partition, so the harness takes the id that answer would give.
                coordinator_id = (
                    partition.coordinator_id
                    if partition.coordinator_id >= 0
                    else coordinator_for_new_partition(topic.topic_id, partition.partition, self.coordinators)
                )
                if coordinator_id not in owners:
                    owners.append(coordinator_id)
        return owners or [0]

    def commit(
        self,
        batches: Sequence[pb.CommitFileRequest.Batch],
        object_key: str | None = None,
        owner_ids: Sequence[int] | None = None,
        file_size: int | None = None,
        timeout: float = 30,
    ) -> pb.CommitFileResponse:
        self._files += 1
        return self.stub.CommitFile(
            pb.CommitFileRequest(
                object_key=object_key or f"wal/{uuid.uuid4()}",
                object_format=1,
                file_size=file_size if file_size is not None else max(b.byte_offset + b.size for b in batches),
                uploader_broker_id=1,
                owner_ids=self.owners_of(batches) if owner_ids is None else owner_ids,
                batches=batches,
            ),
            timeout=timeout,
        )


def batch(
    topic_id: bytes,
    partition: int,
    records: int = 1,
    *,
    byte_offset: int = 0,
    size: int = 100,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    magic: int = 2,
    timestamp_type: int = pb.CREATE_TIME,
    max_timestamp: int = 1_700_000_000_000,
) -> pb.CommitFileRequest.Batch:
    """A batch as a producer wrote it (base offset 0), with consistent producer fields."""
    idempotent = producer_id >= 0
    return pb.CommitFileRequest.Batch(
        magic=magic,
        topic_id=topic_id,
        partition=partition,
        byte_offset=byte_offset,
        size=size,
        base_offset=0,
        last_offset=records - 1,
        batch_max_timestamp=max_timestamp,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=epoch if idempotent else -1,
        base_sequence=sequence if idempotent else -1,
        last_sequence=((sequence + records - 1) % 2**31) if idempotent else -1,
    )


def laid_out(batches: Sequence[pb.CommitFileRequest.Batch]) -> list[pb.CommitFileRequest.Batch]:
    """The batches placed one after another in a file."""
    position = 0
    for b in batches:
        b.byte_offset = position
        position += b.size
    return list(batches)


# ---------------------------------------------------------------- small read helpers for the semantics tests


def topic_name(prefix: str = "t") -> str:
    """A topic name no other test uses (the `server` fixture is shared by a module)."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def coordinator_of(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int) -> int:
    found = stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[partition])])
    )
    return found.topics[0].partitions[0].coordinator_id


def list_offset(
    stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int, timestamp: int
) -> pb.ListOffsetsResponse.PartitionResult:
    response = stub.ListOffsets(
        pb.ListOffsetsRequest(
            topics=[
                pb.ListOffsetsRequest.Topic(
                    topic_id=topic_id,
                    partitions=[pb.ListOffsetsRequest.Partition(partition=partition, timestamp=timestamp)],
                )
            ]
        )
    )
    return response.topics[0].partitions[0]


def high_watermark(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int) -> int:
    result = list_offset(stub, topic_id, partition, -1)
    assert result.error_code == pb.NONE, result
    return result.offset


def log_start(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int) -> int:
    result = list_offset(stub, topic_id, partition, -2)
    assert result.error_code == pb.NONE, result
    return result.offset


def fetch(
    stub: pb_grpc.DisklessCoordinatorStub,
    topic_id: bytes,
    partition: int,
    offset: int,
    *,
    partition_max_bytes: int = 2**31 - 1,
    fetch_max_bytes: int = 2**31 - 1,
    max_batches: int = 0,
) -> pb.FindBatchesResponse.PartitionResult:
    response = stub.FindBatches(
        pb.FindBatchesRequest(
            fetch_max_bytes=fetch_max_bytes,
            max_batches_per_partition=max_batches,
            topics=[
                pb.FindBatchesRequest.Topic(
                    topic_id=topic_id,
                    partitions=[
                        pb.FindBatchesRequest.Partition(
                            partition=partition, offset=offset, max_partition_fetch_bytes=partition_max_bytes
                        )
                    ],
                )
            ],
        )
    )
    return response.topics[0].partitions[0]


def delete_records(
    stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int, offset: int
) -> pb.DeleteRecordsResponse.PartitionResult:
    response = stub.DeleteRecords(
        pb.DeleteRecordsRequest(
            topics=[
                pb.DeleteRecordsRequest.Topic(
                    topic_id=topic_id,
                    partitions=[pb.DeleteRecordsRequest.Partition(partition=partition, offset=offset)],
                )
            ]
        )
    )
    return response.topics[0].partitions[0]


def describe_file(stub: pb_grpc.DisklessCoordinatorStub, object_key: str) -> pb.DescribeFilesResponse.FileResult:
    return stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=[object_key])).files[0]


def describe_coordinator(stub: pb_grpc.DisklessCoordinatorStub, coordinator_id: int) -> pb.CoordinatorDescription:
    return stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(coordinator_ids=[coordinator_id])).coordinators[0]


# ---------------------------------------------------------------------- recovery and invariant helpers

INT32_MAX = 2**31 - 1


def describe_coordinators(stub: pb_grpc.DisklessCoordinatorStub) -> dict[int, pb.CoordinatorDescription]:
    """DescribeCoordinators of every coordinator on the node, by id."""
    response = stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=30)
    return {c.coordinator_id: c for c in response.coordinators}


def coordinators_of(stub: pb_grpc.DisklessCoordinatorStub, topics: dict[bytes, int]) -> dict[tuple[bytes, int], int]:
    """(topic id, partition) -> coordinator id, for `topics` (topic id -> partition count)."""
    found = stub.FindCoordinator(
        pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=t, partitions=range(n)) for t, n in topics.items()]
        ),
        timeout=30,
    )
    result = {}
    for topic in found.topics:
        for partition in topic.partitions:
            assert partition.error_code == pb.NONE, partition
            result[(topic.topic_id, partition.partition)] = partition.coordinator_id
    return result


def find_batches_request(topic_id: bytes, partition: int, offset: int, batches_max: int = 0) -> pb.FindBatchesRequest:
    """FindBatches of one partition from `offset`, bounded only by `batches_max` (0: none)."""
    wanted = pb.FindBatchesRequest.Partition(partition=partition, offset=offset, max_partition_fetch_bytes=INT32_MAX)
    return pb.FindBatchesRequest(
        fetch_max_bytes=INT32_MAX,
        max_batches_per_partition=batches_max,
        topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[wanted])],
    )


def fetch_all_batches(
    stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int
) -> tuple[list[pb.BatchInfo], int, int]:
    """Every batch of a partition from its log start, paging through FindBatches: (batches, log start, HWM)."""
    batches: list[pb.BatchInfo] = []
    offset = None
    while True:
        request = find_batches_request(topic_id, partition, 0 if offset is None else offset)
        result = stub.FindBatches(request, timeout=30).topics[0].partitions[0]
        if offset is None and result.error_code == pb.OFFSET_OUT_OF_RANGE and result.log_start_offset > 0:
            offset = result.log_start_offset  # records were deleted: start at the log start
            continue
        assert result.error_code == pb.NONE, result
        batches.extend(result.batches)
        if not result.batches or result.batches[-1].last_offset + 1 >= result.high_watermark:
            return batches, result.log_start_offset, result.high_watermark
        offset = result.batches[-1].last_offset + 1


def coordinator_state_files(data_dir: Path, coordinator_id: int) -> list[Path]:
    """A coordinator's SQLite state: the database and its -wal and -shm companions."""
    state = data_dir / f"coordinator-{coordinator_id}" / "state.sqlite"
    return [state, state.with_name("state.sqlite-wal"), state.with_name("state.sqlite-shm")]


def assert_state_equals_log_rebuild(data_dir: Path, coordinators: int, scratch: Path) -> dict[int, dict]:
    """I1 on a stopped node: each coordinator's state.sqlite equals a rebuild from its whole log.

    Returns the logical dumps by coordinator id.
    """
    from coordinator.runtime.shard.log_replay import logical_dump, rebuild_from_log

    scratch.mkdir(parents=True, exist_ok=True)
    dumps = {}
    for coordinator_id in range(coordinators):
        directory = data_dir / f"coordinator-{coordinator_id}"
        rebuilt = scratch / f"rebuilt-{coordinator_id}-{uuid.uuid4().hex}.sqlite"
        rebuild_from_log(directory, coordinator_id, rebuilt)
        live = logical_dump(directory / "state.sqlite")
        expected = logical_dump(rebuilt)
        for table in expected:
            assert live[table] == expected[table], (
                f"I1: coordinator {coordinator_id}'s table {table} differs from a rebuild from its log: "
                f"only live {sorted(set(live[table]) - set(expected[table]))[:5]}, "
                f"only rebuilt {sorted(set(expected[table]) - set(live[table]))[:5]}"
            )
        dumps[coordinator_id] = live
    return dumps
