"""Open-loop latency at and past the maximum: what timing from the intended send time adds (coordinated omission).

    python -m bench.open_loop [--shape 100x100] [--brokers 16] [--coordinators 8] [--levels 0.5,1.5]
                              [--warmup-s 1] [--seconds 4] [--set NAME=VALUE ...]

Starts one coordinator node (`diskless serve` on 127.0.0.1, in a temporary directory), measures its maximum
commit rate with the brokers back to back (closed loop), then runs the brokers open loop at each level times that
rate, each on a fresh topic for --warmup-s plus --seconds. For each it prints the commits/s reached and the commit
latency three ways (bench/driver.py): from the intended send time (what `diskless bench run` reports), from the
actual send (what a harness with coordinated omission would report), and the send lag between them. Past the
maximum the brokers fall behind their schedule, one commit in flight each, and the lag grows for as long as the
run lasts: the latency from the send stays near the maximum's while the latency from the intended send time shows
the queue. Bounded: one node, one topic per level, --seconds per level.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.arguments import node_settings
from bench.coordinator_system import CoordinatorServer, CoordinatorSystem
from bench.driver import LoadOutcome, LoadPlan, run_load
from bench.workload import DUPLICATE_SHARE_DEFAULT, SHAPES


def _line(label: str, plan: LoadPlan, outcome: LoadOutcome) -> str:
    figures = outcome.median()
    target = f"{plan.target_commits_per_s:,.0f}/s asked" if plan.interval_s > 0 else "back to back"
    return (
        f"{label:<10} {target:>16}: {figures['commits_per_s']:>7,.0f} commits/s; "
        f"from the intended send p50 {figures['p50_ms']:8,.1f} p99 {figures['p99_ms']:8,.1f} ms; "
        f"from the send p50 {figures['p50_from_send_ms']:6,.1f} p99 {figures['p99_from_send_ms']:6,.1f} ms; "
        f"send lag p99 {figures['send_lag_p99_ms']:8,.1f} max {figures['send_lag_max_ms']:8,.1f} ms"
    )


async def _measure(system: CoordinatorSystem, args: argparse.Namespace) -> None:
    shape = SHAPES[args.shape]
    closed = LoadPlan(shape, args.brokers, 0.0, args.warmup_s, args.seconds, 1, DUPLICATE_SHARE_DEFAULT)
    await system.open()
    try:
        topic = await system.create_topic("open-loop-max", shape.partitions)
        outcome = await run_load(system, topic, closed, seed=0, key_prefix="wal/max")
        print(_line("max", closed, outcome), flush=True)
        maximum = outcome.median()["commits_per_s"]
        if maximum <= 0:
            raise RuntimeError("no commit finished in the maximum's window: no rate to take multiples of")
        for index, level in enumerate(args.levels, start=1):
            plan = LoadPlan(shape, args.brokers, args.brokers / (maximum * level), args.warmup_s, args.seconds, 1,
                            DUPLICATE_SHARE_DEFAULT)  # fmt: skip
            topic = await system.create_topic(f"open-loop-{index}", shape.partitions)
            outcome = await run_load(system, topic, plan, seed=index, key_prefix=f"wal/{index}")
            print(_line(f"{level:g} x max", plan, outcome), flush=True)
    finally:
        await system.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.open_loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="100x100", choices=sorted(SHAPES))
    parser.add_argument("--brokers", type=int, default=16)
    parser.add_argument("--coordinators", type=int, default=8)
    parser.add_argument("--levels", type=lambda text: [float(x) for x in text.split(",")], default=[0.5, 1.5],
                        help="open-loop rates as multiples of the measured maximum")  # fmt: skip
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=4.0, help="the measured window of each level")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a node setting")
    args = parser.parse_args(argv)
    if not args.levels or min(args.levels) <= 0 or args.brokers < 1 or args.seconds <= 0:
        parser.error("--levels must be positive multiples, --brokers at least 1, --seconds positive")
    settings = node_settings(parser, args.set, {"diskless.coordinator.pipeline.enable": "true"})
    with tempfile.TemporaryDirectory(prefix="diskless-open-loop-") as scratch:
        server = CoordinatorServer(Path(scratch) / "data", args.coordinators, settings)
        server.start()
        try:
            asyncio.run(_measure(CoordinatorSystem("coordinator", [server]), args))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
