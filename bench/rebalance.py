"""`diskless bench rebalance`: a fourth node joins a 3-node cluster under steady commits, and `diskless rebalance`
spreads the replicas over the four (issue #30's first figure).

The run: a local etcd and three `diskless serve` nodes (12 coordinators, replication factor 3) under a steady
open-loop `100x100` commit load (every broker every 250 ms; idempotent, no duplicates; latencies from each
commit's intended send time, bench/driver.py); `--baseline-s` of load
before anything moves is the "without moves" window. Then node 3 starts, registers and holds nothing, and
`diskless rebalance --bootstrap … --wait` runs as an operator would run it. Every node is described every
`POLL_S` meanwhile: a coordinator's move starts when its replicas first differ from before and ends when they
first equal the final ones, and its commits are compared in the window from the first start to the last end.
At the end every acknowledged batch must be found at its offset in its file (FindBatches through the routing
client), and the replicas and preferred/actual leaders per node are counted before and after.

Writes results.json and results.md under --out (default bench/results/rebalance).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.acknowledged import AcknowledgedBatches, Verification, verify
from bench.cluster_views import Descriptions, leaders
from bench.coordinator_system import CoordinatorSystem
from bench.driver import Event, LoadPlan, percentile_ms, running_load
from bench.replicated import REPLICATED, ReplicatedCluster
from bench.workload import SHAPES
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

COORDINATORS = 12
PARTITIONS = 120
BROKERS = 8
INTERVAL_S = 0.25  # each broker commits a 100-batch file every 250 ms: 3,200 batches/s asked
POLL_S = 0.2
REBALANCE_TIMEOUT_S = 900.0
OUT_DEFAULT = Path("bench/results/rebalance")
DESCRIBE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Move:
    coordinator_id: int
    before: tuple[int, ...]
    after: tuple[int, ...]
    started_s: float  # since the rebalance command started
    seconds: float  # first seen changing until first seen at its final replicas


@dataclass(slots=True)
class Outcome:
    about: str
    moves: list[Move] = field(default_factory=list)
    rebalance_s: float = 0.0  # the command, start to exit (--wait)
    baseline: dict[str, float] = field(default_factory=dict)  # commit figures before node 3 started
    during: dict[str, float] = field(default_factory=dict)  # from the first move's start to the last one's end
    before: dict[str, dict[int, int]] = field(default_factory=dict)  # replicas / preferred / leading per node
    after: dict[str, dict[int, int]] = field(default_factory=dict)
    verification: Verification = field(default_factory=Verification)
    command_output: str = ""


def placement_of(described: Descriptions) -> dict[int, tuple[int, ...]]:
    """Coordinator -> its replicas (assignment order) as its leader says; a follower's word where no leader is."""
    found: dict[int, tuple[int, ...]] = {}
    led = leaders(described)
    for node_id, descriptions in described.items():
        for d in descriptions or []:
            if d.error_code == pb.NONE and d.replica_node_ids and (led.get(d.coordinator_id) == node_id
                                                                   or d.coordinator_id not in found):  # fmt: skip
                found[d.coordinator_id] = tuple(d.replica_node_ids)
    return found


def counts(described: Descriptions, nodes: int) -> dict[str, dict[int, int]]:
    placement = placement_of(described)
    replicas = {n: sum(n in r for r in placement.values()) for n in range(nodes)}
    preferred = {n: sum(r[0] == n for r in placement.values()) for n in range(nodes)}
    led = leaders(described)
    leading = {n: sum(1 for leader in led.values() if leader == n) for n in range(nodes)}
    return {"replicas": replicas, "preferred_leaders": preferred, "leading": leading}


