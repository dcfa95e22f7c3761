"""`diskless bench …`: the benchmark harness's commands."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

SYSTEMS = ("coordinator", "coordinator-sequential", "coordinator-replicated", "raw-apsw", "postgres", "postgres-simple")
PROFILE_SECONDS = 8.0
OUT_DEFAULT = Path(__file__).resolve().parent / "results" / "latest"


def _run(args: argparse.Namespace) -> int:
    # Imported here: `diskless --help` must not need the bench extra (psycopg, matplotlib).
    from bench.replicated import ETCD_MEMBERS, NODES, REPLICATED, cluster_settings
    from bench.report import load_average, write_results
    from bench.run import MODES, progress_printer, run_all, scenario_names

    mode = "tiny" if args.tiny else "full" if args.full else "quick"
    config = MODES[mode]
    overrides = tuple(tuple(setting.split("=", 1)) for setting in args.set)
    if any(len(setting) != 2 for setting in overrides):
        print("diskless bench run: --set takes NAME=VALUE", file=sys.stderr)
        return 2
    config = replace(config, coordinators=args.coordinators or config.coordinators,
                     coordinator_settings=overrides)  # fmt: skip
    if args.kills is not None:
        if args.kills < 0:
            print("diskless bench run: --kills takes a count >= 0", file=sys.stderr)
            return 2
        config = replace(config, failover_kills=args.kills)
    if args.live is not None:
        try:
            live = tuple(int(n) for n in args.live.split(",") if n.strip())
        except ValueError:
            live = (-1,)
        if any(n <= 0 for n in live):
            print("diskless bench run: --live takes positive batch counts, e.g. 1000000,10000000", file=sys.stderr)
            return 2
        config = replace(config, live_states=live)
    if args.scenarios:
        chosen = tuple(name.strip() for name in args.scenarios.split(","))
        known = scenario_names(config)
        if set(chosen) - set(known):
            print(
                f"diskless bench run: unknown scenarios {sorted(set(chosen) - set(known))}; choose from "
                f"{', '.join(known)}",
                file=sys.stderr,
            )
            return 2
        config = replace(config, scenarios=chosen)
    systems = tuple(args.systems.split(",")) if args.systems else SYSTEMS
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        print(
            f"diskless bench run: unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}", file=sys.stderr
        )
        return 2
    progress = progress_printer()
    load_before = load_average()
    progress(f"mode {mode}: systems {', '.join(systems)}; load average {load_before} on {os.cpu_count()} cores")
    results = run_all(config, systems, install=not args.no_install, progress=progress)
    if args.profile:
        from bench.profile import profile_coordinator

        progress("coordinator: profiling 100x100 at the maximum rate under cProfile")
        profile_coordinator(args.out, "100x100", config.brokers, config.coordinators, PROFILE_SECONDS)
    replicated = None
    if any(row["system"] == REPLICATED for row in results.rows) or REPLICATED in results.failovers:
        settings = {**dict(config.replicated_settings), **dict(config.coordinator_settings)}
        replicated = {"nodes": NODES, "etcd_members": ETCD_MEMBERS, "settings": cluster_settings(settings)}
    document = write_results(args.out, mode, results.rows, results.latencies, results.notes, load_before,
                             asdict(config), results.failovers, replicated)  # fmt: skip
    print((args.out / "results.md").read_text())
    progress(f"wrote {args.out}/results.json, results.md and plots ({len(document['rows'])} rows)")
    lost = {name: f["verification"]["lost"] for name, f in results.failovers.items() if f["verification"]["lost"]}
    if lost:
        progress(f"acknowledged batches LOST in the failover: {lost}")
        return 1
    return 0


def _profile(args: argparse.Namespace) -> int:
    from bench.py_spy import profile_with_py_spy

    if args.seconds <= 0 or args.coordinators < 1 or args.brokers < 1:
        print("diskless bench profile: --seconds, --coordinators and --brokers take positive values", file=sys.stderr)
        return 2
    for summary in profile_with_py_spy(args.out, args.brokers, args.coordinators, args.seconds):
        print(summary.read_text())
        print(f"wrote {summary} and {summary.with_suffix('.raw')}", file=sys.stderr)
    return 0


def _add_gateway_arguments(parser: argparse.ArgumentParser) -> None:
    from bench.gateways import add_arguments

    add_arguments(parser)


def _gateways(args: argparse.Namespace) -> int:
    from bench.gateways import run

    return run(args)


def _add_rebalance_arguments(parser: argparse.ArgumentParser) -> None:
    from bench.rebalance import add_arguments

    add_arguments(parser)


def _rebalance(args: argparse.Namespace) -> int:
    from bench.rebalance import run

    return run(args)


def _add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    from bench.compare import add_arguments

    add_arguments(parser)


def _compare(args: argparse.Namespace) -> int:
    from bench.compare import run

    return run(args)


def _consolidate(args: argparse.Namespace) -> int:
    from bench.consolidate import BenchSize, run_benchmark, table

    size = BenchSize(files=args.files, partitions=args.partitions, brokers=args.brokers,
                     coordinators=args.coordinators, target_object_bytes=args.target_object_bytes,
                     baseline_s=args.baseline_seconds, master=args.master, job_nice=args.job_nice,
                     job_cpu_idle=not args.job_cpu_shared,
                     one_process=not args.no_one_process,
                     replace_duty_percent=args.replace_duty_percent,
                     object_max_batches=args.object_max_batches,
                     replace_group_batches=args.replace_group_batches,
                     node_settings=tuple(args.node_setting), store_dir=args.store_dir)  # fmt: skip
    if (
        min(
            size.files,
            size.partitions,
            size.brokers,
            size.coordinators,
            size.target_object_bytes,
            size.object_max_batches,
        )
        <= 0
    ):
        print("diskless bench consolidate: sizes must be > 0", file=sys.stderr)
        return 2
    if size.replace_group_batches < 0:
        print("diskless bench consolidate: --replace-group-batches must be >= 0", file=sys.stderr)
        return 2
    if not 0 <= size.job_nice <= 19 or not 1 <= size.replace_duty_percent <= 100:
        print("diskless bench consolidate: --job-nice must be 0..19, --replace-duty-percent 1..100", file=sys.stderr)
        return 2
    results = run_benchmark(size, args.work_dir, args.out)
    print(table(results))
    return 0


def _key_value(text: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def add_bench_commands(parser: argparse.ArgumentParser) -> None:
    """The `bench` subcommands, added to `diskless bench`'s parser (or this module's own)."""
    commands = parser.add_subparsers(dest="bench_command", required=True)
    run = commands.add_parser(
        "run",
        help="every scenario against every system; writes results.json, results.md and PNG plots",
        description="Runs every scenario against the coordinator, coordinator-sequential, coordinator-replicated "
        "(three nodes on a local etcd, replication factor 3; it also runs the failover scenario), raw-apsw, "
        "postgres (the Inkless peer) and postgres-simple (the peer before issue #16). The default (--quick) takes "
        "about 20 minutes on 2 cores; --full adds longer windows and 10M live batches.",
    )
    size = run.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="short windows, state up to 1M live batches (default)")
    size.add_argument("--full", action="store_true", help="long windows, states of 1M and 10M live batches")
    size.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (tests)")
    run.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"output directory (default {OUT_DEFAULT})")
    run.add_argument("--systems", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    run.add_argument("--coordinators", type=int, help="coordinators of the benchmarked node (default 8; tiny 2)")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="a coordinator setting for every coordinator system's nodes (repeatable)")  # fmt: skip
    run.add_argument(
        "--kills", type=int, metavar="N", help="leader kills in coordinator-replicated's failover (default 20; tiny 2)"
    )
    run.add_argument(
        "--live",
        metavar="N[,N]",
        help="live-batch states for the grown-state scenario (default: quick 1000000; full adds 10000000)",
    )
    run.add_argument(
        "--scenarios",
        metavar="NAME[,NAME]",
        help="comma-separated subset of the mode's scenarios (e.g. find-batches); without the '100x100 max' "
        "before it, find-batches and failover commit at the brokers' 250 ms cadence, not capped at half that maximum",
    )
    run.add_argument("--profile", action="store_true", help="also profile the coordinator (profile.txt)")
    run.add_argument("--no-install", action="store_true",
                     help="skip the PostgreSQL peers (and coordinator-replicated without etcd) instead of apt-get "
                          "installing what they need")  # fmt: skip
    run.set_defaults(run=_run)
    profile = commands.add_parser(
        "profile",
        help="where the coordinator's CPU goes: py-spy samples of a commit load and a read load",
        description="Starts a coordinator per load (100x100 commits at the maximum rate; FindBatches back to back "
        "while brokers commit every 250 ms), samples its processes with py-spy and writes py-spy-commit.txt, "
        "py-spy-find.txt (functions by own and inclusive samples) and the raw stacks beside them.",
    )
    profile.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"output directory (default {OUT_DEFAULT})")
    profile.add_argument("--seconds", type=float, default=PROFILE_SECONDS, help="sampled window per load")
    profile.add_argument("--coordinators", type=int, default=8, help="coordinators of the node (default 8)")
    profile.add_argument("--brokers", type=int, default=16, help="simulated brokers (default 16)")
    profile.set_defaults(run=_profile)
    gateways = commands.add_parser(
        "gateways",
        help="commit calls per WAL file with brokers following the produce gateways, against any partition",
        description="Starts a 3-node cluster of 12 coordinators on a local etcd and simulated brokers in 3 racks "
        "(6 and 36 by default); measures commit calls and leader nodes per WAL file, commit p50/p99 and batches/s "
        "with brokers taking only their gateways' partitions against brokers taking any, alternating runs "
        "(KIP-1164 'Reducing multi-DC commit operations'). Writes results.json, results.md and gateways.png.",
    )
    _add_gateway_arguments(gateways)
    gateways.set_defaults(run=_gateways)
    rebalance = commands.add_parser(
        "rebalance",
        help="a fourth node joins a 3-node cluster under steady commits and `diskless rebalance` spreads the replicas",
        description="Starts 3 nodes of 12 coordinators on a local etcd under a steady 100x100 commit load, adds a "
        "fourth node and runs `diskless rebalance --wait`: each move's time, commit p99 during the moves against "
        "before, replicas and leaders per node before and after, every acknowledged batch read back. Writes "
        "results.json and results.md.",
    )
    _add_rebalance_arguments(rebalance)
    rebalance.set_defaults(run=_rebalance)
    compare = commands.add_parser(
        "compare",
        help="a git revision's node against the working tree's, alternating rounds: each figure's ratio and spread",
        description="Extracts REV (any git revision) into a cache outside the tree, then runs the chosen scenarios of "
        "`bench run` against a node of REV's tree and one of the working tree, alternating which goes first each "
        "round (the load driver is this tree's for both). Prints each figure's median per side over the rounds and "
        "current/baseline (median and min-max of the per-round ratios); writes results.json and results.md.",
    )
    _add_compare_arguments(compare)
    compare.set_defaults(run=_compare)
    _add_consolidate_command(commands)


def _add_consolidate_command(commands: Any) -> None:
    from bench.consolidate import RESULTS, BenchSize, default_work_dir

    size = BenchSize()
    consolidate = commands.add_parser(
        "consolidate",
        help="small WAL files of genuine batches merged by `diskless consolidate` on local Spark, measured",
        description="Builds a store of --files WAL files (--brokers brokers' 250 ms files over --partitions "
        "partitions) on one node, then runs the consolidation job on local Spark beside a steady commit load: wall "
        "time, objects, GETs to read every partition and the coordinators' live files before and after, commit p99 "
        "with the job against without, and the same work in one process on a copy. Writes --out (JSON).",
    )
    consolidate.add_argument("--files", type=int, default=size.files, help=f"WAL files (default {size.files:,})")
    consolidate.add_argument("--partitions", type=int, default=size.partitions, help=f"default {size.partitions:,}")
    consolidate.add_argument("--brokers", type=int, default=size.brokers, help=f"default {size.brokers}")
    consolidate.add_argument("--coordinators", type=int, default=size.coordinators, help=f"default {size.coordinators}")
    consolidate.add_argument(
        "--target-object-bytes", type=int, default=size.target_object_bytes,
        help=f"the job's largest object (default {size.target_object_bytes:,})",
    )  # fmt: skip
    consolidate.add_argument(
        "--baseline-seconds", type=float, default=size.baseline_s,
        help=f"the steady load alone before the job (default {size.baseline_s:g})",
    )  # fmt: skip
    consolidate.add_argument("--master", default=size.master, help=f"Spark master (default {size.master})")
    consolidate.add_argument(
        "--job-nice", type=int, default=size.job_nice,
        help=f"niceness of the job's JVM and Python workers (default {size.job_nice}; 0: as the node)",
    )  # fmt: skip
    consolidate.add_argument(
        "--store-dir", default=size.store_dir,
        help="where the object store goes (default: beside the node's data in --work-dir, on the same disk); e.g. "
        "a tmpfs, standing for a store that shares no disk with the node, as S3 does not",
    )  # fmt: skip
    consolidate.add_argument(
        "--no-one-process", action="store_true",
        help="skip the same work without Spark on a copy of the store (no time ratio; saves the copy and the run)",
    )  # fmt: skip
    consolidate.add_argument(
        "--job-cpu-shared", action="store_true",
        help="the job's processes without SCHED_IDLE (diskless.consolidation.job.cpu.idle=false): niceness only",
    )  # fmt: skip
    consolidate.add_argument(
        "--replace-duty-percent", type=int, default=size.replace_duty_percent,
        help=f"the job's ReplaceBatches pacing (default {size.replace_duty_percent}; 100: no pause)",
    )  # fmt: skip
    consolidate.add_argument(
        "--object-max-batches",
        type=int,
        default=size.object_max_batches,
        help=f"batches one consolidated object (one ReplaceBatches call) carries at most (default "
        f"{size.object_max_batches}; diskless.consolidation.object.max.batches)",
    )
    consolidate.add_argument(
        "--replace-group-batches", type=int, default=size.replace_group_batches,
        help=f"calls to one coordinator a run task sends together, up to this many batches (default "
        f"{size.replace_group_batches}: one at a time; diskless.consolidation.replace.group.batches)",
    )  # fmt: skip
    consolidate.add_argument(
        "--node-setting", action="append", default=[], type=_key_value, metavar="KEY=VALUE",
        help="a setting of the node over the bench's own (repeatable), e.g. the file workers' pacing",
    )  # fmt: skip
    consolidate.add_argument("--work-dir", type=Path, default=default_work_dir(), help="where the store is built")
    consolidate.add_argument("--out", type=Path, default=RESULTS, help=f"results JSON (default {RESULTS})")
    consolidate.set_defaults(run=_consolidate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diskless bench", description="Benchmarks of the Diskless coordinator.")
    add_bench_commands(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    raise SystemExit(main())
