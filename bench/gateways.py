"""Produce gateways (issue #31; KIP-1164 "Reducing multi-DC commit operations"): commit calls per WAL file when
brokers follow the gateways, against brokers that take any partition, on one 3-node cluster in one run.

The cluster is `coordinator-replicated`'s (three `diskless serve` nodes on a local etcd, replication factor 3)
with 12 coordinators, so each node leads about four. Brokers sit in three racks (broker b in rack b mod 3), and
every partition has one idempotent producer in each rack, which sends to one broker of its own rack:

- `any`: each rack's partitions are dealt out to its brokers in turn, in a seeded random order, as when producers
  pick any broker of their rack;
- `gateways`: partition p of coordinator c goes to one of c's gateways in the rack (p mod their count), as
  `DescribeProduceGateways` names them (asked once per run, so the answer follows the leaders of that moment).

Each broker is a routing client of its own (one per broker, as each broker has one) and commits one WAL file at a
time holding one batch of every producer it takes, either back to back (`max`) or every `--interval-ms` (the
brokers' commit cadence, open loop; latency then counts from each file's intended send time, bench/driver.py). The
routing client sends a file's batches to each leader node in one call; the calls it sends are counted
(`RoutingClient.calls_sent`), and the distinct leader nodes of a file's batches come from its routes. Modes
alternate run by run, the order swapped every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.coordinator_system import CALL_TIMEOUT_S, MESSAGE_MAX_BYTES, CoordinatorSystem
from bench.driver import intended_send_at, timed
from bench.replicated import REPLICATED, ReplicatedCluster
from bench.systems import process_cpu_s, process_tree
from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb

COORDINATORS = 12
RACKS = 3
PARTITIONS = 240  # 20 per coordinator on average
BROKER_COUNTS_DEFAULT = (6, 36)
MODES = ("any", "gateways")
RUNS_DEFAULT = 3
WARMUP_S_DEFAULT = 2.0
WINDOW_S_DEFAULT = 8.0
INTERVAL_MS_DEFAULT = 250  # the brokers' commit cadence (Inkless's commit interval)
BATCH_BYTES = 1000
TIMESTAMP_MS = 1_700_000_000_000
PRODUCERS_PER_RUN = 1_000_000  # producer ids of one run: run * this + rack * PARTITIONS + partition + 1
OUT_DEFAULT = Path(__file__).resolve().parent / "results" / "gateways"


RACK_NAMES = tuple(f"rack-{i}" for i in range(RACKS))


def rack_of(broker_id: int) -> str:
    return RACK_NAMES[broker_id % RACKS]


def assign_any(brokers: int) -> dict[int, list[tuple[int, int]]]:
    """Broker -> its (partition, rack index) producers: each rack's partitions, in a seeded random order, dealt out
    to its brokers in turn (as even as dealing in index order, but unrelated to the coordinators' layout: their
    partitions are dealt round-robin too, and dealing both by index would line a broker up with few coordinators)."""
    taken: dict[int, list[tuple[int, int]]] = {b: [] for b in range(brokers)}
    for rack in range(RACKS):
        members = [b for b in range(brokers) if b % RACKS == rack]
        order = list(range(PARTITIONS))
        random.Random(rack).shuffle(order)
        for turn, partition in enumerate(order):
            taken[members[turn % len(members)]].append((partition, rack))
    return taken


def assign_gateways(
    brokers: int, coordinator_of: Sequence[int], gateways: pb.DescribeProduceGatewaysResponse
) -> dict[int, list[tuple[int, int]]]:
    """Broker -> its producers: partition p of coordinator c to c's gateway p mod k in each rack."""
    named = {(g.coordinator_id, g.rack): list(g.broker_ids) for g in gateways.gateways}
    taken: dict[int, list[tuple[int, int]]] = {b: [] for b in range(brokers)}
    for rack in range(RACKS):
        for partition in range(PARTITIONS):
            chosen = named[(coordinator_of[partition], RACK_NAMES[rack])]
            taken[chosen[partition % len(chosen)]].append((partition, rack))
    return taken


