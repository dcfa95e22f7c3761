"""`diskless bench …`: the benchmark harness's commands."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

SYSTEMS = ("coordinator", "coordinator-sequential", "raw-apsw", "postgres", "postgres-simple")
PROFILE_SECONDS = 8.0
OUT_DEFAULT = Path(__file__).resolve().parent / "results" / "latest"


def _run(args: argparse.Namespace) -> int:
    # Imported here: `diskless --help` must not need the bench extra (psycopg, matplotlib).
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
    rows, latencies, notes = run_all(config, systems, install=not args.no_install, progress=progress)
    if args.profile:
        from bench.profile import profile_coordinator

        progress("coordinator: profiling 100x100 at the maximum rate under cProfile")
        profile_coordinator(args.out, "100x100", config.brokers, config.coordinators, PROFILE_SECONDS)
    document = write_results(args.out, mode, rows, latencies, notes, load_before, asdict(config))
    print((args.out / "results.md").read_text())
    progress(f"wrote {args.out}/results.json, results.md and plots ({len(document['rows'])} rows)")
    return 0


def add_bench_commands(parser: argparse.ArgumentParser) -> None:
    """The `bench` subcommands, added to `diskless bench`'s parser (or this module's own)."""
    commands = parser.add_subparsers(dest="bench_command", required=True)
    run = commands.add_parser(
        "run",
        help="every scenario against every system; writes results.json, results.md and PNG plots",
        description="Runs every scenario against the coordinator, coordinator-sequential, raw-apsw, postgres "
        "(the Inkless peer) and postgres-simple (the peer before issue #16). "
        "The default (--quick) takes under 10 minutes on 2 cores; --full adds longer windows and 10M live batches.",
    )
    size = run.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="short windows, state up to 1M live batches (default)")
    size.add_argument("--full", action="store_true", help="long windows, states of 1M and 10M live batches")
    size.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (tests)")
    run.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"output directory (default {OUT_DEFAULT})")
    run.add_argument("--systems", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    run.add_argument("--coordinators", type=int, help="coordinators of the benchmarked node (default 8; tiny 2)")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="a coordinator setting for both coordinator systems (repeatable)")  # fmt: skip
    run.add_argument(
        "--live",
        metavar="N[,N]",
        help="live-batch states for the grown-state scenario (default: quick 1000000; full adds 10000000)",
    )
    run.add_argument(
        "--scenarios",
        metavar="NAME[,NAME]",
        help="comma-separated subset of the mode's scenarios (e.g. find-batches); without the '100x100 max' "
        "before it, find-batches commits at the brokers' 250 ms cadence, not capped at half that maximum",
    )
    run.add_argument("--profile", action="store_true", help="also profile the coordinator (profile.txt)")
    run.add_argument(
        "--no-install", action="store_true", help="skip the PostgreSQL peers instead of installing PostgreSQL"
    )
    run.set_defaults(run=_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diskless bench", description="Benchmarks of the Diskless coordinator.")
    add_bench_commands(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    raise SystemExit(main())
