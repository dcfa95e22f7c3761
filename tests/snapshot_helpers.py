"""Helpers shared by the snapshot tests: fill a node, read back everything it serves, inspect its files."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import grpc

from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, batch, fetch_all_batches, laid_out
from tests.in_process import InProcessNode

COORDINATORS = 2
# Small segments so that snapshots prune several; automatic snapshots off unless a test turns them on.
MANUAL_SNAPSHOTS = {
    "diskless.coordinator.log.segment.bytes": "1024",
    "diskless.coordinator.snapshot.interval.bytes": "0",
    "diskless.coordinator.snapshot.interval.ms": "0",
}

Served = dict[tuple[bytes, int], tuple[list[pb.BatchInfo], int, int]]


def admin_stub(server: ServerProcess | InProcessNode) -> admin_pb2_grpc.CoordinatorAdminStub:
    assert server._channel is not None
    return admin_pb2_grpc.CoordinatorAdminStub(server._channel)


def create_snapshots(server: ServerProcess | InProcessNode) -> admin.CreateSnapshotResponse:
    response = admin_stub(server).CreateSnapshot(admin.CreateSnapshotRequest(), timeout=60)
    for result in response.results:
        assert result.error_code == pb.NONE, result
    return response


def fill(broker: Broker, topics: dict[bytes, int], files: int, seed: int = 0) -> None:
    """Commits `files` files of 1..3 batches over the topics' partitions."""
    partitions = [(t, p) for t, n in topics.items() for p in range(n)]
    for i in range(files):
        chosen = [partitions[(seed + i * 7 + j) % len(partitions)] for j in range(1 + i % 3)]
        response = broker.commit(
            laid_out([batch(t, p, 1 + (i + j) % 4, size=100 + j) for j, (t, p) in enumerate(chosen)])
        )
        assert all(b.error_code == pb.NONE for b in response.batches), response


def served(server: ServerProcess | InProcessNode, topics: dict[bytes, int]) -> Served:
    return {(t, p): fetch_all_batches(server.stub, t, p) for t, n in topics.items() for p in range(n)}


def segment_bases(coordinator_directory: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (coordinator_directory / "log").glob("*.log"))


def snapshot_names(coordinator_directory: Path) -> list[str]:
    return sorted(p.name for p in (coordinator_directory / "snapshots").glob("*"))


def link_segments(coordinator_directory: Path, into: Path) -> None:
    """Hard-links every log segment into `into`/log (kept there when pruning unlinks the original)."""
    target = into / "log"
    target.mkdir(parents=True, exist_ok=True)
    for segment in (coordinator_directory / "log").glob("*.log"):
        if not (target / segment.name).exists():
            os.link(segment, target / segment.name)


def delete_state(coordinator_directory: Path) -> None:
    for name in ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm"):
        (coordinator_directory / name).unlink(missing_ok=True)


class Committer(threading.Thread):
    """Commits one-batch files in a loop until stopped or cut; remembers every acknowledged batch."""

    def __init__(self, address: str, partitions: list[tuple[bytes, int]]) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.partitions = partitions
        self.acknowledged: list[tuple[str, bytes, int, int]] = []  # object key, topic, partition, base offset
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address)
        broker = Broker(pb_grpc.DisklessCoordinatorStub(channel), COORDINATORS)
        owners = {key: broker.owners_of([batch(key[0], key[1])]) for key in self.partitions}
        i = 0
        try:
            while not self.stop.is_set():
                topic, partition = self.partitions[i % len(self.partitions)]
                key = f"wal/{uuid.uuid4()}"
                try:
                    response = broker.commit(
                        [batch(topic, partition, 2)], object_key=key, owner_ids=owners[(topic, partition)]
                    )
                except grpc.RpcError:
                    return  # the node went away: this call may or may not be durable
                answer = response.batches[0]
                if answer.error_code != pb.NONE:
                    self.errors.append(str(answer))
                self.acknowledged.append((key, topic, partition, answer.assigned_base_offset))
                i += 1
        finally:
            channel.close()


def assert_acknowledged_are_served(
    server: ServerProcess | InProcessNode, acknowledged: list[tuple[str, bytes, int, int]]
) -> None:
    by_partition: dict[tuple[bytes, int], dict[int, str]] = {}
    for key, topic, partition, base in acknowledged:
        by_partition.setdefault((topic, partition), {})[base] = key
    for (topic, partition), expected in by_partition.items():
        found = {b.base_offset: b.object_key for b in fetch_all_batches(server.stub, topic, partition)[0]}
        for base, key in expected.items():
            assert found.get(base) == key, f"acknowledged {key} at {base} is served as {found.get(base)}"
