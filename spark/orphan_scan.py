"""The orphan-file scan on PySpark (DESIGN §7): find WAL objects no coordinator knows, and delete them.

Run it as `diskless orphan-scan ...` or `spark-submit spark/command.py ...`
(same flags), or call `run_scan(spark, options)` with a session of your own.

Phases, each timed and reported while it runs:

1. coordinators (driver): every coordinator is asked before anything is
   listed (and before a Spark application is started); the scan aborts if
   any cannot answer. The threshold is the oldest live file's commit time
   minus the grace period, or now minus it (spark/rules.py).
2. listing (executors): 257 key-prefix slices spread over the listing tasks
   (spark/listing.py); rows stay on the executors, cached; the driver gets one
   small summary per task.
3. known keys (executors): one task per coordinator streams every key it
   knows from its leader (ListFileKeys: one snapshot, in pages), into a
   cached DataFrame; a coordinator that cannot tell all it knows aborts the
   scan (spark/coordinator_client.py).
4. anti-join: the candidates (WAL keys older than the threshold) left-joined
   with the known keys, each key in its most alive state; candidates with no
   match are the orphans, the matched ones give the known breakdown. Cached;
   the driver gets the counts per state and a sample.
5. manifest: the orphans (key, size, last_modified) written as Parquet under
   `<manifest dir>/<scan id>`, by Spark, in a dry run too, so that an operator
   can review what a deleting run would remove. Then the orphan share limit:
   past it the scan aborts, a dry run too (it says what a deleting run would
   do), with the manifest left for review.
6. deleting (executors, `--delete` only): the coordinators are asked again and
   must be the same ones on the same nodes; the manifest is read back (what is
   deleted is what was written), capped at `--max-deletes`, spread over one
   task per core, each re-checking every batch with DescribeFiles right before
   deleting it and pacing its share of `--delete-rate` (spark/deletion.py): a
   file committed after its key was read is kept.

Under spark-submit, Spark merges the Python driver's stderr into its stdout:
the progress lines (`orphan-scan: ...`) then appear among the report's.

Like Iceberg's DeleteOrphanFiles and Delta's VACUUM: a dry run by default, an
age threshold with a floor, the listing anti-joined with the files the metadata
knows, and the list of files written before any is deleted. Unlike them, the
metadata is the live coordinators': any doubt (an error, a stream cut short, a
changed set of coordinators, a re-check without an answer) keeps the file.
"""

from __future__ import annotations

import functools
import operator
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from protos import coordinator_pb2 as pb
from spark import coordinator_client
from spark.coordinator_client import CoordinatorsUnavailable, Discovery, discover
from spark.deletion import DeletePlan, DeleteTally, delete_task
from spark.listing import (
    CANDIDATE,
    FOREIGN,
    YOUNG,
    ListingRules,
    ListingSummary,
    candidate_fields,
    is_candidate,
    list_task,
    listing_slices,
    spread,
    summarize_listing,
)
from spark.options import LISTING_TASKS_MAX, ScanOptions
from spark.progress import PhaseClock, Say, say_on_stderr
from spark.report import SAMPLE_MAX, ScanReport
from spark.rules import orphan_share_percent, orphan_share_problem, scan_threshold

APP_NAME = "diskless-orphan-scan"
LISTING_TASKS_PER_CORE = 4  # enough to even out slow prefixes, few enough that task overhead stays small
MANIFEST_ROWS_PER_FILE = 250_000  # a few files of a large manifest are written in parallel
KNOWN_KEYS = StructType(
    [StructField("key", StringType(), nullable=False), StructField("state", IntegerType(), nullable=False)]
)
MANIFEST_INPUT = StructType(
    [
        StructField("key", StringType(), nullable=False),
        StructField("size", LongType(), nullable=False),
        StructField("last_modified_ms", LongType(), nullable=False),
    ]
)
FAILURE_LINE_MAX = 500


class ScanAborted(Exception):
    """A safety rule stopped the scan; nothing more is deleted."""


def open_session(master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session for the scan: --master, else spark-submit's, else local[*]; `conf`: more Spark settings."""
    builder = SparkSession.builder.appName(APP_NAME).config("spark.ui.showConsoleProgress", "false")
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM with its own --master
    if master or not under_submit:
        master = master or "local[*]"
        builder = builder.master(master)
        if master.startswith("local"):
            # Local executors are this machine's Python: the one running us has the coordinator's packages.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()


def new_scan_id(now_ms: int) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_ms / 1000)) + f"-{uuid.uuid4().hex[:8]}"


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _store_description(options: ScanOptions) -> str:
    store = options.store
    if store.backend == "s3":
        endpoint = f" at {store.s3_endpoint_url}" if store.s3_endpoint_url else ""
        return f"s3://{store.s3_bucket}/{store.s3_prefix}{endpoint}"
    return f"local {os.path.abspath(store.local_root)}"