def commit_figures(commits: list[Event], begin: float, end: float) -> dict[str, float]:
    """The steady load's commits that ended in [begin, end): their latencies from the intended send time."""
    chosen = [c for c in commits if begin <= c.finished_at < end]
    latencies = [c.latency_s for c in chosen]
    seconds = max(end - begin, 1e-9)
    return {
        "seconds": round(seconds, 1),
        "commits": len(chosen),
        "batches_per_s": round(sum(c[2] for c in chosen) / seconds, 1),
        "p50_ms": round(percentile_ms(latencies, 0.5), 2),
        "p99_ms": round(percentile_ms(latencies, 0.99), 2),
        "max_ms": round(max(latencies, default=0.0) * 1000, 2),
        "send_lag_max_ms": round(max((c.send_lag_s for c in chosen), default=0.0) * 1000, 2),
    }


class Describer:
    """Channels to every node (node 3's added once it started), each described on its own."""

    def __init__(self) -> None:
        self._channels: list[grpc.aio.Channel] = []

    def add(self, address: str) -> None:
        self._channels.append(grpc.aio.insecure_channel(address))

    async def described(self) -> Descriptions:
        found: dict[int, list[pb.CoordinatorDescription] | None] = {}
        for node_id, channel in enumerate(self._channels):
            try:
                answer = await pb_grpc.DisklessCoordinatorStub(channel).DescribeCoordinators(
                    pb.DescribeCoordinatorsRequest(), timeout=DESCRIBE_TIMEOUT_S
                )
                found[node_id] = list(answer.coordinators)
            except grpc.aio.AioRpcError:
                found[node_id] = None
        return found

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


async def measure(cluster: ReplicatedCluster, baseline_s: float, settle_s: float, about: str) -> Outcome:
    outcome = Outcome(about)
    system = CoordinatorSystem(REPLICATED, cluster.nodes)
    await system.open()
    describer = Describer()
    for node in cluster.nodes:
        describer.add(node.address)
    try:
        topic = await system.create_topic("bench-rebalance", PARTITIONS)
        acknowledged = system.acknowledged = AcknowledgedBatches()
        plan = LoadPlan(SHAPES["100x100"], BROKERS, INTERVAL_S, 0.0, 0.0, 0, 0.0)
        async with running_load(system, topic, plan, seed=0, key_prefix="wal/rebalance") as load:
            await load.sleep(settle_s)
            begin = time.perf_counter()
            await load.sleep(baseline_s)
            outcome.baseline = commit_figures(load.commits, begin, time.perf_counter())
            first = await describer.described()
            outcome.before = counts(first, 4)
            initial = placement_of(first)
            print(f"[rebalance] before: {outcome.before}", file=sys.stderr, flush=True)
            added = await asyncio.to_thread(cluster.add_node)
            describer.add(added.address)
            await load.sleep(settle_s)  # node 3 registered and idle
            seen_start: dict[int, float] = {}
            history: list[tuple[float, dict[int, tuple[int, ...]]]] = []
            command = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "coordinator", "rebalance", "--bootstrap", cluster.nodes[0].address, "--wait",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            started = time.perf_counter()
            output = asyncio.ensure_future(command.communicate())
            while not output.done():
                placement = placement_of(await describer.described())
                now = time.perf_counter()
                history.append((now, placement))
                for c, replicas in placement.items():
                    if replicas != initial.get(c) and c not in seen_start:
                        seen_start[c] = now
                if now - started > REBALANCE_TIMEOUT_S:
                    command.kill()
                    raise RuntimeError(f"diskless rebalance did not end within {REBALANCE_TIMEOUT_S:.0f} s")
                await asyncio.wait([output], timeout=POLL_S)
            stdout, _ = output.result()
            outcome.rebalance_s = round(time.perf_counter() - started, 2)
            outcome.command_output = stdout.decode(errors="replace")[-4000:]
            if command.returncode != 0:
                raise RuntimeError(f"diskless rebalance exited {command.returncode}: {outcome.command_output}")
            final_described = await describer.described()
            final = placement_of(final_described)
            for c in sorted(final):
                if final[c] == initial.get(c):
                    continue
                done_at = next((t for t, p in history if p.get(c) == final[c]), time.perf_counter())
                start_at = seen_start.get(c, done_at)
                outcome.moves.append(Move(c, initial.get(c, ()), final[c], round(start_at - started, 2),
                                          round(done_at - start_at, 2)))  # fmt: skip
            window_begin = min((started + m.started_s for m in outcome.moves), default=started)
            window_end = max((started + m.started_s + m.seconds for m in outcome.moves), default=time.perf_counter())
            outcome.during = commit_figures(load.commits, window_begin, max(window_end, window_begin + POLL_S))
            await load.sleep(settle_s)  # leadership returns to preferred replicas on its own check
            outcome.after = counts(await describer.described(), 4)
        outcome.verification = await verify(system.client, system.topic_id(topic), acknowledged)
    finally:
        system.acknowledged = None
        await describer.close()
        await system.close()
    return outcome


