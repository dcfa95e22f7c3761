"""The orphan scan's options: the coordinator's settings file plus the command's flags.

The store, the WAL key pattern, the grace period, the orphan share limit and
the periodic interval come from the same properties file as the coordinator's
(`--config`, `diskless.storage.*`, `diskless.coordinator.orphan.scan.*`, with
the environment overriding it as for `diskless serve`), so that the scan looks
where the coordinators delete. What only concerns one run (delete or not, caps,
rate, manifest location) is a flag.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from coordinator.config.loading import load_settings
from coordinator.config.settings import Settings, SettingsError
from coordinator.files.object_store import StoreConfig
from spark.coordinator_client import DEFAULT_BOOTSTRAP, CoordinatorAccess
from spark.rules import GRACE_FLOOR_MS, grace_problem

DEFAULT_MAX_DELETES = 100_000  # per run; a rerun continues where a saturated run stopped
DEFAULT_DELETE_RATE = 1000.0  # deletes per second over the whole cluster (S3 allows 3,500 writes/s per prefix)
DEFAULT_MANIFEST_DIR = "orphan-scan-manifests"
LISTING_TASKS_MAX = 257  # one per listing slice (256 fan-out blocks and the rest)


class OptionsError(ValueError):
    """The scan cannot start; the message is the one-line reason."""


@dataclass(frozen=True, slots=True)
class ScanOptions:
    access: CoordinatorAccess
    store: StoreConfig
    key_pattern: str
    grace_period_ms: int
    max_orphan_percent: int
    interval_ms: int = 86_400_000
    delete: bool = False
    max_deletes: int = DEFAULT_MAX_DELETES
    delete_rate: float = DEFAULT_DELETE_RATE
    manifest_dir: str = DEFAULT_MANIFEST_DIR
    force: bool = False
    listing_tasks: int = 0  # 0: four per core of the Spark application

    @classmethod
    def from_settings(cls, settings: Settings, access: CoordinatorAccess, **flags: object) -> ScanOptions:
        """The scan's options from the coordinator's settings, with the command's flags by field name."""
        options = cls(
            access=access,
            store=StoreConfig.from_settings(settings),
            key_pattern=settings.orphan_scan_key_pattern,
            grace_period_ms=settings.orphan_scan_grace_period_ms,
            max_orphan_percent=settings.orphan_scan_max_orphan_percent,
            interval_ms=settings.orphan_scan_interval_ms,
            **flags,  # type: ignore[arg-type]
        )
        problem = options.problem()
        if problem:
            raise OptionsError(problem)
        return options

    def problem(self) -> str | None:
        """Why these options cannot run, or None."""
        refused = grace_problem(self.grace_period_ms, self.force)
        if refused:
            return refused
        if self.max_deletes <= 0:
            return f"--max-deletes must be > 0, got {self.max_deletes}"
        if self.delete_rate < 0:
            return f"--delete-rate must be >= 0 (0: no limit), got {self.delete_rate}"
        if not 0 <= self.listing_tasks <= LISTING_TASKS_MAX:
            return f"--listing-tasks must be 0..{LISTING_TASKS_MAX} (0: four per core), got {self.listing_tasks}"
        if not self.access.bootstrap:
            return "--bootstrap names no address"
        return None


def _read(path: Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise OptionsError(f"cannot read {what} {path}: {error}") from error


def access_from_arguments(args: argparse.Namespace) -> CoordinatorAccess:
    """--bootstrap and the TLS files, as coordinator/cli/operator_commands.py takes them (--ca turns TLS on)."""
    if not args.ca and (args.cert or args.key):
        raise OptionsError("--cert and --key need --ca (the CA that signed the node's certificate)")
    if bool(args.cert) != bool(args.key):
        raise OptionsError("--cert and --key go together")
    bootstrap = tuple(a.strip() for a in args.bootstrap.split(",") if a.strip())
    return CoordinatorAccess(bootstrap, _read(args.ca, "--ca"), _read(args.cert, "--cert"), _read(args.key, "--key"))


def options_from_arguments(args: argparse.Namespace) -> ScanOptions:
    try:
        settings = load_settings(args.config, {})
    except (SettingsError, OSError) as error:
        raise OptionsError(str(error)) from error
    return ScanOptions.from_settings(
        settings,
        access_from_arguments(args),
        delete=args.delete,
        max_deletes=args.max_deletes,
        delete_rate=args.delete_rate,
        manifest_dir=args.manifest_dir,
        force=args.force,
        listing_tasks=args.listing_tasks,
    )


def add_scan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap", default=DEFAULT_BOOTSTRAP,
        help=f"HOST:PORT[,HOST:PORT...] of a node; every coordinator is found from it (default {DEFAULT_BOOTSTRAP})",
    )  # fmt: skip
    parser.add_argument(
        "--config", type=Path,
        help="the coordinators' properties file: diskless.storage.* and diskless.coordinator.orphan.scan.*",
    )  # fmt: skip
    parser.add_argument("--master", help="Spark master URL (default local[*], or spark-submit's --master)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (one line per scan if periodic)")
    parser.add_argument("--delete", action="store_true", help="delete the orphans (default: a dry run)")
    parser.add_argument(
        "--max-deletes", type=int, default=DEFAULT_MAX_DELETES,
        help=f"deletes per run at most; the report says `saturated` when reached (default {DEFAULT_MAX_DELETES:,})",
    )  # fmt: skip
    parser.add_argument(
        "--delete-rate", type=float, default=DEFAULT_DELETE_RATE,
        help=f"deletes per second over all executors, 0 for no limit (default {DEFAULT_DELETE_RATE:g})",
    )  # fmt: skip
    parser.add_argument(
        "--manifest-dir", default=DEFAULT_MANIFEST_DIR,
        help="where each scan writes its orphan manifest (Parquet, <dir>/<scan id>); a path or URI every executor "
        f"reaches (default ./{DEFAULT_MANIFEST_DIR})",
    )  # fmt: skip
    parser.add_argument(
        "--force", action="store_true",
        help=f"accept a grace period below the floor of {GRACE_FLOOR_MS} ms (risks deleting files being committed)",
    )  # fmt: skip
    parser.add_argument(
        "--periodic", action="store_true",
        help="scan again every diskless.coordinator.orphan.scan.interval.ms until SIGTERM or SIGINT",
    )  # fmt: skip
    parser.add_argument("--scans", type=int, default=0, help="with --periodic: stop after this many scans (0: never)")
    parser.add_argument(
        "--listing-tasks", type=int, default=0,
        help=f"Spark tasks listing the store, 1..{LISTING_TASKS_MAX} (default 0: four per core)",
    )  # fmt: skip
    parser.add_argument("--ca", type=Path, help="PEM CA of the nodes' certificates: call over TLS")
    parser.add_argument("--cert", type=Path, help="PEM certificate of the operator (mutual TLS)")
    parser.add_argument("--key", type=Path, help="PEM private key of --cert")
