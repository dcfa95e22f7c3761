"""The orphan scan at scale: `python -m bench.orphan_scan --objects 1000000 [--runs 3] [--store s3]`.

Builds a local object store of N WAL objects (or reuses the one built before
in --work-dir for the same N and known count), all last modified two days
ago, and a coordinator that knows `--known` of them (committed once, at build
time, so the oldest live file is the build's). Each run then scans the same
store twice against the same running coordinator, with the default grace
period (one day, so every object is a candidate):

- spark: the real job (spark/orphan_scan.py, a dry run, in-process, `--master`):
  listing on executors, every coordinator's known keys streamed (ListFileKeys),
  the anti-join, the manifest;
- plain: the baseline, one Python process classifying key by key as the scan
  did before the anti-join: an os.scandir walk of the store, then DescribeFiles
  in batches of 1000 to the node, one batch after the other.

Both must find the same orphans. Medians per phase over the runs go to a table
on stdout and to bench/results/orphan_scan.json, with the load average before
each run. `--store s3` runs the same against moto's S3 server on 127.0.0.1
instead (bench/orphan_scan_s3.py: the objects are put in parallel, and made old
by the clock: the scans run with grace 0).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.coordinator_system import CoordinatorServer
from coordinator.config.settings import Settings
from coordinator.files.object_store import StoreConfig, new_wal_key
from coordinator.machine.object_keys import WAL_KEY_PATTERN
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

RESULTS = Path(__file__).resolve().parent / "results" / "orphan_scan.json"
DEFAULT_WORK_DIR = Path(tempfile.gettempdir()) / "diskless-orphan-scan-bench"
OBJECT_AGE_MS = 2 * 86_400_000  # older than the default grace period (one day) before the oldest live file
OBJECT_BYTES = 64
COORDINATORS = 4
TOPIC_PARTITIONS = 16
COMMIT_THREADS = 16
DESCRIBE_BATCH_KEYS = 1000
PROGRESS_EVERY = 50_000
SERVING_TIMEOUT_S = 600
# The coordinator must not delete or hand over anything during the benchmark.
SERVER_SETTINGS = {
    "diskless.coordinator.file.deletion.grace.period.ms": str(30 * 86_400_000),
    "diskless.coordinator.file.handover.probe.delay.ms": str(30 * 86_400_000),
}


def say(line: str) -> None:
    print(f"bench.orphan_scan: {line}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- the store and the coordinator


def local_storage(work_dir: Path) -> dict[str, str]:
    return {"diskless.storage.backend": "local", "diskless.storage.local.root": str(work_dir / "objects")}


def start_server(work_dir: Path, storage: dict[str, str]) -> CoordinatorServer:
    """A `diskless serve` of COORDINATORS coordinators on the store, once it answers SERVING."""
    server = CoordinatorServer(work_dir / "data", COORDINATORS, {**SERVER_SETTINGS, **storage})
    server.start()
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + SERVING_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if (
                    health.Check(health_pb2.HealthCheckRequest(), timeout=5).status  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
                    == health_pb2.HealthCheckResponse.SERVING
                ):
                    return server
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    server.stop()
    raise RuntimeError("the coordinator did not become SERVING:\n" + "".join(server.output[-20:]))


def _write_objects(root: Path, objects: int) -> list[str]:
    """N objects written straight as files (the store's own put fsyncs each one: hours at 1M)."""
    for i in range(256):
        (root / "wal" / f"{i:02x}").mkdir(parents=True, exist_ok=True)
    old_ns = (time.time_ns() // 1_000_000 - OBJECT_AGE_MS) * 1_000_000
    payload = b"w" * OBJECT_BYTES
    keys = []
    started = time.monotonic()
    for i in range(objects):
        key = new_wal_key()
        path = os.path.join(root, key)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(descriptor, payload)
        os.close(descriptor)
        os.utime(path, ns=(old_ns, old_ns))
        keys.append(key)
        if (i + 1) % PROGRESS_EVERY == 0 or i + 1 == objects:
            rate = (i + 1) / max(time.monotonic() - started, 1e-9)
            say(f"building: {i + 1:,}/{objects:,} objects ({rate:,.0f}/s)")
    return keys


def commit(address: str, keys: list[str]) -> None:
    """Commits `keys` (one batch each) so that the coordinator knows them, from a few threads at once."""
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        topic_id = uuid.uuid4().bytes
        created = stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name="bench-orphan-scan",
                                                         num_partitions=TOPIC_PARTITIONS)]
            ),
            timeout=60,
        )  # fmt: skip
        assert created.topics[0].error_code == pb.NONE, created

        found = stub.FindCoordinator(
            pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(TOPIC_PARTITIONS))]
            ),
            timeout=60,
        )
        owner_of = {p.partition: p.coordinator_id for p in found.topics[0].partitions}

        def commit(index_key: tuple[int, str]) -> None:
            index, key = index_key
            partition = index % TOPIC_PARTITIONS
            batch = pb.CommitFileRequest.Batch(
                magic=2, topic_id=topic_id, partition=partition, byte_offset=0, size=OBJECT_BYTES, base_offset=0,
                last_offset=0, batch_max_timestamp=1, timestamp_type=pb.CREATE_TIME, producer_id=-1,
                producer_epoch=-1, base_sequence=-1, last_sequence=-1,
            )  # fmt: skip
            response = stub.CommitFile(
                pb.CommitFileRequest(object_key=key, object_format=1, file_size=OBJECT_BYTES, uploader_broker_id=1,
                                     owner_ids=[owner_of[partition]], batches=[batch]),
                timeout=60,
            )  # fmt: skip
            assert response.batches[0].error_code == pb.NONE, response

        with futures.ThreadPoolExecutor(COMMIT_THREADS) as pool:
            for done, _ in enumerate(pool.map(commit, enumerate(keys)), start=1):
                if done % PROGRESS_EVERY == 0 or done == len(keys):
                    say(f"committing: {done:,}/{len(keys):,} files")


