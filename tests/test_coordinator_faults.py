"""A coordinator whose disk misbehaves: damage found, said, and rebuilt from the log; nothing acknowledged lost.

Each test fills a real node (idempotent producers, so a resend shows DUPLICATE or a new offset), damages
its files while it is stopped or makes its disk fail while it runs, and checks what brokers and operators
see: retriable error codes for the coordinator that is out (never UNKNOWN_TOPIC_OR_PARTITION, never an
INTERNAL status), health NOT_SERVING while it is out, its real state in DescribeCoordinators, and every
acknowledged batch at its acknowledged offsets once it serves again.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import grpc
import pytest
from grpc_health.v1 import health_pb2

from coordinator.runtime.log.segments import SEGMENT_SUFFIX
from protos import admin_pb2
from protos import admin_pb2_grpc as admin_grpc
from protos import coordinator_pb2 as pb
from snapshot import page_checksums
from tests.harness import (
    Broker,
    ServerProcess,
    batch,
    coordinators_of,
    describe_coordinators,
    fetch_all_batches,
    laid_out,
)

pytestmark = pytest.mark.slow

COORDINATORS = 2
PARTITIONS = 4
PRODUCER_ID = 4242
RETRIABLE = {pb.COORDINATOR_NOT_AVAILABLE, pb.COORDINATOR_LOAD_IN_PROGRESS}
DEADLINE_S = 60


@dataclass
class Acknowledged:
    """What the node acknowledged: per partition, base offset -> (object key, byte offset), None for a duplicate."""

    topic_id: bytes
    offsets: dict[int, dict[int, tuple[str, int] | None]] = field(default_factory=dict)
    sequences: list[int] = field(default_factory=lambda: [0] * PARTITIONS)


def commit_round(broker: Broker, acknowledged: Acknowledged, records: int = 3) -> pb.CommitFileResponse:
    """One file with one idempotent batch per partition; acknowledged batches are remembered."""
    batches = [
        batch(acknowledged.topic_id, p, records, size=200, producer_id=PRODUCER_ID, epoch=0,
              sequence=acknowledged.sequences[p])
        for p in range(PARTITIONS)
    ]  # fmt: skip
    object_key = f"wal/{uuid.uuid4()}"
    response = broker.commit(laid_out(batches), object_key=object_key, timeout=10)
    for p, result in enumerate(response.batches):
        if result.error_code == pb.NONE:
            # A duplicate was stored by an earlier call whose answer was a failure: it lives in that
            # call's file, at the offsets it got then, which are acknowledged now.
            where = None if result.is_duplicate else (object_key, batches[p].byte_offset)
            acknowledged.offsets.setdefault(p, {})[result.assigned_base_offset] = where
            acknowledged.sequences[p] += records
    return response


def fill(server: ServerProcess, commits: int = 150) -> Acknowledged:
    broker = Broker(server.stub, COORDINATORS)
    topic_id = broker.create_topic(f"faults-{random.randrange(10**9)}", PARTITIONS)
    acknowledged = Acknowledged(topic_id)
    for _ in range(commits):
        response = commit_round(broker, acknowledged)
        assert all(r.error_code == pb.NONE for r in response.batches), response
    return acknowledged


def assert_every_acknowledged_batch_served(server: ServerProcess, acknowledged: Acknowledged) -> None:
    """Every acknowledged batch at its acknowledged offset, and offsets contiguous (I3)."""
    for p in range(PARTITIONS):
        batches, _, high_watermark = fetch_all_batches(server.stub, acknowledged.topic_id, p)
        served = {b.base_offset: (b.object_key, b.byte_offset) for b in batches}
        missing = {
            offset: where
            for offset, where in acknowledged.offsets.get(p, {}).items()
            if offset not in served or (where is not None and served[offset] != where)
        }
        assert not missing, f"partition {p}: acknowledged batches missing or moved: {missing}"
        expected = 0
        for b in batches:
            assert b.base_offset == expected, f"partition {p}: offset gap at {expected}"
            expected = b.last_offset + 1
        assert expected == high_watermark


def coordinator_of_partition(server: ServerProcess, acknowledged: Acknowledged) -> dict[int, int]:
    found = coordinators_of(server.stub, {acknowledged.topic_id: PARTITIONS})
    return {p: found[(acknowledged.topic_id, p)] for p in range(PARTITIONS)}


def wait_for(condition: object, what: str, deadline_s: float = DEADLINE_S) -> float:
    """Polls `condition()` until true; returns the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if condition():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"not within {deadline_s}s: {what}")