def markdown(outcome: Outcome) -> str:
    base, during, check = outcome.baseline, outcome.during, outcome.verification
    ratio = during["p99_ms"] / base["p99_ms"] if base.get("p99_ms") else 0.0
    lines = [
        "# A fourth node and `diskless rebalance` under steady commits",
        "",
        outcome.about,
        "",
        f"`diskless rebalance --wait` took {outcome.rebalance_s:.1f} s for {len(outcome.moves)} coordinators.",
        "",
        "| coordinator | replicas before | after | started (s) | took (s) |",
        "|---:|---|---|---:|---:|",
    ]
    lines += [
        f"| {m.coordinator_id} | {list(m.before)} | {list(m.after)} | {m.started_s:.1f} | {m.seconds:.1f} |"
        for m in outcome.moves
    ]
    lines += [
        "",
        "| commits | seconds | batches/s | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {label} | {f['seconds']} | {f['batches_per_s']:,.0f} | {f['p50_ms']:.1f} | {f['p99_ms']:.1f} | "
            f"{f['max_ms']:.0f} |"
            for label, f in (("without moves (before node 3)", base), ("during the moves", during))
        ),
        "",
        f"Commit p99 during the moves: {ratio:.2f}x without.",
        "",
        "| per node | before | after |",
        "|---|---|---|",
        *(
            f"| {kind.replace('_', ' ')} | {outcome.before[kind]} | {outcome.after[kind]} |"
            for kind in ("replicas", "preferred_leaders", "leading")
        ),
        "",
        f"Acknowledged batches read back: {check.acknowledged:,}, "
        + ("none lost" if check.lost == 0 else f"**{check.lost:,} LOST**: {check.lost_shown[:3]}")
        + f" ({check.found:,} found, {check.offset_gaps} offset gaps).",
    ]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline-s", type=float, default=20.0, help="load before node 3 starts (measured)")
    parser.add_argument("--settle-s", type=float, default=3.0, help="load before the baseline and around the moves")
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"output directory (default {OUT_DEFAULT})")
    parser.add_argument("--no-install", action="store_true", help="do not apt-get install etcd if it is missing")


def run(args: argparse.Namespace) -> int:
    about = (
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}; load average "
        f"{os.getloadavg()[0]:.2f} at the start; 3 nodes then 4, {COORDINATORS} coordinators, replication factor 3, "
        f"{BROKERS} brokers committing 100x100 files every {INTERVAL_S * 1000:.0f} ms each"
    )
    with tempfile.TemporaryDirectory(prefix="diskless-rebalance-") as scratch:
        cluster = ReplicatedCluster(Path(scratch), COORDINATORS, {}, install=not args.no_install)
        cluster.start()
        try:
            outcome = asyncio.run(measure(cluster, args.baseline_s, args.settle_s, about))
        finally:
            cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = asdict(outcome)
    (args.out / "results.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    text = markdown(outcome)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0 if outcome.verification.lost == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="diskless bench rebalance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