def build(work_dir: Path, objects: int, known: int) -> None:
    """The store and the coordinator's state, unless built before for the same sizes."""
    marker = work_dir / "built.json"
    wanted = {"objects": objects, "known": known}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        say(f"reusing the store in {work_dir} ({objects:,} objects, {known:,} known)")
        return
    shutil.rmtree(work_dir, ignore_errors=True)
    (work_dir / "objects").mkdir(parents=True)
    keys = _write_objects(work_dir / "objects", objects)
    server = start_server(work_dir, local_storage(work_dir))
    try:
        commit(server.address, keys[:known])
    finally:
        server.stop()
    marker.write_text(json.dumps(wanted))


# ---------------------------------------------------------------------- the two scans


def spark_scan(
    spark: Any, address: str, store: StoreConfig, manifests: Path, grace_period_ms: int | None = None
) -> dict[str, Any]:
    """The real job, a dry run; `grace_period_ms`: the default one (a day) unless given (forced below the floor)."""
    from spark.coordinator_client import CoordinatorAccess
    from spark.options import ScanOptions
    from spark.orphan_scan import run_scan
    from spark.rules import GRACE_FLOOR_MS

    defaults = Settings()
    grace = defaults.orphan_scan_grace_period_ms if grace_period_ms is None else grace_period_ms
    options = ScanOptions(
        access=CoordinatorAccess((address,)),
        store=store,
        key_pattern=defaults.orphan_scan_key_pattern,
        grace_period_ms=grace,
        max_orphan_percent=100,
        manifest_dir=str(manifests),
        force=grace < GRACE_FLOOR_MS,
    )
    report = run_scan(spark, options, say=say)
    assert report.status == "ok", report.to_table()
    shutil.rmtree(report.manifest, ignore_errors=True)  # ~1M rows per run: keep the disk clean
    return {
        "phases": dict(report.durations_s),
        "total_s": round(sum(report.durations_s.values()), 3),
        "listed": report.listed,
        "candidates": report.candidates,
        "known_keys": report.known_keys,
        "orphans": report.orphans,
        "threshold_ms": report.threshold_ms,
    }


