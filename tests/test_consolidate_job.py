"""`diskless consolidate` end to end: a real node over gRPC, WAL files of genuine Kafka batches, Spark.

The test broker (bench/wal_broker.py) writes small WAL files of v2 record batches to the store (a local
directory, and S3 on moto's server) and commits them; every partition is then read as a consumer reads
it (FindBatches, ranged reads, records decoded at their offsets) before and after the job, and must be
the same records at the same offsets. One Spark session (local[2]) serves the module; the crash tests
start the job as a process of its own and kill (kill -9) its driver, or one of its Python workers found
in its process tree, between an upload and its ReplaceBatches.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.wal_broker import Piece, WalBroker, find_all_batches, gets_to_read, read_partition, sample_records
from coordinator.files.object_store import ObjectStore
from protos import coordinator_pb2 as pb
from spark.consolidation import open_consolidation_session
from spark.consolidation_command import main
from tests.harness import REPO, ServerProcess, describe_file
from tests.object_stores import ObjectStoreUnderTest, storage_settings

# The coordinator must not hand over or delete the old files while the test reads them back.
COORDINATOR_SETTINGS = {
    "diskless.coordinator.file.deletion.grace.period.ms": "3600000",
    "diskless.coordinator.file.handover.probe.delay.ms": "3600000",
}
QUICK_SPARK_SETTINGS = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.ui.enabled": "false",
}
TOPICS, PARTITIONS, FILES = 2, 3, 8
CRASH_TIMEOUT_S = 240

Partition = tuple[bytes, int]


@pytest.fixture(scope="module")
def spark(moto_server: object) -> Iterator[SparkSession]:
    session = open_consolidation_session("local[2]", QUICK_SPARK_SETTINGS)
    yield session
    session.stop()


@dataclass
class Scene:
    server: ServerProcess
    store: ObjectStore
    properties: Path
    partitions: list[Partition]
    files: list[str]

    def read_all(self) -> dict[Partition, list]:
        return {p: read_partition(self.server.stub, self.store, *p) for p in self.partitions}

    def batches(self) -> dict[Partition, list[pb.BatchInfo]]:
        return {p: find_all_batches(self.server.stub, *p) for p in self.partitions}

    def consolidate(
        self, spark: SparkSession | None, capsys: pytest.CaptureFixture[str], *argv: str
    ) -> tuple[int, dict]:
        code = main(["--json", "--bootstrap", self.server.address, "--config", str(self.properties),
                     "--min-age-ms", "0", *argv], spark=spark)  # fmt: skip
        return code, json.loads(capsys.readouterr().out)


def build_scene(tmp_path: Path, under_test: ObjectStoreUnderTest, seed: int = 38) -> Scene:
    server = ServerProcess(tmp_path / "data", 4, {**under_test.settings, **COORDINATOR_SETTINGS}).start()
    store = under_test.open()
    properties = tmp_path / "consolidate.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in storage_settings(under_test.config).items()))
    broker = WalBroker(server.stub, store)
    rng = random.Random(seed)
    topics = [broker.create_topic(f"t{t}-{seed}", PARTITIONS) for t in range(TOPICS)]
    partitions = [(topic, p) for topic in topics for p in range(PARTITIONS)]
    files = []
    for i in range(FILES):
        now_ms = 1_700_000_000_000 + 1000 * i
        pieces = [
            Piece(t, p, sample_records(rng, rng.randint(1, 4), now_ms)) for t, p in partitions if rng.random() < 0.8
        ]
        key, _ = broker.write_file(
            pieces or [Piece(*partitions[0], sample_records(rng, 1, 0))], under_test.config.prefix
        )
        files.append(key)
    return Scene(server, store, properties, partitions, files)


def gets(batches: dict[Partition, list[pb.BatchInfo]]) -> int:
    return sum(gets_to_read(b) for b in batches.values())


@pytest.mark.slow
def test_consolidation_moves_batches_and_every_offset_reads_the_same_records(
    object_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene = build_scene(tmp_path, object_store_under_test)
    try:
        before, batches_before = scene.read_all(), scene.batches()
        code, report = scene.consolidate(spark, capsys, "--dry-run")
        assert code == 0 and report["mode"] == "dry-run" and report["batches_moved"] > 0, report
        assert scene.batches() == batches_before  # a dry run moves nothing
        assert _new_keys(scene) == []  # nor uploads anything

        code, report = scene.consolidate(spark, capsys, "--target-object-bytes", "100000")
        assert code == 0 and report["status"] == "ok", report
        after = scene.batches()
        moved = sum(1 for p in scene.partitions for b in after[p] if b.object_key not in scene.files)
        assert moved == report["batches_moved"] > 0, json.dumps(report)
        assert report["objects_out"] == len(scene.partitions)  # one object per partition: they all fit
        assert report["files_in"] == len(scene.files)
        assert gets(after) == report["gets_after"] == len(scene.partitions) < gets(batches_before)
        assert report["gets_before"] == gets(batches_before)
        assert scene.read_all() == before  # same records, same offsets, decoded from the new objects

        code, report = scene.consolidate(spark, capsys)
        assert code == 0 and report["runs"] == 0 and report["batches_moved"] == 0, report  # nothing left to merge
        assert scene.read_all() == before
    finally:
        scene.server.stop()


def _new_keys(scene: Scene) -> list[str]:
    """Every key in the store now that is not one of the broker's files."""
    return [info.key for info in scene.store.list(scene.store.config.prefix) if info.key not in scene.files]


