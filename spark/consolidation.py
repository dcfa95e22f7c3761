"""Object consolidation on PySpark (DESIGN §4c): small WAL files merged into per-partition objects.

Run it as `diskless consolidate ...` (spark/consolidation_command.py), or call
`run_consolidation(spark, options)` with a session of your own. Phases, each timed and reported on
stderr while it runs:

1. coordinators (driver): every coordinator and its leader (DescribeCoordinators, as the orphan scan
   finds them, spark/coordinator_client.py); the job aborts if any cannot answer, before a Spark
   application starts.
2. planning (driver): each coordinator's leader is asked for its oldest files under the size bound
   with their live batches (GetFileMergeWorkItem, paged, --max-files per coordinator), coordinators
   asked in parallel threads; the batches are grouped by partition and cut into runs
   (spark/consolidation_planning.py, spark/consolidation_rules.py): consecutive batches, up to
   --target-object-bytes, from at least two source objects.
3. moving (executors): the runs shipped as data in bounded tasks (spark/consolidation_shipping.py),
   the action watched so that a dead scheduler ends the job with an error (spark/consolidation_watchdog.py);
   each run read, checked, uploaded and committed with ReplaceBatches (spark/consolidation_tasks.py). With
   --dry-run the runs are read and checked only. The driver collects one small result per run.

What the coordinators plan from is their state, not a listing of the bucket: a file they do not know
is never read, and the new objects are files like any other (owners, hand-over, deletion after the
grace, DESIGN §5). The old files' bytes stay until their coordinators delete them after the grace, so a
consumer holding an old position still reads the same bytes.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from spark.consolidation_options import ConsolidateOptions
from spark.consolidation_planning import plan_runs
from spark.consolidation_report import ConsolidationReport
from spark.consolidation_rules import Run
from spark.consolidation_shipping import pack_runs
from spark.consolidation_tasks import PlanRequest, RunPlan, RunResult, move_payloads
from spark.consolidation_watchdog import JobStalled, run_watched, spark_progress, spark_thread
from spark.coordinator_client import CoordinatorsUnavailable, discover
from spark.job_priority import NICE_MAX, started_at_niceness
from spark.orphan_scan import open_session
from spark.progress import PhaseClock, Say

APP_NAME = "diskless-consolidate"
RUN_TASKS_PER_CORE = 4  # runs differ in size: more tasks than cores even the load out


def say_on_stderr(line: str) -> None:
    print(f"consolidate: {line}", file=sys.stderr, flush=True)


def open_consolidation_session(
    master: str | None = None, conf: dict[str, str] | None = None, nice: int = NICE_MAX, idle: bool = False
) -> SparkSession:
    """A session whose JVM and Python workers run at niceness `nice` (spark/job_priority.py)."""
    return started_at_niceness(
        nice, lambda: open_session(master, {"spark.app.name": APP_NAME, **(conf or {})}), idle=idle
    )


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _store_description(options: ConsolidateOptions) -> str:
    store = options.store
    if store.backend == "s3":
        return f"s3://{store.s3_bucket}/{store.s3_prefix}"
    return f"local {os.path.abspath(store.local_root)}"


def run_consolidation(
    spark: SparkSession | Callable[[], SparkSession],
    options: ConsolidateOptions,
    *,
    say: Say = say_on_stderr,
    after_upload: Callable[[str], None] | None = None,
) -> ConsolidationReport:
    """One consolidation; `spark` is a session, or makes one once the coordinators have answered."""
    report = ConsolidationReport(
        mode="dry-run" if options.dry_run else "consolidate",
        started_at_ms=_wall_clock_ms(),
        store=_store_description(options),
        min_age_ms=options.min_age_ms,
        target_object_bytes=options.target_object_bytes,
        max_files=options.max_files,
    )
    clock = PhaseClock(report.durations_s, say)
    with clock.phase("coordinators"):
        try:
            discovery = discover(options.access)
        except CoordinatorsUnavailable as error:
            report.abort(f"a coordinator cannot answer, nothing moved: {error}")
            say(report.reason)
            report.finish()
            return report
    report.coordinators = len(discovery.coordinators)
    if not isinstance(spark, SparkSession):
        spark = spark()
    context = spark.sparkContext
    clock.attach(context)
    coordinators = [(c.coordinator_id, c.node) for c in discovery.coordinators]
    request = PlanRequest(
        options.access, options.min_age_ms, options.max_file_size, options.max_files, options.committed_before_ms,
        duty_percent=options.replace_duty_percent,
    )  # fmt: skip
    with clock.phase("planning"):
        try:
            planned = plan_runs(coordinators, request, options.target_object_bytes, options.max_batches_per_run)
        except CoordinatorsUnavailable as error:  # a coordinator that fails its planning: nothing moved yet
            report.abort(f"planning failed, nothing moved: {error}")
            say(report.reason)
            report.finish()
            return report
    report.batches_planned, report.files_planned, report.runs = planned.batches, planned.files, len(planned.runs)
    clock.note(f"planned {report.files_planned:,} files, {report.batches_planned:,} batches: {report.runs:,} runs")
    plan = RunPlan(
        store=options.store,
        access=options.access,
        leaders={c.coordinator_id: c.node for c in discovery.coordinators},
        nodes=discovery.nodes,
        uploader_broker_id=options.uploader_broker_id,
        dry_run=options.dry_run,
        replace_duty_percent=options.replace_duty_percent,
        replace_group_batches=options.replace_group_batches,
        after_upload=after_upload,
    )
    with clock.phase("checking" if options.dry_run else "moving"):
        results = _move(context, planned.runs, plan, options, report) if report.runs else []
    report.add(results)
    report.finish()
    clock.note(
        f"{report.batches_moved:,} batches from {report.files_in:,} files into {report.objects_out:,} objects; "
        f"GETs to read them {report.gets_before:,} -> {report.gets_after:,}; status {report.status}"
    )
    return report


def _move(
    context: Any, runs: list[Run], plan: RunPlan, options: ConsolidateOptions, report: ConsolidationReport
) -> list[RunResult]:
    tasks = options.run_tasks or RUN_TASKS_PER_CORE * context.defaultParallelism
    payloads = pack_runs(runs, options.task_runs, options.task_bytes, min_tasks=tasks)
    runs.clear()  # the payloads carry the plan from here: the driver drops its objects
    report.tasks = len(payloads)
    report.task_payload_max_bytes = max((p.size for p in payloads), default=0)
    # One payload per partition (numSlices == len: the slices are the elements), so a task carries its own
    # payload only; the closure carries the RunPlan, a few hundred bytes.
    spread = context.parallelize(payloads, len(payloads))
    group = context.getLocalProperty("spark.jobGroup.id")
    try:
        results: list[RunResult] = run_watched(
            lambda: spread.mapPartitions(functools.partial(move_payloads, plan=plan)).collect(),
            lambda: spark_progress(context, group),
            options.stall_timeout_ms / 1000,
            cancel=context.cancelAllJobs,
            start_thread=spark_thread,
        )
    except JobStalled as error:
        report.abort(f"moving stopped: {error}; what was committed stays, rerun to go on")
        return []
    except Exception as error:  # a task lost for good: what it committed stays committed, a rerun goes on
        report.abort(f"moving failed: {_last_line(error)}; what was committed stays, rerun to go on")
        return []
    return results


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip() and not line.strip().startswith("at ")]
    return (lines[-1] if lines else type(error).__name__)[:500]
