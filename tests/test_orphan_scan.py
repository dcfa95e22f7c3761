"""The orphan scan (spark/) end to end: a real coordinator, real files, the local store and S3 (moto's server).

One Spark session (local[2]) serves the whole module: the scan runs in-process
through the same entry point as spark-submit (`spark.command.main(argv, spark)`),
and only one test starts it as a real `spark-submit` subprocess. Objects are
made old by the clock, not by forging times: everything that should be a
candidate is written before the first live file is committed, the young files
after it, and the scan runs with grace 0 (`--force`), so that the threshold is
the oldest live file's commit time on both backends (S3 keeps whole seconds of
LastModified, hence the waits for the next tick of the store's clock, `next_tick`).

Faults that real parts cannot produce on demand (one key's DescribeFiles
error, a coordinator reporting an error, a key stream cut short, a second node
that does not answer) come from `FaultyNode`, a gRPC front of the real node that
the scan is pointed at with --bootstrap and that names itself as every
coordinator's leader.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from pyspark.sql import SparkSession

from coordinator.config.loading import load_settings
from coordinator.files.object_store import ObjectStore, StoreConfig, new_wal_key
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from spark.command import main
from spark.coordinator_client import (
    ORPHAN,
    UNRESOLVED,
    CoordinatorAccess,
    CoordinatorsUnavailable,
    KnownKeysStream,
    stream_known_keys,
    verdict_of,
)
from spark.deletion import Pacer
from spark.listing import block_of, list_outside_blocks, listing_slices, spread
from spark.options import ScanOptions
from spark.orphan_scan import open_session, run_scan
from spark.report import ScanReport
from spark.rules import GRACE_FLOOR_MS, grace_problem, orphan_share_problem, scan_threshold
from tests.certificates import channel_credentials, issue
from tests.cluster_harness import Cluster
from tests.harness import REPO, Broker, ServerProcess, batch, coordinator_of, delete_records, describe_file
from tests.object_stores import ObjectStoreUnderTest, free_port, storage_settings

S3_TIME_RESOLUTION_S = 1.0  # moto lists LastModified in whole seconds
LOCAL_TIME_RESOLUTION_S = 0.001  # a file's mtime, in milliseconds
TICK_MARGIN_S = 0.02  # past the tick: the kernel stamps a file's mtime from a clock a few ms coarse
# The coordinator must not hand over or delete the test's files itself while the scans run.
COORDINATOR_SETTINGS = {
    "diskless.coordinator.file.deletion.grace.period.ms": "3600000",
    "diskless.coordinator.file.handover.probe.delay.ms": "3600000",
}
SUBMIT_TIMEOUT_S = 240
# The tests' Spark jobs are tiny: a driver JVM without the optimizing compiler and with the serial collector
# starts and warms up in about half the time on two cores, and no one looks at the web UI (real scans keep
# Spark's defaults).
QUICK_SPARK_SETTINGS = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.ui.enabled": "false",
}


@pytest.fixture(scope="module")
def spark(moto_server: object) -> Iterator[SparkSession]:
    """One session for the module, started after moto's fake AWS environment (executors inherit it)."""
    session = open_session("local[2]", QUICK_SPARK_SETTINGS)
    yield session
    session.stop()


@dataclass
class Scene:
    """A node and a store holding every kind of object the scan must tell apart."""

    server: ServerProcess
    store: ObjectStore
    config: StoreConfig
    properties: Path
    orphans: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    awaiting: list[str] = field(default_factory=list)  # awaiting hand-over, then awaiting deletion
    young: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)  # outside the storage prefix (S3 only)

    def kept(self) -> list[str]:
        return self.live + self.awaiting + self.young + self.foreign + self.outside

    def existing(self, keys: list[str]) -> set[str]:
        return {key for key in keys if self.store.head(key) is not None}


def write_properties(path: Path, config: StoreConfig, **overrides: str) -> Path:
    settings = {**storage_settings(config), "diskless.coordinator.orphan.scan.grace.period.ms": "0", **overrides}
    path.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
    return path


def put(store: ObjectStore, keys: list[str], size: int = 100) -> list[str]:
    for key in keys:
        store.put(key, b"w" * size)
    return keys


def next_tick(resolution_s: float) -> None:
    """Waits into the store clock's next tick: what is written or committed after is newer to the scan."""
    time.sleep(resolution_s - time.time() % resolution_s + TICK_MARGIN_S)