def coordinator_state(server: ServerProcess, coordinator_id: int) -> str:
    try:
        return describe_coordinators(server.stub)[coordinator_id].state
    except grpc.RpcError:  # the node answers only once it has tried to load every coordinator
        return ""


def health_is(server: ServerProcess, status: int) -> bool:
    try:
        return server.health() == status
    except grpc.RpcError:
        return False


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path / "data", coordinators=COORDINATORS)
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


# ---------------------------------------------------------------------- damaged SQLite pages


def table_pages(state: Path, table: str) -> tuple[int, int, list[int]]:
    """(page size, root page, leaf pages) of a table's B-tree, after checkpointing the WAL into the file.

    The node is stopped; a crash may leave newer copies of pages in the WAL, which would hide damage
    written into the file.
    """
    # Through the checksum VFS, as the node opens it: a plain SQLite's checkpoint would copy the WAL's pages into
    # the file without their page checksums (each would then read as damaged).
    connection = page_checksums.connect(state, apsw.SQLITE_OPEN_READWRITE)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (page_size,) = connection.execute("PRAGMA page_size").fetchone()
    (root,) = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    leaves = [
        page for (page,) in connection.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (table,)
        )
    ]  # fmt: skip
    connection.close()
    assert len(leaves) >= 4, f"the {table} table should span several pages"
    return page_size, root, leaves


def write_page(state: Path, page_size: int, page: int, data: bytes) -> None:
    with open(state, "r+b") as file:
        file.seek((page - 1) * page_size)
        file.write(data)


def random_bytes_over_the_batches_root(state: Path) -> None:
    """Structural damage: SQLite says CorruptError when a read reaches the page."""
    page_size, root, _ = table_pages(state, "batches")
    write_page(state, page_size, root, random.Random(7).randbytes(page_size))