@dataclass(slots=True)
class RunFigures:
    brokers: int
    mode: str
    cadence: str
    run: int
    files: int = 0
    batches: int = 0
    window_s: float = 0.0
    calls_per_file: Counter[int] = field(default_factory=Counter)
    nodes_per_file: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    harness_cpu_s: float = 0.0
    server_cpu_s: float = 0.0

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies_ms)
        files = max(self.files, 1)
        return {
            "batches_per_s": self.batches / self.window_s,
            "files_per_s": self.files / self.window_s,
            "calls_per_file": sum(k * n for k, n in self.calls_per_file.items()) / files,
            "calls_per_file_max": max(self.calls_per_file, default=0),
            "nodes_per_file": sum(k * n for k, n in self.nodes_per_file.items()) / files,
            "p50_ms": ordered[len(ordered) // 2] if ordered else 0.0,
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0,
            "server_cpu_ms_per_batch": 1000 * self.server_cpu_s / max(self.batches, 1),
            "harness_cpu_share": self.harness_cpu_s / self.window_s,
        }


class Broker:
    """One simulated broker: its own routing client, its producers, one WAL file at a time."""

    def __init__(
        self, broker_id: int, addresses: Sequence[str], topic_id: bytes, coordinator_of: Sequence[int], run: int
    ) -> None:
        self.broker_id = broker_id
        self.coordinator_of = coordinator_of
        self._random = random.Random(run * 1000 + broker_id)
        self.topic_id = topic_id
        self.run = run
        self.client = RoutingClient(
            list(addresses), deadline_ms=CALL_TIMEOUT_S * 1000, rpc_timeout_ms=CALL_TIMEOUT_S * 1000,
            message_max_bytes=MESSAGE_MAX_BYTES,
        )  # fmt: skip
        self.sequences: dict[tuple[int, int], int] = {}
        self.files = 0

    def request(self, producers: Sequence[tuple[int, int]]) -> pb.CommitFileRequest:
        batches = []
        for index, (partition, rack) in enumerate(sorted(producers)):
            sequence = self.sequences.get((partition, rack), 0)
            self.sequences[(partition, rack)] = sequence + 10
            batches.append(pb.CommitFileRequest.Batch(
                magic=2, topic_id=self.topic_id, partition=partition, byte_offset=index * BATCH_BYTES,
                size=BATCH_BYTES, base_offset=0, last_offset=9, batch_max_timestamp=TIMESTAMP_MS,
                timestamp_type=pb.CREATE_TIME, producer_id=self.run * PRODUCERS_PER_RUN + rack * PARTITIONS
                + partition + 1, producer_epoch=0, base_sequence=sequence, last_sequence=sequence + 9,
            ))  # fmt: skip
        self.files += 1
        owners = sorted({self.coordinator_of[p] for p, _ in producers})
        self._random.shuffle(owners)  # the broker's random permutation; the first is the initial owner (KIP-1164)
        return pb.CommitFileRequest(
            object_key=f"gateways/r{self.run}/b{self.broker_id}/{self.files}", object_format=1,
            file_size=len(batches) * BATCH_BYTES, uploader_broker_id=self.broker_id, owner_ids=owners,
            batches=batches,
        )  # fmt: skip

    def leader_nodes(self, coordinators: Sequence[int]) -> int:
        routes = self.client.routes()
        return len({routes[c].leader_node_id for c in coordinators if c in routes})

    async def commit(self, request: pb.CommitFileRequest) -> int:
        """The calls sent for one file; raises on any batch's error."""
        before = self.client.calls_sent["CommitFile"]
        response = await self.client.commit_file(request)
        failed = [b for b in response.batches if b.error_code != pb.NONE]
        if failed:
            raise RuntimeError(f"CommitFile {request.object_key}: {failed[0]}")
        return self.client.calls_sent["CommitFile"] - before


async def _broker_loop(
    broker: Broker,
    producers: Sequence[tuple[int, int]],
    coordinator_of: Sequence[int],
    interval_s: float,
    measure_from: float,
    stop_at: float,
    figures: RunFigures,
) -> None:
    coordinators = sorted({coordinator_of[p] for p, _ in producers})
    first_at, index = time.monotonic(), 0
    while time.monotonic() < stop_at:
        # Open loop: the index-th file is due at first_at + index * interval_s, and its latency counts from then
        # (bench/driver.py), so a late file's wait behind the one before it is not hidden.
        intended = intended_send_at(first_at, interval_s, index, time.monotonic())
        index += 1
        await asyncio.sleep(max(0.0, intended - time.monotonic()))
        if time.monotonic() >= stop_at:
            break
        started = time.monotonic()
        calls = await broker.commit(broker.request(producers))
        event = timed(intended, started, time.monotonic(), len(producers))
        if started >= measure_from and time.monotonic() <= stop_at:
            figures.files += 1
            figures.batches += len(producers)
            figures.latencies_ms.append(event.latency_s * 1000)
            figures.calls_per_file[calls] += 1
            figures.nodes_per_file[broker.leader_nodes(coordinators)] += 1


async def _one_run(
    system: CoordinatorSystem, topic_id: bytes, coordinator_of: Sequence[int], figures: RunFigures,
    interval_s: float, warmup_s: float, window_s: float,
) -> None:  # fmt: skip
    addresses = [server.address for server in system.servers]
    brokers = [Broker(b, addresses, topic_id, coordinator_of, figures.run) for b in range(figures.brokers)]
    try:
        if figures.mode == "gateways":
            described = await brokers[0].client.describe_produce_gateways(
                pb.DescribeProduceGatewaysRequest.Broker(broker_id=b, rack=rack_of(b)) for b in range(figures.brokers)
            )
            if described.error_code != pb.NONE:
                raise RuntimeError(f"DescribeProduceGateways: {described}")
            taken = assign_gateways(figures.brokers, coordinator_of, described)
        else:
            taken = assign_any(figures.brokers)
        for broker in brokers:  # routes learned before the window, as a running broker has them
            await broker.client.coordinators_of(topic_id, sorted({p for p, _ in taken[broker.broker_id]}))
        pids = [pid for server in system.servers for pid in process_tree(server.pid)]
        start = time.monotonic()
        measure_from, stop_at = start + warmup_s, start + warmup_s + window_s
        loops = [
            _broker_loop(broker, taken[broker.broker_id], coordinator_of, interval_s, measure_from, stop_at, figures)
            for broker in brokers
            if taken[broker.broker_id]
        ]
        cpu = asyncio.create_task(_cpu_over(pids, measure_from, stop_at, figures))
        await asyncio.gather(*loops)
        await cpu
        figures.window_s = window_s
    finally:
        for broker in brokers:
            await broker.client.close()


async def _cpu_over(pids: Sequence[int], start: float, stop: float, figures: RunFigures) -> None:
    """The servers' and this harness's CPU seconds over the window."""
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    server_before, harness_before = _cpu(pids), process_cpu_s(os.getpid())
    await asyncio.sleep(max(0.0, stop - time.monotonic()))
    figures.server_cpu_s = _cpu(pids) - server_before
    figures.harness_cpu_s = process_cpu_s(os.getpid()) - harness_before


def _cpu(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += process_cpu_s(pid)
        except OSError:
            continue
    return total


async def measure(
    cluster: ReplicatedCluster, broker_counts: Sequence[int], cadences: Sequence[str], runs: int,
    warmup_s: float, window_s: float, interval_ms: int, progress: bool = True,
) -> list[RunFigures]:  # fmt: skip
    system = CoordinatorSystem(REPLICATED, cluster.nodes)
    await system.open()
    try:
        topic = await system.create_topic("gateways", PARTITIONS)
        topic_id = system.topic_id(topic)
        coordinator_of = await system.client.coordinators_of(topic_id, range(PARTITIONS))
        results: list[RunFigures] = []
        run = 0
        for brokers in broker_counts:
            for cadence in cadences:
                for repeat in range(runs):
                    order = MODES if repeat % 2 == 0 else MODES[::-1]
                    for mode in order:
                        run += 1
                        figures = RunFigures(brokers, mode, cadence, run)
                        interval_s = interval_ms / 1000 if cadence == "interval" else 0.0
                        await _one_run(system, topic_id, coordinator_of, figures, interval_s, warmup_s, window_s)
                        results.append(figures)
                        if progress:
                            shown = ", ".join(f"{k} {v:.2f}" for k, v in figures.summary().items())
                            print(f"[{time.strftime('%H:%M:%S')}] {brokers} brokers {cadence} {mode} "
                                  f"(run {repeat + 1}/{runs}): {shown}", flush=True)  # fmt: skip
        return results
    finally:
        await system.close()


def medians(results: Sequence[RunFigures]) -> list[dict[str, object]]:
    """One row per (brokers, cadence, mode): the median of each figure over the runs, calls per file pooled."""
    rows: list[dict[str, object]] = []
    keys = list(dict.fromkeys((r.brokers, r.cadence, r.mode) for r in results))
    for brokers, cadence, mode in keys:
        chosen = [r for r in results if (r.brokers, r.cadence, r.mode) == (brokers, cadence, mode)]
        summaries = [r.summary() for r in chosen]
        row: dict[str, object] = {"brokers": brokers, "cadence": cadence, "mode": mode, "runs": len(chosen)}
        row.update({name: statistics.median(s[name] for s in summaries) for name in summaries[0]})
        pooled: Counter[int] = Counter()
        for r in chosen:
            pooled.update(r.calls_per_file)
        row["calls_per_file_histogram"] = {str(k): pooled[k] for k in sorted(pooled)}
        rows.append(row)
    return rows


def write_results(out: Path, rows: list[dict[str, object]], results: Sequence[RunFigures], about: str) -> None:
    from bench.gateways_report import markdown, plot

    out.mkdir(parents=True, exist_ok=True)
    raw = [{**asdict(r), "calls_per_file": dict(r.calls_per_file), "nodes_per_file": dict(r.nodes_per_file),
            "latencies_ms": None, **r.summary()} for r in results]  # fmt: skip
    (out / "results.json").write_text(json.dumps({"about": about, "rows": rows, "runs": raw}, indent=2))
    (out / "results.md").write_text(markdown(rows, about))
    plot(out / "gateways.png", rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", default=",".join(map(str, BROKER_COUNTS_DEFAULT)), help="broker counts, e.g. 6,36")
    parser.add_argument("--cadence", default="interval,max", help="interval (every --interval-ms), max, or both")
    parser.add_argument("--interval-ms", type=int, default=INTERVAL_MS_DEFAULT, help="the interval cadence's period")
    parser.add_argument("--runs", type=int, default=RUNS_DEFAULT, help="runs of each mode (alternating)")
    parser.add_argument("--warmup-s", type=float, default=WARMUP_S_DEFAULT)
    parser.add_argument("--window-s", type=float, default=WINDOW_S_DEFAULT)
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"output directory (default {OUT_DEFAULT})")
    parser.add_argument("--no-install", action="store_true", help="do not apt-get install etcd if it is missing")


def run(args: argparse.Namespace) -> int:
    """Starts the cluster, measures, writes results.json, results.md and gateways.png under --out; 2 on bad flags."""
    try:
        broker_counts = [int(n) for n in args.brokers.split(",")]
    except ValueError:
        broker_counts = [0]
    cadences = [c.strip() for c in args.cadence.split(",")]
    if min(broker_counts) < RACKS or set(cadences) - {"interval", "max"} or args.runs < 1 or args.interval_ms < 1:
        print(f"diskless bench gateways: --brokers takes counts >= {RACKS}, --cadence interval and/or max, --runs and "
              "--interval-ms values >= 1", file=sys.stderr)  # fmt: skip
        return 2
    about = (
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}; load average "
        f"{os.getloadavg()[0]:.2f} at the start; 3 nodes, {COORDINATORS} coordinators, {PARTITIONS} partitions, "
        f"{RACKS} racks, medians of {args.runs} runs of {args.window_s:.0f} s after {args.warmup_s:.0f} s"
    )
    with tempfile.TemporaryDirectory(prefix="diskless-gateways-") as scratch:
        cluster = ReplicatedCluster(Path(scratch), COORDINATORS, {}, install=not args.no_install)
        cluster.start()
        try:
            results = asyncio.run(measure(cluster, broker_counts, cadences, args.runs, args.warmup_s, args.window_s,
                                          args.interval_ms))  # fmt: skip
        finally:
            cluster.stop()
    rows = medians(results)
    write_results(args.out, rows, results, about)
    print((args.out / "results.md").read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="diskless bench gateways", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