def build_scene(tmp_path: Path, under_test: ObjectStoreUnderTest) -> Scene:
    config = under_test.config
    server = ServerProcess(tmp_path / "data", 4, {**under_test.settings, **COORDINATOR_SETTINGS}).start()
    store = under_test.open()
    prefix = config.prefix
    resolution_s = S3_TIME_RESOLUTION_S if config.backend == "s3" else LOCAL_TIME_RESOLUTION_S
    scene = Scene(server, store, config, write_properties(tmp_path / "scan.properties", config))
    scene.orphans = put(store, [new_wal_key(prefix) for _ in range(3)], size=1000)
    scene.live = put(store, [new_wal_key(prefix) for _ in range(2)])
    scene.awaiting = put(store, [new_wal_key(prefix) for _ in range(2)])
    odd = uuid.uuid4().hex
    scene.foreign = put(store, [f"{prefix}notes/readme.txt", f"{prefix}wal/3a/readme.txt",
                                f"{prefix}wal/zz/{odd}.wal", f"{prefix}wal/{odd[:2]}.bak"])  # fmt: skip
    if prefix:
        scene.outside = put(store, [new_wal_key("other-cluster/")])
    next_tick(resolution_s)  # every object above is older than the first commit below, in the store's time too
    broker = Broker(server.stub, 4)
    live_topic, gone_topic = broker.create_topic(f"live-{odd}", 1), broker.create_topic(f"gone-{odd}", 1)
    for key in scene.live:
        assert broker.commit([batch(live_topic, 0)], object_key=key).batches[0].error_code == pb.NONE
    owner = coordinator_of(server.stub, gone_topic, 0)
    handover, deletion = scene.awaiting
    assert (
        broker.commit([batch(gone_topic, 0)], handover, owner_ids=[owner, (owner + 1) % 4]).batches[0].error_code == 0
    )
    assert broker.commit([batch(gone_topic, 0)], deletion, owner_ids=[owner]).batches[0].error_code == 0
    assert delete_records(server.stub, gone_topic, 0, -1).error_code == pb.NONE
    # Hand-over may already have happened (the next owner then awaits deletion): the scan keeps it either way.
    assert describe_file(server.stub, handover).state in (
        pb.FILE_STATE_AWAITING_HANDOVER,
        pb.FILE_STATE_AWAITING_DELETION,
    )
    assert describe_file(server.stub, deletion).state == pb.FILE_STATE_AWAITING_DELETION
    next_tick(resolution_s)
    scene.young = put(store, [new_wal_key(prefix) for _ in range(2)])
    return scene