@pytest.mark.slow
def test_a_damaged_batch_is_reported_and_left_in_place(
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene = build_scene(tmp_path, local_store_under_test, seed=5)
    try:
        before, batches_before = scene.read_all(), scene.batches()
        partition = scene.partitions[0]
        victim = batches_before[partition][len(batches_before[partition]) // 2]
        data = bytearray(scene.store.read_range(victim.object_key, 0, 1 << 20) or b"")
        data[victim.byte_offset + victim.byte_size - 1] ^= 0x40  # a bit of its last record flipped
        scene.store.put(victim.object_key, bytes(data))

        code, report = scene.consolidate(spark, capsys, "--target-object-bytes", "100000")
        assert code == 1 and report["status"] == "incomplete" and report["damaged"] == 1, report
        assert any("CRC-32C" in message and victim.object_key in message for message in report["messages"])
        after = scene.batches()
        (kept,) = [b for b in after[partition] if b.base_offset == victim.base_offset]
        assert (kept.object_key, kept.byte_offset, kept.byte_size) == (victim.object_key, victim.byte_offset,
                                                                       victim.byte_size)  # fmt: skip
        # Around it the partition moved, in two extents of one object.
        others = [b for b in after[partition] if b.base_offset != victim.base_offset]
        assert len({b.object_key for b in others}) == 1 and others[0].object_key not in scene.files
        for p in scene.partitions[1:]:
            assert read_partition(scene.server.stub, scene.store, *p) == before[p]
        intact = [r for r in before[partition] if not victim.base_offset <= r[0] <= victim.last_offset]
        readable = [b for b in after[partition] if b.base_offset != victim.base_offset]
        assert _decoded(scene.store, readable) == intact
    finally:
        scene.server.stop()


def _decoded(store: ObjectStore, batches: list[pb.BatchInfo]) -> list:
    from spark.record_batches import decode_records

    records = []
    for info in batches:
        _, decoded = decode_records(store.read_range(info.object_key, info.byte_offset, info.byte_size) or b"")
        records.extend((info.base_offset + r.offset_delta, r.timestamp, r.key, r.value, r.headers) for r in decoded)
    return records


@pytest.mark.slow
def test_a_driver_killed_between_upload_and_replace_loses_nothing_and_a_rerun_commits_its_object(
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene = build_scene(tmp_path, local_store_under_test, seed=9)
    try:
        before = scene.read_all()
        marker = tmp_path / "uploaded"
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        crashed = subprocess.Popen(
            [sys.executable, "-m", "tests.crashing_consolidate", str(marker), "--bootstrap", scene.server.address,
             "--config", str(scene.properties), "--min-age-ms", "0", "--target-object-bytes", "100000",
             "--master", "local[1]", "--run-tasks", "1"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            output, _ = crashed.communicate(timeout=CRASH_TIMEOUT_S)
        finally:
            _end_group(crashed.pid)
        assert crashed.returncode == -signal.SIGKILL, output
        orphan = marker.read_text().strip()
        assert scene.store.head(orphan) is not None  # uploaded ...
        assert describe_file(scene.server.stub, orphan).state == pb.FILE_STATE_UNKNOWN  # ... and not committed
        assert scene.read_all() == before  # nothing lost

        code, report = scene.consolidate(spark, capsys, "--target-object-bytes", "100000")
        assert code == 0 and report["status"] == "ok", json.dumps(report)
        # The rerun planned the same run, so the same key: the object the crash left is now committed.
        assert describe_file(scene.server.stub, orphan).state == pb.FILE_STATE_LIVE
        assert scene.read_all() == before
    finally:
        scene.server.stop()


@pytest.mark.slow
def test_an_executor_killed_between_upload_and_replace_loses_nothing_and_a_rerun_completes(
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene = build_scene(tmp_path, local_store_under_test, seed=11)
    try:
        before = scene.read_all()
        marker = tmp_path / "uploaded"
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        job = subprocess.Popen(
            [sys.executable, "-m", "tests.crashing_consolidate", "--executor", str(marker), "--json",
             "--bootstrap", scene.server.address, "--config", str(scene.properties), "--min-age-ms", "0",
             "--target-object-bytes", "100000", "--master", "local[1]", "--run-tasks", "1"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            worker, orphan = _wait_for_marker(marker, job)
            assert worker in _descendants(job.pid)  # a Python worker of the job's Spark, found in its tree
            os.kill(worker, signal.SIGKILL)
            output, errors = job.communicate(timeout=CRASH_TIMEOUT_S)
        finally:
            _end_group(job.pid)
        assert job.returncode == 1, errors  # the driver lived on and reported the lost task
        report = json.loads(output)
        assert report["status"] == "aborted" and "moving failed" in report["reason"], report
        assert scene.store.head(orphan) is not None  # uploaded ...
        assert describe_file(scene.server.stub, orphan).state == pb.FILE_STATE_UNKNOWN  # ... and not committed
        assert scene.read_all() == before  # nothing lost

        code, report = scene.consolidate(spark, capsys, "--target-object-bytes", "100000")
        assert code == 0 and report["status"] == "ok", report
        assert describe_file(scene.server.stub, orphan).state == pb.FILE_STATE_LIVE  # the same run's key
        assert scene.read_all() == before
        code, report = scene.consolidate(spark, capsys, "--target-object-bytes", "100000")
        assert code == 0 and report["runs"] == 0, report  # the rerun completed the work
    finally:
        scene.server.stop()


def _wait_for_marker(marker: Path, job: subprocess.Popen[str]) -> tuple[int, str]:
    """The pid of the worker that uploaded first and the key it uploaded, once it has written them."""
    deadline = time.monotonic() + CRASH_TIMEOUT_S
    while time.monotonic() < deadline:
        text = marker.read_text() if marker.exists() else ""
        if text.endswith(".wal") and len(text.split()) == 2:
            pid, key = text.split()
            return int(pid), key
        assert job.poll() is None, job.communicate()
        time.sleep(0.2)
    raise AssertionError("no worker uploaded in time")


def _descendants(pid: int) -> set[int]:
    """Every process under `pid`, from /proc (each process's parent is field 4 of its stat)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _end_group(pid: int) -> None:
    """The killed driver's Spark JVM and Python workers, if any outlived it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_benchmark_runs_at_a_tiny_size(spark: SparkSession, tmp_path: Path) -> None:
    from bench.consolidate import BenchSize, run_benchmark
    from bench.consolidate_load import count_objects

    store = tmp_path / "store"  # the object store apart from the node's data (--store-dir)
    size = BenchSize(
        files=64, partitions=12, brokers=4, coordinators=2, baseline_s=1.0, load_rate_per_s=4.0, store_dir=str(store)
    )
    results = run_benchmark(size, tmp_path / "work", tmp_path / "out.json", spark=spark)
    assert not (tmp_path / "work" / "a" / "objects").exists()
    # The job's store holds the 12 objects and the steady load's own files; the one-process run had a copy.
    assert count_objects(store / "a") >= 12 and count_objects(store / "b") >= 12
    assert results["job"]["status"] == "ok" and results["job"]["objects_out"] == 12, results["job"]
    assert results["after"]["gets"] == 12 < results["before"]["gets"]
    # Live-file rows: one per coordinator holding a live batch of the file (its partitions are on two).
    assert results["after"]["files"]["live"] == 12 < results["before"]["files"]["live"]
    assert results["after"]["objects"] == 12 < results["before"]["objects"] == 64
    assert results["one_process"]["batches_moved"] == results["job"]["batches_moved"] > 0
    assert results["load_with_job"]["commits"] > 0 and results["load_without_job"]["failures"] == 0
    # The stall watcher ran beside the node for both windows (its ticks are in the file).
    assert results["stalls_with_job"]["file"] == str(tmp_path / "work" / "stalls.jsonl")
    assert '"kind": "tick"' in (tmp_path / "work" / "stalls.jsonl").read_text()
    assert json.loads((tmp_path / "out.json").read_text())["size"]["files"] == 64


@pytest.mark.slow
def test_a_plan_larger_than_one_tasks_bound_is_split_into_several_tasks_and_all_of_it_moves(
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene = build_scene(tmp_path, local_store_under_test)
    bound = 600  # compressed plan bytes per task: a few runs at most
    with scene.properties.open("a") as properties:
        properties.write(f"diskless.consolidation.task.runs=2\ndiskless.consolidation.task.bytes={bound}\n")
    try:
        before = scene.read_all()
        # One run task asked: without the bounds the whole plan would travel in it.
        code, report = scene.consolidate(spark, capsys, "--target-object-bytes", "100000", "--run-tasks", "1")
        assert code == 0 and report["status"] == "ok", report
        assert report["runs"] == len(scene.partitions) and report["tasks"] >= report["runs"] // 2 > 1, report
        assert 0 < report["task_payload_max_bytes"] <= bound, report
        assert report["objects_out"] == report["runs"] and report["files_in"] == len(scene.files)
        after = scene.batches()
        assert all(b.object_key not in scene.files for p in scene.partitions for b in after[p])  # all of it moved
        assert scene.read_all() == before
    finally:
        scene.server.stop()


@pytest.mark.slow
def test_a_run_longer_than_one_objects_bound_becomes_several_objects_each_its_own_call(
    local_store_under_test: ObjectStoreUnderTest,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scene = build_scene(tmp_path, local_store_under_test)
    bound = 2  # batches per object: each partition's ~6 batches (one per file) make several objects
    with scene.properties.open("a") as properties:
        properties.write(f"diskless.consolidation.object.max.batches={bound}\n")
    try:
        before, batches_before = scene.read_all(), scene.batches()
        code, report = scene.consolidate(spark, capsys, "--target-object-bytes", "100000")
        assert code == 0 and report["status"] == "ok" and report["refused"] == 0, report
        after = scene.batches()
        per_object: dict[str, int] = {}
        for partition in scene.partitions:
            for b in after[partition]:
                if b.object_key not in scene.files:
                    per_object[b.object_key] = per_object.get(b.object_key, 0) + 1
        assert report["objects_out"] == len(per_object) > len(scene.partitions), report  # several per partition
        assert max(per_object.values()) == bound  # none carries more than the bound
        assert sum(per_object.values()) == report["batches_moved"]
        for partition in scene.partitions:  # all moved but a last batch left alone (one file: not worth a move)
            assert sum(b.object_key in scene.files for b in after[partition]) <= len(batches_before[partition]) % bound
        assert scene.read_all() == before  # same records, same offsets, decoded from the new objects
    finally:
        scene.server.stop()
