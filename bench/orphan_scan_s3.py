"""The orphan-scan benchmark against S3: moto's server on 127.0.0.1 (`python -m bench.orphan_scan --store s3`).

moto keeps its objects in memory: the store is built again on every run of the
benchmark, in a bucket of its own. The objects are put from `--put-threads`
threads at once (moto answers one request in a few milliseconds; one after the
other, 100k objects would take ten minutes), and their time is reported. S3
cannot be told an object is two days old: they are made old by the clock, as
the tests do. Every object is put first, then (past the next whole second,
since moto keeps LastModified in seconds) the known ones are committed, and the
scans run with grace 0: the threshold is then the first commit's time, and
every object is a candidate. The AWS variables point boto3 at fake keys before
the Spark session starts, so that its executors inherit them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench.orphan_scan import (
    OBJECT_BYTES,
    PROGRESS_EVERY,
    RESULTS,
    Listing,
    check_sizes,
    commit,
    say,
    scan_runs,
    start_server,
    write_results,
)
from coordinator.files.object_store import StoreConfig, new_wal_key, open_object_store

S3_RESULTS = RESULTS.with_name("orphan_scan_s3.json")
REGION = "us-east-1"
PREFIX = "orphan-bench/"
FAKE_AWS_ENVIRONMENT = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": REGION}
# Anything that could send the benchmark to a real account or endpoint.
REAL_AWS_VARIABLES = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
MOTO_START_TIMEOUT_S = 30
S3_TIME_RESOLUTION_S = 1.0  # moto keeps LastModified in whole seconds
TICK_MARGIN_S = 0.05


@contextmanager
def moto_s3(log_path: Path) -> Iterator[str]:
    """moto's S3 server on a free loopback port, with this process's AWS variables faked; yields its endpoint URL.

    The variables are restored on the way out.
    """
    saved = dict(os.environ)
    for name in REAL_AWS_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(FAKE_AWS_ENVIRONMENT)
    os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + MOTO_START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto did not start:\n{log_path.read_text(errors='replace')}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.environ.clear()
        os.environ.update(saved)


def put_objects(endpoint: str, bucket: str, objects: int, threads: int) -> tuple[list[str], float]:
    """Creates the bucket and puts `objects` WAL objects from `threads` threads; (their keys, seconds taken)."""
    client = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=REGION, config=Config(max_pool_connections=threads)
    )
    client.create_bucket(Bucket=bucket)
    keys = [new_wal_key(PREFIX) for _ in range(objects)]
    payload = b"w" * OBJECT_BYTES
    started = time.monotonic()
    with futures.ThreadPoolExecutor(threads) as pool:
        puts = pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=payload), keys)
        for done, _ in enumerate(puts, start=1):
            if done % PROGRESS_EVERY == 0 or done == objects:
                rate = done / max(time.monotonic() - started, 1e-9)
                say(f"putting: {done:,}/{objects:,} objects ({rate:,.0f}/s, {threads} threads)")
    client.close()
    return keys, time.monotonic() - started


def s3_listing(store: StoreConfig) -> Listing:
    def listing() -> list[tuple[str, int, int]]:
        opened = open_object_store(store)
        try:
            return [(info.key, info.size, info.last_modified_ms) for info in opened.list(store.prefix)]
        finally:
            opened.close()

    return listing


def storage_settings(store: StoreConfig) -> dict[str, str]:
    return {
        "diskless.storage.backend": "s3",
        "diskless.storage.s3.bucket": store.s3_bucket,
        "diskless.storage.s3.prefix": store.s3_prefix,
        "diskless.storage.s3.endpoint.url": store.s3_endpoint_url,
        "diskless.storage.s3.region": store.s3_region,
    }


def run_s3_benchmark(
    objects: int,
    known: int,
    runs: int,
    work_dir: Path,
    out: Path,
    put_threads: int,
    master: str = "local[*]",
    spark: Any = None,
) -> dict[str, Any]:
    """As run_benchmark, on moto; `spark`: a session whose executors already see fake AWS keys (a test's)."""
    check_sizes(objects, known, runs)
    work_dir.mkdir(parents=True, exist_ok=True)
    with moto_s3(work_dir / "moto.log") as endpoint:
        from spark.orphan_scan import open_session

        session = spark or open_session(master)  # after the fake AWS variables: its executors inherit them
        try:
            bucket = f"orphan-bench-{uuid.uuid4().hex[:12]}"
            keys, put_s = put_objects(endpoint, bucket, objects, put_threads)
            store = StoreConfig(
                backend="s3", s3_bucket=bucket, s3_prefix=PREFIX, s3_endpoint_url=endpoint, s3_region=REGION
            )
            time.sleep(S3_TIME_RESOLUTION_S - time.time() % S3_TIME_RESOLUTION_S + TICK_MARGIN_S)
            server = start_server(work_dir / f"coordinator-{bucket}", storage_settings(store))
            try:
                commit(server.address, keys[:known])
                spark_runs, plain_runs = scan_runs(
                    session, server.address, store, s3_listing(store), work_dir, runs, grace_period_ms=0
                )
            finally:
                server.stop()
            master_used = session.sparkContext.master
        finally:
            if spark is None:
                session.stop()
    facts = {
        "objects": objects, "known": known, "runs": runs, "master": master_used, "store": "s3 (moto server)",
        "put": {"seconds": round(put_s, 1), "threads": put_threads, "objects_per_s": round(objects / put_s)},
    }  # fmt: skip
    return write_results(out, facts, spark_runs, plain_runs)