def _walk(root: str) -> list[tuple[str, int, int]]:
    """(key, size, last modified ms) of every file under root, depth first, by os.scandir."""
    found = []
    pending = [("", root)]
    while pending:
        base, directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith(".tmp-"):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append((f"{base}{entry.name}/", entry.path))
                else:
                    stat = entry.stat(follow_symlinks=False)
                    found.append((base + entry.name, stat.st_size, stat.st_mtime_ns // 1_000_000))
    return found


Listing = Callable[[], list[tuple[str, int, int]]]  # (key, size, last modified ms) of every object


def local_listing(root: Path) -> Listing:
    return lambda: _walk(str(root))


def plain_scan(address: str, listing: Listing, prefix: str, threshold_ms: int) -> dict[str, Any]:
    """The baseline: list in one process, then DescribeFiles for every candidate, batch after batch."""
    pattern = re.compile(WAL_KEY_PATTERN)
    started = time.monotonic()
    listed = listing()
    candidates = [
        key
        for key, _, modified in listed
        if key.startswith(prefix) and pattern.fullmatch(key[len(prefix) :]) and modified < threshold_ms
    ]
    listing_s = time.monotonic() - started
    started = time.monotonic()
    orphans = 0
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        for first in range(0, len(candidates), DESCRIBE_BATCH_KEYS):
            keys = candidates[first : first + DESCRIBE_BATCH_KEYS]
            response = stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=keys), timeout=120)
            orphans += sum(
                1
                for f in response.files
                if f.error_code == pb.NONE and f.state == pb.FILE_STATE_UNKNOWN and not f.coordinator_ids
            )
    classifying_s = time.monotonic() - started
    return {
        "phases": {"listing": round(listing_s, 3), "classifying": round(classifying_s, 3)},
        "total_s": round(listing_s + classifying_s, 3),
        "listed": len(listed),
        "candidates": len(candidates),
        "orphans": orphans,
    }