def scan(spark: SparkSession | None, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    """One in-process scan through the command's entry point: (exit code, JSON report)."""
    code = main(["--json", "--listing-tasks", "2", *argv], spark=spark)
    captured = capsys.readouterr()
    return code, json.loads(captured.out)


def scene_scan(scene: Scene, spark: SparkSession, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    manifests = scene.properties.parent / "manifests"
    return scan(spark, capsys, "--bootstrap", scene.server.address, "--config", str(scene.properties),
                "--force", "--manifest-dir", str(manifests), *argv)  # fmt: skip


# ---------------------------------------------------------------------- the story, on each backend


@pytest.mark.slow
def test_scan_finds_and_deletes_only_orphans(
    object_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene = build_scene(tmp_path, object_store_under_test)
    try:
        _dry_run_reports_every_kind(scene, spark, capsys)
        _too_many_orphans_abort_without_deleting(scene, spark, capsys, tmp_path)
        _capped_delete_saturates_then_rerun_finishes(scene, spark, capsys)
        code, report = scene_scan(scene, spark, capsys, "--delete")
        assert code == 0 and report["orphans"] == 0 and report["deleted"] == 0, report  # a rerun finds nothing more
        assert scene.existing(scene.kept()) == set(scene.kept())
    finally:
        scene.server.stop()


def _dry_run_reports_every_kind(scene: Scene, spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = scene_scan(scene, spark, capsys)
    assert code == 0, report
    oldest = min(
        c.oldest_live_file_timestamp
        for c in scene.server.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators
        if c.oldest_live_file_timestamp >= 0
    )
    assert report["threshold_ms"] == oldest and report["threshold_rule"].startswith("oldest live file"), report
    expected = {
        "status": "ok", "mode": "dry-run", "coordinators": 4, "nodes": [scene.server.address],
        "listed": 3 + 2 + 2 + 2 + 4, "foreign": 4, "wal_files": 9, "young": 2, "candidates": 7, "known": 4,
        "live": 2, "awaiting_handover": 1, "awaiting_deletion": 1, "unresolved": 0, "orphans": 3,
        "orphan_bytes": 3000, "deleted": 0, "saturated": False,
    }  # fmt: skip
    handover_moved = report["awaiting_handover"] == 0 and report["awaiting_deletion"] == 2
    if handover_moved:
        expected.update(awaiting_handover=0, awaiting_deletion=2)
    assert {name: report[name] for name in expected} == expected, report
    assert sorted(s["key"] for s in report["sample"]) == sorted(scene.orphans)
    assert sorted(report["foreign_sample"]) == sorted(scene.foreign)
    assert list(report["durations_s"]) == ["coordinators", "listing", "known keys", "anti-join", "manifest"]
    assert report["known_keys"] >= 4 and report["deleting_s"] == {}  # 4 files; one may have two owners' rows
    rows = spark.read.parquet(report["manifest"]).collect()
    assert sorted(r["key"] for r in rows) == sorted(scene.orphans) and {r["size"] for r in rows} == {1000}
    assert all(r["last_modified"].timestamp() * 1000 < report["threshold_ms"] for r in rows)
    assert scene.existing(scene.orphans) == set(scene.orphans)  # a dry run deletes nothing
    table = ScanReport(**report).to_table()
    assert "orphans" in table and "3 (2.9 KiB)" in table and "(dry run)" in table and scene.orphans[0] in table, table


def _too_many_orphans_abort_without_deleting(
    scene: Scene, spark: SparkSession, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    strict = write_properties(
        tmp_path / "strict.properties", scene.config, **{"diskless.coordinator.orphan.scan.max.orphan.percent": "20"}
    )
    code, report = scan(spark, capsys, "--bootstrap", scene.server.address, "--config", str(strict), "--force",
                        "--manifest-dir", str(tmp_path / "manifests"), "--delete")  # fmt: skip
    assert code == 1 and report["status"] == "aborted" and "max.orphan.percent=20" in report["reason"], report
    assert report["orphans"] == 3 and report["deleted"] == 0 and report["manifest"], report
    assert scene.existing(scene.orphans) == set(scene.orphans)


def _capped_delete_saturates_then_rerun_finishes(
    scene: Scene, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = scene_scan(scene, spark, capsys, "--delete", "--max-deletes", "2", "--delete-rate", "50")
    assert code == 0, report
    assert (report["mode"], report["orphans"], report["deleted"], report["saturated"]) == ("delete", 3, 2, True)
    assert "deleting" in report["durations_s"] and set(report["deleting_s"]) == {"re-check", "delete", "paced"}
    assert len(scene.existing(scene.orphans)) == 1
    assert scene.existing(scene.kept()) == set(scene.kept())
    code, report = scene_scan(scene, spark, capsys, "--delete")
    assert code == 0 and (report["orphans"], report["deleted"], report["saturated"]) == (1, 1, False), report
    assert scene.existing(scene.orphans) == set()


# ---------------------------------------------------------------------- safety: nothing answers, something errs


class FaultyNode(pb_grpc.DisklessCoordinatorServicer):
    """A gRPC front of a real node that injects faults into DescribeCoordinators, ListFileKeys and DescribeFiles."""

    def __init__(self, upstream: pb_grpc.DisklessCoordinatorStub) -> None:
        self.upstream = upstream
        self.failing_keys: set[str] = set()  # DescribeFiles answers these with an error
        self.describe_files_down = False  # DescribeFiles fails as a call
        self.coordinator_errors: set[int] = set()  # DescribeCoordinators reports these as loading
        self.led_elsewhere: dict[int, int] = {}  # coordinator -> port of another (dead) node said to lead it
        self.key_stream_errors: set[int] = set()  # ListFileKeys of these coordinators ends with an error page
        self.key_streams_cut: set[int] = set()  # ListFileKeys of these coordinators ends before its last page
        self.port = 0

    def DescribeCoordinators(self, request: pb.DescribeCoordinatorsRequest, context: grpc.ServicerContext) -> object:
        response = self.upstream.DescribeCoordinators(request, timeout=10)
        for description in response.coordinators:
            description.leader.host, description.leader.port = "127.0.0.1", self.port
            if description.coordinator_id in self.led_elsewhere:
                description.leader.port = self.led_elsewhere[description.coordinator_id]
            if description.coordinator_id in self.coordinator_errors:
                description.error_code = pb.COORDINATOR_LOAD_IN_PROGRESS
                description.error_message = "injected: loading"
        return response

    def ListFileKeys(self, request: pb.ListFileKeysRequest, context: grpc.ServicerContext) -> Iterator[object]:
        for page in self.upstream.ListFileKeys(request, timeout=10):
            if page.last and request.coordinator_id in self.key_streams_cut:
                return
            if page.last and request.coordinator_id in self.key_stream_errors:
                page = pb.ListFileKeysPage(  # the page the faulty coordinator sends instead
                    coordinator_id=request.coordinator_id, error_code=pb.COORDINATOR_NOT_AVAILABLE,
                    error_message="injected: state closed", last=True,
                )  # fmt: skip
            yield page

    def DescribeFiles(self, request: pb.DescribeFilesRequest, context: grpc.ServicerContext) -> object:
        if self.describe_files_down:
            context.abort(grpc.StatusCode.INTERNAL, "injected: DescribeFiles down")
        response = self.upstream.DescribeFiles(request, timeout=10)
        for result in response.files:
            if result.object_key in self.failing_keys:
                result.error_code, result.error_message = pb.COORDINATOR_NOT_AVAILABLE, "injected: not available"
                result.state = pb.FILE_STATE_UNKNOWN
                del result.coordinator_ids[:]
        return response


@pytest.fixture
def faulty_scene(
    local_store_under_test: ObjectStoreUnderTest, tmp_path: Path
) -> Iterator[tuple[Scene, FaultyNode, str]]:
    """A node with no live file (threshold = now - 0) and three orphans, reached through a FaultyNode."""
    config = local_store_under_test.config
    server = ServerProcess(tmp_path / "data", 4, {**local_store_under_test.settings, **COORDINATOR_SETTINGS}).start()
    properties = write_properties(
        tmp_path / "scan.properties", config, **{"diskless.coordinator.orphan.scan.max.orphan.percent": "100"}
    )
    scene = Scene(server, local_store_under_test.open(), config, properties)
    scene.orphans = put(scene.store, [new_wal_key() for _ in range(3)])
    node = FaultyNode(server.stub)
    front = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_DisklessCoordinatorServicer_to_server(node, front)
    node.port = front.add_insecure_port("127.0.0.1:0")
    front.start()
    try:
        yield scene, node, f"127.0.0.1:{node.port}"
    finally:
        front.stop(grace=None)
        server.stop()


def faulty_scan(
    scene: Scene, address: str, spark: SparkSession | None, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, dict]:
    return scan(spark, capsys, "--bootstrap", address, "--config", str(scene.properties), "--force",
                "--manifest-dir", str(scene.properties.parent / "manifests"), *argv)  # fmt: skip


@pytest.mark.slow
def test_describe_files_errors_at_the_recheck_keep_the_files(
    faulty_scene: tuple[Scene, FaultyNode, str], spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    scene, node, address = faulty_scene
    node.describe_files_down = True
    code, report = faulty_scan(scene, address, spark, capsys)
    assert code == 0 and report["orphans"] == 3, report  # the anti-join needs no DescribeFiles: a dry run is fine
    code, report = faulty_scan(scene, address, spark, capsys, "--delete")
    assert code == 1 and report["status"] == "incomplete", report
    assert (report["candidates"], report["orphans"], report["unresolved"], report["deleted"]) == (3, 3, 3, 0)
    assert "injected: DescribeFiles down" in report["failures"][0]
    assert report["threshold_rule"].startswith("now"), report  # no coordinator has a live file
    node.describe_files_down = False
    node.failing_keys = {scene.orphans[0]}
    code, report = faulty_scan(scene, address, spark, capsys, "--delete")
    assert code == 1 and (report["unresolved"], report["orphans"], report["deleted"]) == (1, 3, 2), json.dumps(report)
    assert scene.existing(scene.orphans) == {scene.orphans[0]}


@pytest.mark.slow
def test_a_file_committed_after_the_known_keys_were_read_is_not_deleted(
    faulty_scene: tuple[Scene, FaultyNode, str], spark: SparkSession
) -> None:
    scene, _, _ = faulty_scene
    broker = Broker(scene.server.stub, 4)
    topic = broker.create_topic(f"late-{uuid.uuid4().hex}", 1)
    late = scene.orphans[0]

    def commit_after_the_known_keys(line: str) -> None:
        if line == "anti-join ...":  # the known keys are read; a broker commits the file now
            assert broker.commit([batch(topic, 0)], late).batches[0].error_code == pb.NONE

    options = ScanOptions.from_settings(
        load_settings(scene.properties, {}), CoordinatorAccess((scene.server.address,)), delete=True, force=True,
        manifest_dir=str(scene.properties.parent / "manifests"),
    )  # fmt: skip
    report = run_scan(spark, options, say=commit_after_the_known_keys)
    # The anti-join still called it an orphan (it was in the manifest); the re-check before deleting kept it.
    assert (report.status, report.orphans, report.deleted, report.kept_by_recheck) == ("ok", 3, 2, 1), report
    assert late in {row["key"] for row in spark.read.parquet(report.manifest).collect()}
    assert scene.existing(scene.orphans) == {late}
    assert "kept by recheck 1" in report.to_table()


@pytest.mark.slow
def test_a_coordinator_that_cannot_tell_all_its_keys_aborts_the_scan(
    faulty_scene: tuple[Scene, FaultyNode, str], spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    scene, node, address = faulty_scene
    node.key_stream_errors = {1}
    code, report = faulty_scan(scene, address, spark, capsys, "--delete")
    assert code == 1 and report["status"] == "aborted", report
    assert "known keys failed" in report["reason"] and "injected: state closed" in report["reason"], report
    assert "coordinator 1" in report["reason"] and "nothing deleted" in report["reason"], report
    assert list(report["durations_s"]) == ["coordinators", "listing", "known keys"] and report["orphans"] == 0
    node.key_stream_errors = set()
    node.key_streams_cut = {3}
    code, report = faulty_scan(scene, address, spark, capsys, "--delete")
    assert code == 1 and "coordinator 3" in report["reason"] and "before its last page" in report["reason"], report
    assert scene.existing(scene.orphans) == set(scene.orphans)


@pytest.mark.slow
def test_a_coordinator_that_cannot_answer_aborts_before_listing(
    faulty_scene: tuple[Scene, FaultyNode, str], capsys: pytest.CaptureFixture[str]
) -> None:
    scene, node, address = faulty_scene
    # No Spark session is given: an abort must come before the scan needs one (spark=None would start one).
    dead = f"127.0.0.1:{free_port()}"
    code, report = faulty_scan(scene, dead, None, capsys, "--delete")
    assert code == 1 and report["status"] == "aborted" and "no --bootstrap address answered" in report["reason"]
    node.coordinator_errors = {2}
    code, report = faulty_scan(scene, address, None, capsys, "--delete")
    assert code == 1 and "coordinator 2: COORDINATOR_LOAD_IN_PROGRESS" in report["reason"], report
    node.coordinator_errors = set()
    node.led_elsewhere = {3: free_port()}  # a second node, down
    code, report = faulty_scan(scene, address, None, capsys, "--delete")
    assert code == 1 and "did not answer" in report["reason"] and report["listed"] == 0, report
    assert report["durations_s"].keys() == {"coordinators"}
    assert scene.existing(scene.orphans) == set(scene.orphans)
    scene.server.kill()  # the node itself down
    code, report = faulty_scan(scene, scene.server.address, None, capsys, "--delete")
    assert code == 1 and report["status"] == "aborted", report
    assert scene.existing(scene.orphans) == set(scene.orphans)
    scene.server.start()  # the fixture stops it


@pytest.mark.slow
def test_a_store_that_cannot_be_listed_aborts_the_scan(
    faulty_scene: tuple[Scene, FaultyNode, str],
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene, _, address = faulty_scene
    with local_store_under_test.outage():
        code, report = faulty_scan(scene, address, spark, capsys, "--delete")
    assert code == 1 and report["status"] == "aborted", report
    assert report["reason"].startswith("listing failed: ") and "ObjectStoreError" in report["reason"], report
    assert scene.existing(scene.orphans) == set(scene.orphans)


@pytest.mark.slow
def test_scan_over_mutual_tls(
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ca = issue("orphan-scan-test-ca", ca=True)
    node_certificate, node_key = issue("localhost", ca, server=True).write(tmp_path, "node")
    operator_certificate, operator_key = issue("operator", ca).write(tmp_path, "operator")
    (tmp_path / "ca.crt").write_bytes(ca.certificate_pem)
    (tmp_path / "acl").write_text("User:operator DESCRIBE\n")  # the scan only reads the coordinators
    tls = {
        "diskless.acl.file": str(tmp_path / "acl"),
        "diskless.ssl.certificate.location": str(node_certificate),
        "diskless.ssl.key.location": str(node_key),
        "diskless.ssl.ca.location": str(tmp_path / "ca.crt"),
        "diskless.ssl.client.auth": "required",
    }
    config = local_store_under_test.config
    server = ServerProcess(
        tmp_path / "data", 4, {**local_store_under_test.settings, **COORDINATOR_SETTINGS, **tls},
        credentials=channel_credentials(ca, issue("probe", ca)),
    ).start()  # fmt: skip
    try:
        orphan = put(local_store_under_test.open(), [new_wal_key()])[0]
        properties = write_properties(
            tmp_path / "scan.properties", config, **{"diskless.coordinator.orphan.scan.max.orphan.percent": "100"}
        )
        code, report = scan(spark, capsys, "--bootstrap", server.address, "--config", str(properties), "--force",
                            "--manifest-dir", str(tmp_path / "manifests"), "--ca", str(tmp_path / "ca.crt"),
                            "--cert", str(operator_certificate), "--key", str(operator_key), "--delete")  # fmt: skip
        assert code == 0 and (report["orphans"], report["deleted"]) == (1, 1), report
        assert local_store_under_test.open().head(orphan) is None
        code, report = scan(spark, capsys, "--bootstrap", server.address, "--config", str(properties), "--force")
        assert code == 1 and "no --bootstrap address answered" in report["reason"], report  # plaintext is refused
    finally:
        server.stop()


@pytest.mark.slow
def test_a_replicated_cluster_is_scanned_with_each_coordinators_keys_from_its_leader(
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = Cluster(
        tmp_path / "cluster",
        size=3,
        coordinators=2,
        settings={**local_store_under_test.settings, **COORDINATOR_SETTINGS},
    ).start()
    try:
        store = local_store_under_test.open()
        orphans = put(store, [new_wal_key() for _ in range(2)])
        known = put(store, [new_wal_key() for _ in range(4)])
        next_tick(LOCAL_TIME_RESOLUTION_S)
        topic = cluster.create_topic(f"scanned-{uuid.uuid4().hex}", 4)
        leaders = cluster.wait_fully_in_sync()
        owners = {partition: cluster.coordinator_of(cluster.nodes[0], topic, partition) for partition in range(4)}
        assert set(owners.values()) == {0, 1}, owners  # both coordinators hold files
        for partition, key in enumerate(known):
            leader = cluster.node_at(leaders[owners[partition]].leader.port)
            broker = Broker(leader.stub, 2)
            assert broker.commit([batch(topic, partition)], key).batches[0].error_code == pb.NONE
        access = CoordinatorAccess(tuple(cluster.addresses))
        for coordinator_id, description in leaders.items():  # a follower does not answer for what it holds
            follower = next(n for n in cluster.nodes if n.port != description.leader.port)
            with pytest.raises(CoordinatorsUnavailable, match="NOT_COORDINATOR"):
                list(stream_known_keys(access, coordinator_id, follower.address))
        properties = write_properties(
            tmp_path / "scan.properties", local_store_under_test.config,
            **{"diskless.coordinator.orphan.scan.max.orphan.percent": "100"},
        )  # fmt: skip
        code, report = scan(spark, capsys, "--bootstrap", cluster.addresses[2], "--config", str(properties),
                            "--force", "--manifest-dir", str(tmp_path / "manifests"))  # fmt: skip
        assert code == 0 and report["coordinators"] == 2, report
        assert (report["known_keys"], report["known"], report["live"], report["orphans"]) == (4, 4, 4, 2), report
        assert sorted(s["key"] for s in report["sample"]) == sorted(orphans)
    finally:
        cluster.stop()


def test_grace_below_the_floor_is_refused_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = StoreConfig(backend="local", local_root=str(tmp_path / "objects"))
    properties = write_properties(tmp_path / "scan.properties", config)
    assert main(["--config", str(properties), "--bootstrap", f"127.0.0.1:{free_port()}"]) == 2
    assert "below the floor" in capsys.readouterr().err
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "orphan-scan", "--config", str(properties)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--force" in done.stderr, done.stderr


# ---------------------------------------------------------------------- the rules, as pure functions


def test_threshold_rules() -> None:
    hour = 3_600_000
    now = 10 * hour
    formed = scan_threshold([(0, -1), (1, 5 * hour), (2, 3 * hour)], hour, now)
    assert (formed.threshold_ms, formed.oldest_live_coordinator_id) == (2 * hour, 2)
    assert "oldest live file" in formed.rule
    assert scan_threshold([(0, -1), (1, -1)], hour, now).threshold_ms == 9 * hour  # no live file: now - grace
    assert scan_threshold([(0, 12 * hour)], hour, now).threshold_ms == 9 * hour  # a clock ahead never widens it
    assert grace_problem(GRACE_FLOOR_MS - 1, force=False) and grace_problem(GRACE_FLOOR_MS, force=False) is None
    assert grace_problem(0, force=True) is None and grace_problem(-1, force=True)
    assert orphan_share_problem(5, 10, 50) is None and orphan_share_problem(6, 10, 50)
    assert orphan_share_problem(0, 0, 0) is None


def test_verdicts_keep_a_file_on_any_doubt() -> None:
    unknown = pb.DescribeFilesResponse.FileResult(object_key="k", state=pb.FILE_STATE_UNKNOWN)
    live = pb.DescribeFilesResponse.FileResult(object_key="k", state=pb.FILE_STATE_LIVE, coordinator_ids=[1])
    failed = pb.DescribeFilesResponse.FileResult(object_key="k", error_code=pb.COORDINATOR_NOT_AVAILABLE)
    odd = pb.DescribeFilesResponse.FileResult(object_key="k", state=pb.FILE_STATE_UNKNOWN, coordinator_ids=[2])
    assert verdict_of([unknown, unknown]) == (ORPHAN, "")
    assert verdict_of([unknown, live])[0] == "live"
    assert verdict_of([failed, live])[0] == "live"
    assert verdict_of([unknown, failed])[0] == UNRESOLVED
    assert verdict_of([unknown, "call failed"]) == (UNRESOLVED, "call failed")
    assert verdict_of([odd])[0] == UNRESOLVED


def test_a_key_stream_that_contradicts_itself_is_refused() -> None:
    def page(**fields: object) -> pb.ListFileKeysPage:
        defaults: dict[str, object] = {"coordinator_id": 1, "leader_epoch": 2, "applied_offset": 30}
        return pb.ListFileKeysPage(**{**defaults, **fields})

    good = KnownKeysStream(1, "node")
    assert good.take(page(object_keys=["a", "b"], states=[1, 3])) == [("a", 1), ("b", 3)]
    assert good.take(page(object_keys=["c"], states=[2], last=True, key_count=3)) == [("c", 2)]
    good.finish()
    for pages, problem in [
        ([page(coordinator_id=2)], "a page of coordinator 2"),
        ([page(object_keys=["a"])], "1 keys and 0 states"),
        ([page(object_keys=["a"], states=[0])], "states [0]"),
        ([page(), page(applied_offset=31)], "another snapshot"),
        ([page(last=True, key_count=0), page()], "after the last one"),
        ([page(object_keys=["a"], states=[1], last=True, key_count=2)], "counts 2 keys, 1 came"),
        ([page(error_code=pb.NOT_COORDINATOR, error_message="led elsewhere", last=True)], "NOT_COORDINATOR"),
    ]:
        stream = KnownKeysStream(1, "node")
        with pytest.raises(CoordinatorsUnavailable, match=re.escape(problem)):
            for each in pages:
                stream.take(each)
    with pytest.raises(CoordinatorsUnavailable, match="ended before its last page"):
        KnownKeysStream(1, "node").finish()


def test_the_rest_slice_finds_every_key_outside_the_blocks(local_store_under_test: ObjectStoreUnderTest) -> None:
    store = local_store_under_test.open()
    keys = ["a.txt", "wal/!x", "wal/0", "wal/00/k.wal", "wal/00.bak", "wal/09/k", "wal/0A/x", "wal/0:/y", "wal/0a/k",
            "wal/0f/k", "wal/0g/z", "wal/1/q", "wal/ff/k", "wal/fg", "wal/zz/x.wal", "wal/\u00e9/x", "zzz"]  # fmt: skip
    put(store, keys)
    outside = [key for key in sorted(keys) if block_of(key, "") is None]
    assert [info.key for info in list_outside_blocks(store, "")] == outside


def test_listing_slices_cover_the_prefix_once() -> None:
    slices = listing_slices("p/")
    assert len(slices) == 257 and slices[0].prefix == "p/wal/00" and slices[-1].skip_blocks
    assert sorted(s.prefix for group in spread(slices, 8) for s in group) == sorted(s.prefix for s in slices)
    assert block_of("p/wal/3a/x.wal", "p/") == "p/wal/3a" and block_of("p/wal/3a.bak", "p/") == "p/wal/3a"
    assert block_of("p/wal/zz/x.wal", "p/") is None and block_of("p/notes", "p/") is None


def test_pacer_spreads_deletes_over_time() -> None:
    now = [0.0]
    slept: list[float] = []
    pacer = Pacer(100, clock=lambda: now[0], sleep=lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)))
    for _ in range(3):
        pacer.wait_turn(50)
    assert slept == [0.5, 0.5] and now[0] == 1.0  # 150 keys: the third batch may start at 100 / 100 s


# ---------------------------------------------------------------------- spark-submit, periodic, and the benchmark


@pytest.mark.slow
def test_spark_submit_runs_periodic_scans(local_store_under_test: ObjectStoreUnderTest, tmp_path: Path) -> None:
    config = local_store_under_test.config
    server = ServerProcess(tmp_path / "data", 4, {**local_store_under_test.settings, **COORDINATOR_SETTINGS}).start()
    try:
        orphan = put(local_store_under_test.open(), [new_wal_key()])[0]
        properties = write_properties(
            tmp_path / "scan.properties",
            config,
            **{
                "diskless.coordinator.orphan.scan.interval.ms": "200",
                "diskless.coordinator.orphan.scan.max.orphan.percent": "100",
            },
        )
        submit = Path(sys.executable).parent / "spark-submit"
        done = subprocess.run(
            [str(submit), "--master", "local[1]",
             *(f"--conf={name}={value}" for name, value in QUICK_SPARK_SETTINGS.items()),
             str(REPO / "spark" / "command.py"), "--bootstrap",
             server.address, "--config", str(properties), "--force", "--json", "--periodic", "--scans", "2",
             "--listing-tasks", "1", "--manifest-dir", str(tmp_path / "manifests")],
            cwd=tmp_path, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert [(r["status"], r["orphans"]) for r in reports] == [("ok", 1), ("ok", 1)], done.stdout
        assert reports[0]["sample"][0]["key"] == orphan and reports[0]["scan_id"] != reports[1]["scan_id"]
        # spark-submit merges the Python driver's stderr into its stdout: the progress lines are there.
        progress = [line for line in done.stdout.splitlines() if line.startswith("orphan-scan:")]
        assert any(line.startswith("orphan-scan: next scan in 0.2 s") for line in progress), progress
        assert any(line.startswith("orphan-scan: listing done") for line in progress), progress
    finally:
        server.stop()


@pytest.mark.slow
def test_benchmark_runs_at_a_tiny_size(spark: SparkSession, tmp_path: Path) -> None:
    from bench.orphan_scan import run_benchmark

    results = run_benchmark(objects=2000, known=50, runs=1, work_dir=tmp_path / "bench", out=tmp_path / "out.json",
                            spark=spark)  # fmt: skip
    assert results["spark"]["orphans"] == results["plain"]["orphans"] == 2000 - 50
    assert json.loads((tmp_path / "out.json").read_text())["objects"] == 2000
    assert results["spark"]["phases_s"].keys() == {"coordinators", "listing", "known keys", "anti-join", "manifest"}


@pytest.mark.slow
def test_benchmark_runs_on_moto_at_a_tiny_size(spark: SparkSession, tmp_path: Path) -> None:
    from bench.orphan_scan_s3 import run_s3_benchmark

    results = run_s3_benchmark(objects=200, known=20, runs=1, work_dir=tmp_path / "bench", out=tmp_path / "s3.json",
                               put_threads=8, spark=spark)  # fmt: skip
    assert results["spark"]["orphans"] == results["plain"]["orphans"] == 200 - 20
    assert results["spark"]["candidates"] == 200 and results["put"]["threads"] == 8
