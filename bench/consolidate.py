"""`diskless bench consolidate`: small WAL files merged on local Spark, measured (issue #38 item 5).

The store: `files` WAL files of genuine v2 record batches (bench/wal_broker.py), written as `brokers`
brokers write theirs every 250 ms: broker b leads the partitions p with p % brokers == b, and each of its
files holds one batch of every partition it leads. The node keeps the files' metadata (CommitFile), with
a deletion grace of a second so that the files nothing lives in any more are gone by the end. The hand-over probe
delay is the node's default (60 s), as in production: at a second, every file worker's pass probed the owners
before it for every emptied file (KnownFiles): a fifth more of the node's CPU during a 20,000-file job, and a
commit p99 ratio of 2.56 and 3.09 against 1.72 (docs/benchmarks.md, "What is left at 20,000 files"); `--node-setting`
sets it.

Measured: the job's wall time on local Spark; objects in the store, GETs to read every partition from
its start, and the coordinators' live files, before and after; the p99 of a steady commit load
(bench/consolidate_load.py, in a process of its own as a broker's) with the job running against without
(the target: at most 1.5x), with every stall of the node past half a second and its stacks
(bench/stall_watch.py, `stalls.jsonl` in the work directory); and the same work done by one process (the
job's functions called in a loop, no Spark) on a copy of the store and the node's data, made before either ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.consolidate_load import count_objects, layout_gets, live_file_rows, live_files
from bench.load_process import LoadProcess
from bench.node_process import start_node, stop_node
from bench.stall_watch import summarize
from bench.wal_broker import WalBroker
from coordinator.config.settings import Settings
from coordinator.files.object_store import StoreConfig, new_wal_key, open_object_store
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from spark.record_batches import encode_batch

RESULTS = Path(__file__).resolve().parent / "results" / "consolidate.json"
FILE_INTERVAL_MS = 250
BATCH_VARIANTS = 64  # distinct encoded batches the files reuse: genuine bytes without encoding millions
WRITE_THREADS = 32  # files committed at once while building (a window of brokers' 250 ms files)
PROGRESS_EVERY_S = 10.0
DRAIN_TIMEOUT_S = 120.0
STALLS_FILE = "stalls.jsonl"  # bench/stall_watch.py's record of the run, in the work directory
TOPIC_PARTITIONS_MAX = 100
NODE_SETTINGS = {"diskless.coordinator.file.deletion.grace.period.ms": "1000"}


_DEFAULTS = Settings()  # the node's and the job's settings at their defaults


@dataclass(frozen=True, slots=True)
class BenchSize:
    files: int = 100_000
    partitions: int = 1_000
    brokers: int = 16
    coordinators: int = 8
    records_per_batch: int = 4
    value_bytes: int = 100
    target_object_bytes: int = 16 * 1024 * 1024
    load_rate_per_s: float = 8.0  # steady commits per second beside the job
    baseline_s: float = 20.0  # the load alone, before the job
    master: str = "local[2]"
    # The job's settings at their defaults (docs/settings.md): nice and SCHED_IDLE of its processes,
    # the ReplaceBatches duty, batches per object and call, calls sent together.
    job_nice: int = _DEFAULTS.consolidation_job_nice
    job_cpu_idle: bool = _DEFAULTS.consolidation_job_cpu_idle
    one_process: bool = True  # also the same work without Spark, on a copy of the store (for the time ratio)
    replace_duty_percent: int = _DEFAULTS.consolidation_replace_duty_percent
    object_max_batches: int = _DEFAULTS.consolidation_object_max_batches
    replace_group_batches: int = _DEFAULTS.consolidation_replace_group_batches
    seed: int = 38
    # The node's settings over NODE_SETTINGS (e.g. the file workers' pacing, or a worker interval long enough that
    # they do nothing during the job: what the job costs the commits with the node's own file work taken away).
    node_settings: tuple[tuple[str, str], ...] = ()
    # Where the object store lives: "" beside the node's data in the work directory (one disk for both), else a
    # directory of its own, e.g. on another device or a tmpfs, as a real store (S3) shares no disk with a node.
    store_dir: str = ""


def say(line: str) -> None:
    print(f"bench.consolidate: {line}", file=sys.stderr, flush=True)


def _storage(root: Path) -> dict[str, str]:
    return {"diskless.storage.backend": "local", "diskless.storage.local.root": str(root)}


def _node_settings(size: BenchSize, root: Path) -> dict[str, str]:
    return {**NODE_SETTINGS, **dict(size.node_settings), **_storage(root)}


def _variants(size: BenchSize, rng: random.Random) -> list[bytes]:
    from bench.wal_broker import sample_records

    return [encode_batch(sample_records(rng, size.records_per_batch, 1_700_000_000_000 + i, size.value_bytes))
            for i in range(BATCH_VARIANTS)]  # fmt: skip


def store_root(work: Path, size: BenchSize, side: str) -> Path:
    """The object store of side `side` (a: the job's, b: the one-process run's copy)."""
    return Path(size.store_dir) / side if size.store_dir else work / side / "objects"


def build(work: Path, size: BenchSize) -> list[tuple[bytes, int]]:
    """The store and the node's data under `work`; returns the partitions."""
    rng = random.Random(size.seed)
    variants = _variants(size, rng)
    root = store_root(work, size, "a")
    root.mkdir(parents=True)
    (work / "a").mkdir(parents=True, exist_ok=True)
    process, address, _ = start_node(work / "a", size.coordinators, _node_settings(size, root))
    try:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.DisklessCoordinatorStub(channel)
            _wait_serving(stub)
            broker = WalBroker(stub, open_object_store(StoreConfig("local", str(root))))
            topics = -(-size.partitions // TOPIC_PARTITIONS_MAX)
            per_topic = -(-size.partitions // topics)
            topic_ids = [broker.create_topic(f"bench-{t}", per_topic) for t in range(topics)]
            partitions = [(topic_id, p) for topic_id in topic_ids for p in range(per_topic)][: size.partitions]
            owners = {tp: broker.coordinator_of(*tp) for tp in partitions}
            _write_files(stub, root, size, partitions, owners, variants)
    finally:
        stop_node(process)
    return partitions


def _write_files(
    stub: pb_grpc.DisklessCoordinatorStub,
    root: Path,
    size: BenchSize,
    partitions: list[tuple[bytes, int]],
    owners: dict[tuple[bytes, int], int],
    variants: list[bytes],
) -> None:
    led = [[tp for i, tp in enumerate(partitions) if i % size.brokers == b] for b in range(size.brokers)]
    store = open_object_store(StoreConfig("local", str(root)))
    done, lock, started = [0], threading.Lock(), time.monotonic()

    def write(index: int) -> None:
        broker, rng = index % size.brokers, random.Random(index)
        data, batches = bytearray(), []
        for topic_id, partition in led[broker]:
            encoded = variants[rng.randrange(len(variants))]
            batches.append(pb.CommitFileRequest.Batch(
                magic=2, topic_id=topic_id, partition=partition, byte_offset=len(data), size=len(encoded),
                base_offset=0, last_offset=size.records_per_batch - 1,
                batch_max_timestamp=1_700_000_000_000 + index // size.brokers * FILE_INTERVAL_MS,
                timestamp_type=pb.CREATE_TIME, producer_id=-1, producer_epoch=-1, base_sequence=-1, last_sequence=-1,
            ))  # fmt: skip
            data += encoded
        key = new_wal_key()
        store.put(key, bytes(data))
        owner_ids = list(dict.fromkeys(owners[(b.topic_id, b.partition)] for b in batches))
        answer = stub.CommitFile(pb.CommitFileRequest(object_key=key, object_format=1, file_size=len(data),
                                                      uploader_broker_id=broker, owner_ids=owner_ids,
                                                      batches=batches), timeout=120)  # fmt: skip
        if any(b.error_code != pb.NONE for b in answer.batches):
            raise RuntimeError(f"CommitFile {key}: {answer.batches[0]}")
        with lock:
            done[0] += 1
            if done[0] % 1000 == 0:
                say(f"building: {done[0]:,}/{size.files:,} files ({done[0] / (time.monotonic() - started):,.0f}/s)")

    # One pool kept busy: waves of files each waited for their slowest commit (32 files/s at 10,000).
    # The files are submitted in broker-time order, so their commit order follows it within the window.
    with futures.ThreadPoolExecutor(WRITE_THREADS) as pool:
        for _ in pool.map(write, range(size.files)):
            pass


def _wait_serving(stub: pb_grpc.DisklessCoordinatorStub) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            described = stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=5)
            if described.coordinators and all(c.error_code == pb.NONE for c in described.coordinators):
                return
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the node is not serving")


def _state(
    stub: pb_grpc.DisklessCoordinatorStub, root: Path, partitions: list[tuple[bytes, int]], load_keys: list[str]
) -> dict[str, Any]:
    """Objects, GETs and the coordinators' live files (rows: a file live in two counts twice) of the built
    partitions: the steady load's own files are left out."""
    files = live_files(stub)
    files["live"] -= live_file_rows(stub, load_keys)
    return {"objects": count_objects(root) - len(load_keys), **layout_gets(stub, partitions), "files": files}


def _drained(stub: pb_grpc.DisklessCoordinatorStub) -> None:
    """Waits until the coordinators have handed over and deleted every file nothing lives in any more."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        files = live_files(stub)
        if files["awaiting_handover"] == 0 and files["awaiting_deletion"] == 0:
            return
        time.sleep(1.0)
    say("the coordinators had not deleted every emptied file within the bound; counted as they were")


def _options(address: str, root: Path, size: BenchSize, committed_before_ms: int = 0) -> Any:
    from spark.consolidation_options import ConsolidateOptions
    from spark.coordinator_client import CoordinatorAccess

    return ConsolidateOptions(access=CoordinatorAccess((address,)), store=StoreConfig("local", str(root)),
                              min_age_ms=0, target_object_bytes=size.target_object_bytes,
                              max_files=size.files, committed_before_ms=committed_before_ms,
                              job_nice=size.job_nice, job_cpu_idle=size.job_cpu_idle,
                              replace_duty_percent=size.replace_duty_percent,
                              replace_group_batches=size.replace_group_batches,
                              max_batches_per_run=size.object_max_batches)  # fmt: skip


def _watch_stalls(closing: contextlib.ExitStack, work: Path, address: str, node_pid: int) -> subprocess.Popen[bytes]:
    """bench/stall_watch.py beside the node: a call it does not answer within half a second gets the node's
    and this process's stacks (the driver's, which holds the plan) written down while it lasts."""
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.stall_watch",
            "--address",
            address,
            "--pid",
            str(node_pid),
            "--pid",
            str(os.getpid()),
            "--out",
            str(work / STALLS_FILE),
        ]
    )
    closing.callback(watcher.kill)  # fmt: skip
    return watcher


def one_process(address: str, root: Path, size: BenchSize) -> dict[str, Any]:
    """The same work without Spark: plan every coordinator, cut the runs, move them one by one."""
    from spark.consolidation_planning import plan_runs
    from spark.consolidation_tasks import PlanRequest, RunPlan, move_run
    from spark.coordinator_client import discover

    options = _options(address, root, size)
    started = time.monotonic()
    discovery = discover(options.access)
    request = PlanRequest(options.access, options.min_age_ms, options.max_file_size, options.max_files,
                          options.committed_before_ms)  # fmt: skip
    planned = plan_runs([(c.coordinator_id, c.node) for c in discovery.coordinators], request,
                        options.target_object_bytes, options.max_batches_per_run)  # fmt: skip
    plan = RunPlan(options.store, options.access, {c.coordinator_id: c.node for c in discovery.coordinators},
                   discovery.nodes, options.uploader_broker_id)  # fmt: skip
    moved = objects = 0
    for run in planned.runs:
        result = move_run(run, plan)
        moved += result.batches_moved
        objects += result.status == "moved"
    return {"wall_s": round(time.monotonic() - started, 2), "batches_moved": moved, "objects_out": objects}


def run_benchmark(size: BenchSize, work: Path, out: Path | None = RESULTS, spark: Any = None) -> dict[str, Any]:
    from spark.consolidation import open_consolidation_session, run_consolidation

    shutil.rmtree(work, ignore_errors=True)
    root_a, root_b = store_root(work, size, "a"), store_root(work, size, "b")
    for root in (root_a, root_b):
        shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    partitions = build(work, size)
    build_s = time.monotonic() - started
    built_ms = time.time_ns() // 1_000_000
    say(f"built {size.files:,} files in {build_s:.0f} s")
    if size.one_process:
        say("copying the store for the one-process run")
        subprocess.run(["cp", "-a", str(work / "a"), str(work / "b")], check=True)
        if size.store_dir:
            subprocess.run(["cp", "-a", str(root_a), str(root_b)], check=True)
    results: dict[str, Any] = {"size": asdict(size), "build_s": round(build_s, 1), "load_average": os.getloadavg()}
    node_a, address_a, _ = start_node(work / "a", size.coordinators, _node_settings(size, root_a))
    closing = contextlib.ExitStack()
    session = spark or open_consolidation_session(
        size.master, {"spark.ui.enabled": "false"}, size.job_nice, size.job_cpu_idle
    )
    try:
        with grpc.insecure_channel(address_a) as channel:
            stub = pb_grpc.DisklessCoordinatorStub(channel)
            _wait_serving(stub)
            results["before"] = _state(stub, root_a, partitions, [])
            load = LoadProcess(address_a, StoreConfig("local", str(root_a)), size.load_rate_per_s)
            closing.callback(load.close)
            watcher = _watch_stalls(closing, work, address_a, node_a.pid)
            baseline_started = time.time()
            load.start()
            time.sleep(size.baseline_s)
            results["load_without_job"] = load.stop()
            load.start()
            job_started, job_started_wall = time.monotonic(), time.time()
            # Only the built files: the steady load's own (committed since) are not the job's to merge here.
            report = run_consolidation(session, _options(address_a, root_a, size, built_ms), say=say)
            results["spark_wall_s"] = round(time.monotonic() - job_started, 2)
            results["load_with_job"] = load.stop()
            job_ended_wall = time.time()
            results["job"] = json.loads(report.to_json())
            _drained(stub)
            results["after"] = _state(stub, root_a, partitions, load.keys)
            watcher.terminate()
            watcher.wait(30)
            results["stalls_without_job"] = summarize(work / STALLS_FILE, baseline_started, job_started_wall)
            results["stalls_with_job"] = summarize(work / STALLS_FILE, job_started_wall, job_ended_wall)
    finally:
        closing.close()
        if spark is None:
            session.stop()
        stop_node(node_a)
    if size.one_process:
        node_b, address_b, _ = start_node(work / "b", size.coordinators, _node_settings(size, root_b))
        try:
            with grpc.insecure_channel(address_b) as channel:
                _wait_serving(pb_grpc.DisklessCoordinatorStub(channel))
            results["one_process"] = one_process(address_b, root_b, size)
        finally:
            stop_node(node_b)
        results["spark_vs_one_process"] = round(
            results["spark_wall_s"] / max(results["one_process"]["wall_s"], 1e-9), 2
        )
    without, with_job = results["load_without_job"]["p99_ms"], results["load_with_job"]["p99_ms"]
    results["commit_p99_ratio"] = round(with_job / without, 2) if without else None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
    return results


def table(results: dict[str, Any]) -> str:
    before, after, job = results["before"], results["after"], results["job"]
    one_process = (
        f"{results['one_process']['wall_s']} s (ratio {results['spark_vs_one_process']})"
        if "one_process" in results
        else "not run"
    )
    rows = [
        ("files (size)", f"{results['size']['files']:,} files, {results['size']['partitions']:,} partitions, "
                         f"{results['size']['brokers']} brokers"),
        ("job wall time (local Spark)", f"{results['spark_wall_s']} s; one process: {one_process}"),
        ("objects in the store", f"{before['objects']:,} -> {after['objects']:,}"),
        ("GETs to read every partition", f"{before['gets']:,} -> {after['gets']:,}"),
        ("coordinators' live files", f"{before['files']['live']:,} -> {after['files']['live']:,}"),
        ("batches moved, objects out", f"{job['batches_moved']:,}, {job['objects_out']:,} (status {job['status']})"),
        ("commit p99 without / with job", f"{results['load_without_job']['p99_ms']} ms / "
                                          f"{results['load_with_job']['p99_ms']} ms "
                                          f"(ratio {results['commit_p99_ratio']}, target <= 1.5)"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def default_work_dir() -> Path:
    return Path(tempfile.gettempdir()) / "diskless-consolidate-bench"