def one_batches_leaf_over_another(state: Path) -> None:
    """Plausible damage: a leaf holds another leaf's rows; reads go on without an error, returning wrong rows."""
    page_size, _, leaves = table_pages(state, "batches")
    with open(state, "rb") as file:
        file.seek((leaves[0] - 1) * page_size)
        copied = file.read(page_size)
    write_page(state, page_size, leaves[len(leaves) // 2], copied)


DAMAGES = {"random-root": random_bytes_over_the_batches_root, "leaf-copied": one_batches_leaf_over_another}


def test_damaged_pages_after_a_crash_are_found_at_load_and_rebuilt_from_the_log(node: ServerProcess) -> None:
    node.start()
    acknowledged = fill(node)
    victim = coordinator_of_partition(node, acknowledged)[0]
    node.kill()
    state = node.data_dir / f"coordinator-{victim}" / "state.sqlite"
    one_batches_leaf_over_another(state)
    damaged = state.read_bytes()

    node.start()  # SERVING only once every coordinator is loaded: the damage was found and rebuilt at load
    output = "".join(node.output)
    assert "fails PRAGMA integrity_check" in output, output
    aside = sorted(state.parent.glob("state.sqlite.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged, "the damaged file is kept as it was"
    assert_every_acknowledged_batch_served(node, acknowledged)
    response = commit_round(Broker(node.stub, COORDINATORS), acknowledged)
    assert all(r.error_code == pb.NONE for r in response.batches), response


@pytest.mark.parametrize("damage", DAMAGES)
def test_damage_a_read_meets_takes_the_coordinator_out_and_rebuilds_it(node: ServerProcess, damage: str) -> None:
    """After a clean stop the state is not checked at load; the first read that meets damage finds it."""
    node.start()
    acknowledged = fill(node)
    partitions_of = coordinator_of_partition(node, acknowledged)
    victim = partitions_of[0]
    assert node.stop() == 0
    DAMAGES[damage](node.data_dir / f"coordinator-{victim}" / "state.sqlite")

    node.start()
    assert "fails PRAGMA integrity_check" not in "".join(node.output), "a cleanly closed state is not checked at load"
    request = pb.FindBatchesRequest(
        fetch_max_bytes=1 << 30,
        topics=[pb.FindBatchesRequest.Topic(
            topic_id=acknowledged.topic_id,
            partitions=[pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1 << 30)
                        for p in range(PARTITIONS)],
        )],
    )  # fmt: skip
    first = node.stub.FindBatches(request, timeout=10).topics[0].partitions  # never an INTERNAL status
    # The damaged partition, and any of that coordinator's partitions read after it in the call, get a
    # retriable code and no batches; partitions answered before the damage was met are whole.
    refused = [p for p, result in enumerate(first) if result.error_code in RETRIABLE]
    assert refused and all(partitions_of[p] == victim for p in refused), first
    for p, result in enumerate(first):
        if p in refused:
            assert not result.batches
        else:
            assert result.error_code == pb.NONE, result
            assert len(result.batches) == len(acknowledged.offsets[p]), result

    # The reader reports the damage on its own time: the state is set aside by the reload that follows.
    victim_dir = node.data_dir / f"coordinator-{victim}"
    wait_for(lambda: any(victim_dir.glob("state.sqlite.corrupt-*")), "the damaged state set aside")
    took_s = wait_for(lambda: health_is(node, health_pb2.HealthCheckResponse.SERVING), "serving again")
    output = "".join(node.output)
    assert "a read met damage" in output, output
    assert_every_acknowledged_batch_served(node, acknowledged)
    print(f"served again {took_s:.2f}s after the damaged read")


# ---------------------------------------------------------------------- a coordinator that cannot load


def test_a_coordinator_that_cannot_load_says_why_and_its_partitions_answer_retriably(node: ServerProcess) -> None:
    node.start()
    acknowledged = fill(node, commits=20)
    partitions_of = coordinator_of_partition(node, acknowledged)
    victim = partitions_of[0]
    assert node.stop() == 0
    log_directory = node.data_dir / f"coordinator-{victim}" / "log"
    segments = sorted(log_directory.glob(f"*{SEGMENT_SUFFIX}"))
    kept = {path: path.read_bytes() for path in segments}
    for path in segments:  # the state is now ahead of its log: only an operator can settle that
        path.unlink()

    node.start(wait_serving=False)
    wait_for(lambda: coordinator_state(node, victim) == "FAILED", "the coordinator failed to load")
    assert node.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    description = describe_coordinators(node.stub)[victim]
    assert description.error_code == pb.COORDINATOR_NOT_AVAILABLE
    assert "past the log end" in description.error_message, description
    assert "reloading" not in description.error_message and "loading again" not in description.error_message

    broker = Broker(node.stub, COORDINATORS)
    response = commit_round(broker, acknowledged)
    for p, result in enumerate(response.batches):
        expected = {pb.COORDINATOR_NOT_AVAILABLE} if partitions_of[p] == victim else {pb.NONE}
        assert result.error_code in expected, (p, result)
    found = node.stub.FindCoordinator(
        pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=acknowledged.topic_id, partitions=range(PARTITIONS))]
        )
    )
    for result in found.topics[0].partitions:
        if partitions_of[result.partition] == victim:
            assert result.error_code == pb.COORDINATOR_NOT_AVAILABLE, result
    unknown_topic = node.stub.FindBatches(
        pb.FindBatchesRequest(
            topics=[pb.FindBatchesRequest.Topic(topic_id=b"\x01" * 16, partitions=[pb.FindBatchesRequest.Partition()])]
        )
    )
    # Unknown to the coordinators in service, but the one out may hold it: retriable, not "does not exist".
    assert unknown_topic.topics[0].partitions[0].error_code == pb.COORDINATOR_NOT_AVAILABLE

    node.stop()
    for path, data in kept.items():  # the operator puts the log back
        path.write_bytes(data)
    node.start()
    assert_every_acknowledged_batch_served(node, acknowledged)


