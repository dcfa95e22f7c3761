"""`diskless consolidate`'s options: the coordinators' settings file plus the command's flags.

The store comes from the same properties file as the coordinators' (`--config`, `diskless.storage.*`),
so that the job reads and writes where the brokers do, and so does the most batches one ReplaceBatches
call may move (`diskless.coordinator.replace.batch.max`); the defaults of the age, size and count bounds
are settings (`diskless.consolidation.*`), each of which a flag overrides for one run.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from coordinator.config.loading import load_settings
from coordinator.config.settings import Settings, SettingsError
from coordinator.files.object_store import StoreConfig
from spark.coordinator_client import DEFAULT_BOOTSTRAP, CoordinatorAccess
from spark.options import OptionsError, access_from_arguments

RUN_TASKS_MAX = 10_000
# The broker id ReplaceBatches names as the new object's uploader (the coordinator wants one >= 0, as in
# CommitFile); it is informational only: owners, not the uploader, decide who deletes the object.
CONSOLIDATION_UPLOADER_ID = 0


_DEFAULTS = Settings()  # the settings at their defaults: the options' defaults below come from them


@dataclass(frozen=True, slots=True)
class ConsolidateOptions:
    access: CoordinatorAccess
    store: StoreConfig
    min_age_ms: int
    target_object_bytes: int
    max_files: int  # per coordinator
    max_file_size: int = 0  # 0: the coordinators' default
    dry_run: bool = False
    run_tasks: int = 0  # 0: four per core
    uploader_broker_id: int = CONSOLIDATION_UPLOADER_ID
    committed_before_ms: int = 0  # also only files committed by then (wall clock; 0: no such bound)
    # The settings' own defaults (one place for each), which `options_from_arguments` replaces with the loaded values.
    # diskless.consolidation.object.max.batches, capped by the coordinators' diskless.coordinator.replace.batch.max
    max_batches_per_run: int = _DEFAULTS.consolidation_object_max_batches
    job_nice: int = _DEFAULTS.consolidation_job_nice  # niceness of the job's JVM and Python workers (job_priority.py)
    job_cpu_idle: bool = _DEFAULTS.consolidation_job_cpu_idle  # those processes under SCHED_IDLE too
    replace_duty_percent: int = _DEFAULTS.consolidation_replace_duty_percent  # a run task's share in ReplaceBatches
    replace_group_batches: int = _DEFAULTS.consolidation_replace_group_batches  # calls sent together (0: one)
    task_runs: int = _DEFAULTS.consolidation_task_runs  # runs one Spark task carries at most
    task_bytes: int = _DEFAULTS.consolidation_task_bytes  # compressed plan bytes one task carries at most
    stall_timeout_ms: int = _DEFAULTS.consolidation_stall_timeout_ms  # no task finished that long: an error

    def problem(self) -> str | None:
        if self.min_age_ms < 0:
            return f"--min-age-ms must be >= 0, got {self.min_age_ms}"
        if self.target_object_bytes <= 0:
            return f"--target-object-bytes must be > 0, got {self.target_object_bytes}"
        if self.max_files <= 0:
            return f"--max-files must be > 0, got {self.max_files}"
        if self.max_file_size < 0:
            return f"--max-file-size must be >= 0 (0: the coordinators' default), got {self.max_file_size}"
        if not 0 <= self.run_tasks <= RUN_TASKS_MAX:
            return f"--run-tasks must be 0..{RUN_TASKS_MAX} (0: four per core), got {self.run_tasks}"
        if self.max_batches_per_run <= 0:
            return f"diskless.consolidation.object.max.batches must be > 0, got {self.max_batches_per_run}"
        if not 0 <= self.job_nice <= 19:
            return f"diskless.consolidation.job.nice must be 0..19, got {self.job_nice}"
        if not 1 <= self.replace_duty_percent <= 100:
            return f"diskless.consolidation.replace.duty.percent must be 1..100, got {self.replace_duty_percent}"
        if self.replace_group_batches < 0:
            return f"diskless.consolidation.replace.group.batches must be >= 0, got {self.replace_group_batches}"
        for name, value in (
            ("diskless.consolidation.task.runs", self.task_runs),
            ("diskless.consolidation.task.bytes", self.task_bytes),
            ("diskless.consolidation.stall.timeout.ms", self.stall_timeout_ms),
        ):
            if value <= 0:
                return f"{name} must be > 0, got {value}"
        if not self.access.bootstrap:
            return "--bootstrap names no address"
        return None


def options_from_arguments(args: argparse.Namespace) -> ConsolidateOptions:
    try:
        settings = load_settings(args.config, {})
    except (SettingsError, OSError) as error:
        raise OptionsError(str(error)) from error

    def chosen(flag: int | None, default: int) -> int:
        return default if flag is None else flag

    options = ConsolidateOptions(
        access=access_from_arguments(args),
        store=StoreConfig.from_settings(settings),
        min_age_ms=chosen(args.min_age_ms, settings.consolidation_min_age_ms),
        target_object_bytes=chosen(args.target_object_bytes, settings.consolidation_target_object_bytes),
        max_files=chosen(args.max_files, settings.consolidation_max_files),
        max_file_size=args.max_file_size,
        dry_run=args.dry_run,
        run_tasks=args.run_tasks,
        # One object, one call: the job's own bound, never past what a coordinator accepts in one call.
        max_batches_per_run=min(settings.consolidation_object_max_batches, settings.replace_batch_max),
        job_nice=settings.consolidation_job_nice,
        job_cpu_idle=settings.consolidation_job_cpu_idle,
        replace_duty_percent=settings.consolidation_replace_duty_percent,
        replace_group_batches=settings.consolidation_replace_group_batches,
        task_runs=settings.consolidation_task_runs,
        task_bytes=settings.consolidation_task_bytes,
        stall_timeout_ms=settings.consolidation_stall_timeout_ms,
    )
    problem = options.problem()
    if problem:
        raise OptionsError(problem)
    return options


def add_consolidate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap", default=DEFAULT_BOOTSTRAP,
        help=f"HOST:PORT[,HOST:PORT...] of a node; every coordinator is found from it (default {DEFAULT_BOOTSTRAP})",
    )  # fmt: skip
    parser.add_argument(
        "--config", type=Path, help="the coordinators' properties file: diskless.storage.* and diskless.consolidation.*"
    )
    parser.add_argument("--master", help="Spark master URL (default local[*], or spark-submit's --master)")
    parser.add_argument(
        "--min-age-ms", type=int,
        help="plan only files committed at least this long ago (default diskless.consolidation.min.age.ms)",
    )  # fmt: skip
    parser.add_argument(
        "--target-object-bytes", type=int,
        help="largest object written, one per run of a partition (default diskless.consolidation.target.object.bytes)",
    )  # fmt: skip
    parser.add_argument(
        "--max-files", type=int,
        help="files planned per coordinator, the oldest first (default diskless.consolidation.max.files)",
    )  # fmt: skip
    parser.add_argument(
        "--max-file-size", type=int, default=0,
        help="plan only files of at most this size (default 0: the coordinators' own default)",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="plan, read and check; upload and change nothing")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--run-tasks", type=int, default=0, help="Spark tasks moving runs (default 0: four per core)")
    parser.add_argument("--ca", type=Path, help="PEM CA of the nodes' certificates: call over TLS")
    parser.add_argument("--cert", type=Path, help="PEM certificate of the operator (mutual TLS)")
    parser.add_argument("--key", type=Path, help="PEM private key of --cert")