def new_report(options: ScanOptions, now_ms: int, scan_id: str | None = None) -> ScanReport:
    return ScanReport(
        scan_id=scan_id or new_scan_id(now_ms),
        mode="delete" if options.delete else "dry-run",
        started_at_ms=now_ms,
        store=_store_description(options),
        key_pattern=options.key_pattern,
        grace_period_ms=options.grace_period_ms,
        max_orphan_percent=options.max_orphan_percent,
        max_deletes=options.max_deletes,
        delete_rate=options.delete_rate,
    )


def _spark_failure(phase: str, error: BaseException) -> str:
    """One line from a failed Spark job: its last meaningful line (a task's exception), shortened."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip() and not line.strip().startswith("at ")]
    detail = lines[-1] if lines else type(error).__name__
    return f"{phase} failed: {detail[:FAILURE_LINE_MAX]}"


def run_scan(
    spark: SparkSession | Callable[[], SparkSession],
    options: ScanOptions,
    *,
    now_ms: Callable[[], int] = _wall_clock_ms,
    say: Say = say_on_stderr,
    scan_id: str | None = None,
) -> ScanReport:
    """One scan; `spark` is a session, or makes one once the coordinators have answered (none if they did not)."""
    started_ms = now_ms()
    report = new_report(options, started_ms, scan_id)
    clock = PhaseClock(report.durations_s, say)
    cached: list[Any] = []
    try:
        _scan(spark, options, report, clock, started_ms, cached)
    except ScanAborted as aborted:
        report.abort(str(aborted))
        say(f"aborted: {aborted}")
    finally:
        for rdd in cached:
            rdd.unpersist()
    report.finish()
    return report


def _scan(
    spark: SparkSession | Callable[[], SparkSession],
    options: ScanOptions,
    report: ScanReport,
    clock: PhaseClock,
    now_ms: int,
    cached: list[Any],
) -> None:
    with clock.phase("coordinators"):
        try:
            discovery = discover(options.access)
        except CoordinatorsUnavailable as error:
            raise ScanAborted(f"a coordinator cannot answer, nothing listed: {error}") from None
        _note_threshold(report, options, discovery, now_ms)
    if not isinstance(spark, SparkSession):
        spark = spark()  # only now: a scan that aborts above never waits for a Spark application
    clock.attach(spark.sparkContext)
    with clock.phase("listing"):
        listed = _list(spark, options, report, cached)
    with clock.phase("known keys"):
        known = _known_keys(spark, options, discovery, report, cached)
    clock.note(f"known keys: {report.known_keys:,} from {report.coordinators} coordinators")
    with clock.phase("anti-join"):
        orphans = _anti_join(spark, report, listed, known, cached)
        listed.unpersist()
        known.unpersist()
    clock.note(f"anti-join: {report.candidates:,} candidates, {report.known:,} known, {report.orphans:,} orphans")
    with clock.phase("manifest"):
        _write_manifest(options, report, orphans)
    # A dry run aborts too: it must say what the deleting run would do.
    problem = orphan_share_problem(report.orphans, report.wal_files, options.max_orphan_percent)
    if problem:
        raise ScanAborted(problem)
    if not options.delete or report.orphans == 0:
        return
    with clock.phase("deleting"):
        _delete(spark, options, discovery, report)
    split = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report.deleting_s.items())
    clock.note(f"deleting: its tasks spent {split} (summed over tasks)")


def _note_threshold(report: ScanReport, options: ScanOptions, discovery: Discovery, now_ms: int) -> None:
    threshold = scan_threshold(
        [(c.coordinator_id, c.oldest_live_file_ms) for c in discovery.coordinators], options.grace_period_ms, now_ms
    )
    report.coordinators = len(discovery.coordinators)
    report.nodes = list(discovery.nodes)
    report.threshold_ms = threshold.threshold_ms
    report.threshold_rule = threshold.rule
    report.oldest_live_file_ms = threshold.oldest_live_file_ms


def _list(spark: SparkSession, options: ScanOptions, report: ScanReport, cached: list[Any]) -> Any:
    context = spark.sparkContext
    tasks = options.listing_tasks or min(LISTING_TASKS_MAX, LISTING_TASKS_PER_CORE * context.defaultParallelism)
    groups = spread(listing_slices(options.store.prefix), tasks)
    rules = ListingRules(options.store, options.key_pattern, report.threshold_ms)
    listed = context.parallelize(groups, len(groups)).flatMap(functools.partial(list_task, rules=rules))
    listed.persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(listed)
    try:
        parts = listed.mapPartitions(functools.partial(summarize_listing, sample_max=SAMPLE_MAX)).collect()
    except Exception as error:  # any task failure (store down, bad credentials) aborts the scan
        raise ScanAborted(_spark_failure("listing", error)) from None
    summary = functools.reduce(lambda a, b: a.merge(b, SAMPLE_MAX), parts, ListingSummary())
    report.listed = sum(summary.counts.values())
    report.listed_bytes = sum(summary.bytes.values())
    report.foreign = summary.counts[FOREIGN]
    report.young = summary.counts[YOUNG]
    report.candidates = summary.counts[CANDIDATE]
    report.wal_files = report.young + report.candidates
    report.foreign_sample = summary.foreign_sample
    return listed


def _known_keys(
    spark: SparkSession, options: ScanOptions, discovery: Discovery, report: ScanReport, cached: list[Any]
) -> DataFrame:
    coordinators = [(c.coordinator_id, c.node) for c in discovery.coordinators]
    streamed = spark.sparkContext.parallelize(coordinators, len(coordinators)).mapPartitions(
        functools.partial(coordinator_client.known_keys_task, access=options.access)
    )
    # verifySchema off: the rows are built by known_keys_task, not read from anywhere (checking each costs time).
    known = spark.createDataFrame(streamed, KNOWN_KEYS, verifySchema=False).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(known)
    try:
        report.known_keys = known.count()
    except Exception as error:  # a coordinator that cannot tell all it knows: its files would look orphaned
        raise ScanAborted(_spark_failure("known keys", error) + "; nothing deleted") from None
    return known


def _anti_join(spark: SparkSession, report: ScanReport, listed: Any, known: DataFrame, cached: list[Any]) -> DataFrame:
    rows = listed.filter(is_candidate).map(candidate_fields)
    candidates = spark.createDataFrame(rows, MANIFEST_INPUT, verifySchema=False)
    # A file several coordinators hold a row for (its owners) counts once, in its most alive state there.
    most_alive = known.groupBy("key").agg(F.min("state").alias("state"))
    # The anti-join as a left join: unmatched candidates (no state) are the orphans; the matched ones give the
    # known files' breakdown in the same pass.
    classified = candidates.join(most_alive, "key", "left").persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(classified)
    orphans = classified.where(F.col("state").isNull()).drop("state")
    try:
        tallies = classified.groupBy("state").agg(F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"))
        by_state = {row["state"]: (row["files"], row["bytes"]) for row in tallies.collect()}
        sample = orphans.limit(SAMPLE_MAX).collect()
    except Exception as error:
        raise ScanAborted(_spark_failure("anti-join", error)) from None
    report.live = by_state.get(pb.FILE_STATE_LIVE, (0, 0))[0]
    report.awaiting_handover = by_state.get(pb.FILE_STATE_AWAITING_HANDOVER, (0, 0))[0]
    report.awaiting_deletion = by_state.get(pb.FILE_STATE_AWAITING_DELETION, (0, 0))[0]
    report.known = report.live + report.awaiting_handover + report.awaiting_deletion
    report.orphans, report.orphan_bytes = by_state.get(None, (0, 0))
    report.orphan_percent = round(orphan_share_percent(report.orphans, report.wal_files), 3)
    report.sample = [{"key": r["key"], "size": r["size"], "last_modified_ms": r["last_modified_ms"]} for r in sample]
    return orphans


def manifest_path(options: ScanOptions, scan_id: str) -> str:
    directory = options.manifest_dir
    if "://" not in directory:
        directory = os.path.abspath(directory)
    return f"{directory.rstrip('/')}/{scan_id}"


def _write_manifest(options: ScanOptions, report: ScanReport, orphans: DataFrame) -> None:
    path = manifest_path(options, report.scan_id)
    frame = orphans.select("key", "size", F.timestamp_millis("last_modified_ms").alias("last_modified"))
    files = max(1, -(-report.orphans // MANIFEST_ROWS_PER_FILE))
    try:
        frame.coalesce(files).write.mode("errorifexists").parquet(path)
    except Exception as error:  # without a manifest nothing may be deleted
        raise ScanAborted(_spark_failure("manifest", error)) from None
    report.manifest = path


def _delete(spark: SparkSession, options: ScanOptions, discovery: Discovery, report: ScanReport) -> None:
    try:
        current = discover(options.access)
    except CoordinatorsUnavailable as error:
        raise ScanAborted(f"before deleting, a coordinator cannot answer: {error}") from None
    if current.membership != discovery.membership:
        raise ScanAborted(
            f"the coordinators changed during the scan ({sorted(discovery.membership)} -> "
            f"{sorted(current.membership)}); nothing deleted"
        )
    context = spark.sparkContext
    tasks = context.defaultParallelism
    manifest = spark.read.parquet(report.manifest).select("key")
    if report.orphans > options.max_deletes:
        manifest = manifest.limit(options.max_deletes)
        report.saturated = True
    plan = DeletePlan(options.store, options.access, current.nodes, options.delete_rate / tasks)
    keys = manifest.repartition(tasks).rdd.map(operator.itemgetter(0))
    try:
        tallies = keys.mapPartitions(functools.partial(delete_task, plan=plan)).collect()
    except Exception as error:  # the tallies are lost with the job: say so, a rerun tells what is left
        reason = _spark_failure("deleting", error)
        raise ScanAborted(
            f"{reason}; some orphans may have been deleted before it (rerun to see what is left)"
        ) from None
    tally = functools.reduce(DeleteTally.merge, tallies, DeleteTally())
    report.deleted = tally.deleted
    report.delete_failed = tally.failed
    report.kept_by_recheck = tally.kept_by_recheck
    report.unresolved = tally.unresolved
    report.deleting_s = {
        "re-check": round(tally.recheck_s, 3), "delete": round(tally.delete_s, 3), "paced": round(tally.paced_s, 3)
    }  # fmt: skip
    report.note_failures(tally.failures)