def scan_runs(
    session: Any, address: str, store: StoreConfig, listing: Listing, work_dir: Path, runs: int,
    grace_period_ms: int | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """`runs` times: the Spark scan, then the plain one with the Spark scan's threshold; each with its load."""
    spark_runs, plain_runs = [], []
    for run in range(1, runs + 1):
        say(f"run {run}/{runs}: spark (load average {os.getloadavg()[0]:.2f})")
        load = _load_average()
        spark_runs.append(
            {**spark_scan(session, address, store, work_dir / "manifests", grace_period_ms), "load_average": load}
        )
        say(f"run {run}/{runs}: plain (load average {os.getloadavg()[0]:.2f})")
        load = _load_average()
        threshold_ms = spark_runs[-1]["threshold_ms"]
        plain_runs.append({**plain_scan(address, listing, store.prefix, threshold_ms), "load_average": load})
    return spark_runs, plain_runs


def _load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


# ---------------------------------------------------------------------- runs, medians, the table


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    phases = {name: round(statistics.median(r["phases"][name] for r in runs), 3) for name in runs[0]["phases"]}
    last = runs[-1]
    return {
        "phases_s": phases,
        "total_s": round(statistics.median(r["total_s"] for r in runs), 3),
        "load_average_1m": round(statistics.median(r["load_average"][0] for r in runs), 2),
        "listed": last["listed"],
        "candidates": last["candidates"],
        "orphans": last["orphans"],
        "runs": runs,
    }


def table(results: dict[str, Any]) -> str:
    spark, plain = results["spark"], results["plain"]
    names = list(dict.fromkeys([*spark["phases_s"], *plain["phases_s"]]))
    lines = [
        f"orphan scan of {results['objects']:,} objects ({results['known']:,} known) in a {results['store']} store, "
        f"median of {results['runs']} run(s), Spark master {results['master']} on {results['cores']} cores, load "
        f"average {results['spark']['load_average_1m']:.2f} (spark), {results['plain']['load_average_1m']:.2f} (plain)",
        f"{'phase':<14}{'spark (s)':>12}{'plain (s)':>12}",
    ]
    for name in names:
        cells = [f"{s[name]:>12.2f}" if name in s else f"{'-':>12}" for s in (spark["phases_s"], plain["phases_s"])]
        lines.append(f"{name:<14}{''.join(cells)}")
    lines.append(f"{'total':<14}{spark['total_s']:>12.2f}{plain['total_s']:>12.2f}")
    rate = [results["objects"] / max(r["total_s"], 1e-9) for r in (spark, plain)]
    lines.append(f"{'objects/s':<14}{rate[0]:>12,.0f}{rate[1]:>12,.0f}")
    lines.append(f"orphans found: spark {spark['orphans']:,}, plain {plain['orphans']:,}")
    return "\n".join(lines)


def run_benchmark(
    objects: int,
    known: int,
    runs: int,
    work_dir: Path = DEFAULT_WORK_DIR,
    out: Path = RESULTS,
    spark: Any = None,
    master: str = "local[*]",
) -> dict[str, Any]:
    check_sizes(objects, known, runs)
    session = spark
    if session is None:
        from spark.orphan_scan import open_session

        session = open_session(master)  # before any gRPC channel of ours: the JVM is forked from a quiet process
    try:
        build(work_dir, objects, known)
        server = start_server(work_dir, local_storage(work_dir))
        try:
            store = StoreConfig(backend="local", local_root=str(work_dir / "objects"))
            spark_runs, plain_runs = scan_runs(
                session, server.address, store, local_listing(work_dir / "objects"), work_dir, runs
            )
        finally:
            server.stop()
        master_used = session.sparkContext.master
    finally:
        if spark is None:
            session.stop()
    return write_results(out, {"objects": objects, "known": known, "runs": runs, "master": master_used,
                               "store": "local"}, spark_runs, plain_runs)  # fmt: skip


def check_sizes(objects: int, known: int, runs: int) -> None:
    if not 0 <= known <= objects or runs < 1:
        raise ValueError(f"need 0 <= known <= objects and runs >= 1, got {known}, {objects}, {runs}")


def write_results(
    out: Path, facts: dict[str, Any], spark_runs: list[dict[str, Any]], plain_runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The medians of both scans, with `facts` about the run, written to `out` as JSON; they must agree."""
    results = {
        **facts, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "spark": _medians(spark_runs), "plain": _medians(plain_runs),
    }  # fmt: skip
    if results["spark"]["orphans"] != results["plain"]["orphans"]:
        raise AssertionError(f"the scans disagree: {results['spark']['orphans']} vs {results['plain']['orphans']}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.orphan_scan", description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1_000_000, help="objects in the store (default 1,000,000)")
    parser.add_argument("--known", type=int, help="of them committed to the coordinator (default 1%%)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each scan; medians are reported (default 3)")
    parser.add_argument("--store", choices=("local", "s3"), default="local", help="local (default) or s3 (moto)")
    parser.add_argument("--put-threads", type=int, default=32, help="s3: threads putting the objects (default 32)")
    parser.add_argument("--work-dir", type=Path, help=f"the store and the coordinator (default {DEFAULT_WORK_DIR}/<N>)")
    parser.add_argument("--out", type=Path, help=f"the JSON results (default {RESULTS}, or orphan_scan_s3.json)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    args = parser.parse_args(argv)
    known = args.known if args.known is not None else args.objects // 100
    work_dir = args.work_dir or DEFAULT_WORK_DIR / (str(args.objects) + ("-s3" if args.store == "s3" else ""))
    if args.store == "s3":
        from bench.orphan_scan_s3 import S3_RESULTS, run_s3_benchmark

        out = args.out or S3_RESULTS
        results = run_s3_benchmark(args.objects, known, args.runs, work_dir, out, args.put_threads, args.master)
    else:
        out = args.out or RESULTS
        results = run_benchmark(args.objects, known, args.runs, work_dir, out, master=args.master)
    print(table(results))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