def test_a_state_check_on_demand_finds_damage_and_the_coordinator_rebuilds(node: ServerProcess) -> None:
    node.start()
    acknowledged = fill(node)
    victim = coordinator_of_partition(node, acknowledged)[0]
    admin = admin_grpc.CoordinatorAdminStub(grpc.insecure_channel(node.address))
    sound = admin.CheckState(admin_pb2.CheckStateRequest(), timeout=30).results
    assert [(r.coordinator_id, r.error_code, r.sound) for r in sound] == [
        (c, pb.NONE, True) for c in range(COORDINATORS)
    ]
    assert all(r.state_bytes > 0 and r.seconds >= 0 for r in sound)
    assert node.stop() == 0
    one_batches_leaf_over_another(node.data_dir / f"coordinator-{victim}" / "state.sqlite")
    offline = subprocess.run(
        [sys.executable, "-m", "coordinator", "state", "check", "--data-dir", str(node.data_dir), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert offline.returncode == 1, offline
    checked = {row["coordinator_id"]: row for row in json.loads(offline.stdout)["coordinators"]}
    assert not checked[victim]["sound"] and "PRIMARY KEY order" in checked[victim]["problem"], checked
    assert f"coordinator {victim}: state damaged" in offline.stderr

    node.start()  # closed cleanly: not checked at load
    admin = admin_grpc.CoordinatorAdminStub(grpc.insecure_channel(node.address))
    (result,) = admin.CheckState(admin_pb2.CheckStateRequest(coordinator_ids=[victim]), timeout=30).results
    assert result.error_code == pb.NONE and not result.sound, result
    assert "row not in PRIMARY KEY order for batches" in result.problem, result
    wait_for(lambda: health_is(node, health_pb2.HealthCheckResponse.SERVING), "serving again after the rebuild")
    wait_for(lambda: sorted((node.data_dir / f"coordinator-{victim}").glob("state.sqlite.corrupt-*")), "set aside")
    assert_every_acknowledged_batch_served(node, acknowledged)
    (again,) = admin.CheckState(admin_pb2.CheckStateRequest(coordinator_ids=[victim]), timeout=30).results
    assert again.sound, again
    (missing,) = admin.CheckState(admin_pb2.CheckStateRequest(coordinator_ids=[99]), timeout=30).results
    assert missing.error_code == pb.NOT_COORDINATOR


def test_a_log_that_lost_records_a_snapshot_holds_is_refused_not_served_shortened(node: ServerProcess) -> None:
    """State deleted and the log cut below a snapshot: an older state would hand acknowledged offsets out again."""
    node.start()
    acknowledged = fill(node, commits=10)
    victim = coordinator_of_partition(node, acknowledged)[0]
    admin = admin_grpc.CoordinatorAdminStub(grpc.insecure_channel(node.address))
    (taken,) = admin.CreateSnapshot(admin_pb2.CreateSnapshotRequest(coordinator_ids=[victim]), timeout=30).results
    assert taken.error_code == pb.NONE and taken.snapshot.end_offset > 0, taken
    assert node.stop() == 0
    directory = node.data_dir / f"coordinator-{victim}"
    for path in (directory / "log").glob(f"*{SEGMENT_SUFFIX}"):
        path.unlink()
    (directory / "state.sqlite").unlink()

    node.start(wait_serving=False)
    wait_for(lambda: coordinator_state(node, victim) == "FAILED", "the coordinator refuses to load")
    description = describe_coordinators(node.stub)[victim]
    assert "ends past the log end" in description.error_message, description
    assert "diskless log recover" in description.error_message, description
    assert node.health() == health_pb2.HealthCheckResponse.NOT_SERVING
