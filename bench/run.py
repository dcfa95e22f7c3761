"""`diskless bench run`: every scenario against every system, in one run; results.json, results.md, plots.

Systems: `coordinator` (this service, group commit, one node: replication
factor 1), `coordinator-sequential` (the same with
`diskless.coordinator.pipeline.enable=false`: check, append, fsync, apply,
answer, one operation at a time), `coordinator-replicated` (three nodes of a
cluster on a local etcd, replication factor 3, `bench/replicated.py`; it also
runs the failover scenario, `bench/failover.py`), `raw-apsw` (the same rows
inserted with apsw, one durable transaction per commit, no gRPC: the physical
limit), `postgres` (a PostgreSQL control plane doing what Aiven's Inkless does,
bench/postgres_inkless_sql.py) and `postgres-simple` (the peer before issue #16,
kept to show the difference).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.apsw_system import RawApswSystem
from bench.coordinator_system import CoordinatorServer, CoordinatorSystem
from bench.driver import LoadOutcome, LoadPlan, run_load
from bench.failover import FAILOVER_SHAPE, FailoverOutcome, run_failover
from bench.replicated import REPLICATED, ReplicatedCluster
from bench.state import PREFILL_BATCHES_PER_FILE, PREFILL_PARTITIONS, build_coordinator_state, build_raw_state
from bench.systems import System, SystemUnavailable
from bench.workload import DUPLICATE_SHARE_DEFAULT, SHAPES

if TYPE_CHECKING:
    from bench.postgres_system import PostgresCluster

COMMIT_INTERVAL_S_DEFAULT = 0.25  # diskless brokers commit a WAL file every 250 ms
FIND_SHAPE = "100x100"
# The replicated system's FindBatches with each consumer reading every partition from one replica (KIP-392).
FIND_ONE_REPLICA = "find-batches @ one replica"
# The system whose half rate is the common rate every system is also measured at (issue #15: each system at
# half its own maximum favours a slow system; one rate for all compares latency at the same work).
PEER = "postgres"
COMMON_RATE_SUFFIX = "@ peer's half"
GROWN_SHAPE = "100x100"


@dataclass(frozen=True, slots=True)
class RunConfig:
    mode: str
    brokers: int
    warmup_s: float
    window_s: float
    windows: int
    max_shapes: tuple[str, ...]
    half_shapes: tuple[str, ...]
    live_states: tuple[int, ...]  # prefilled live batches for the grown-state scenario (0 = skipped)
    consumers: int
    coordinators: int = 8
    duplicate_share: float = DUPLICATE_SHARE_DEFAULT
    coordinator_settings: tuple[tuple[str, str], ...] = ()  # extra settings for both coordinator systems
    scenarios: tuple[str, ...] = ()  # names of the scenarios to run; empty: all of them
    failover_kills: int = 20  # leader kills in the failover scenario (coordinator-replicated)
    failover_settle_s: float = 2.0  # load before the first kill, and after each node is back in sync
    # Settings of the replicated system's nodes under everything else (--set wins): the tiny run's shorter
    # session makes its failovers take the test's time, not the product's.
    replicated_settings: tuple[tuple[str, str], ...] = ()
    # The source tree the coordinator systems' nodes run from ("": this one); `diskless bench compare` runs an
    # older revision's node under this tree's harness and load.
    server_tree: str = ""


# The tests' cluster timings (tests/cluster_harness.py), for the tiny run only; its short drain because a
# cluster node whose peers have stopped drains for the whole timeout when the run ends.
TINY_CLUSTER_SETTINGS = (
    ("diskless.node.session.timeout.ms", "2000"),
    ("diskless.node.heartbeat.interval.ms", "250"),
    ("diskless.cluster.refresh.interval.ms", "100"),
    ("diskless.shutdown.drain.timeout.ms", "2000"),
)

# Every run's cluster: leadership returns to a restarted node's preferred coordinators within about a second
# (Kafka's default check is every 300 s; 20 kills would take hours), so the failover measures its return.
FAILOVER_CLUSTER_SETTINGS = {"diskless.cluster.leader.imbalance.check.interval.ms": "1000"}

MODES = {
    "tiny": RunConfig("tiny", 4, 0.3, 0.6, 1, ("100x100",), ("100x100",), (), 4, coordinators=2, failover_kills=2,
                      failover_settle_s=0.5, replicated_settings=TINY_CLUSTER_SETTINGS),
    "quick": RunConfig("quick", 16, 1.0, 2.0, 3, ("100x100", "1600x16", "1600x320", "1600x1600", "small"),
                       ("100x100", "small"), (1_000_000,), 8),
    "full": RunConfig("full", 16, 3.0, 10.0, 5, ("100x100", "1600x16", "1600x320", "1600x1600", "small"),
                      ("100x100", "1600x320", "small"), (1_000_000, 10_000_000), 8),
}  # fmt: skip

Progress = Callable[[str], None]


def _progress_printer() -> Progress:
    started = time.monotonic()

    def progress(message: str) -> None:
        elapsed = int(time.monotonic() - started)
        print(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {message}", file=sys.stderr, flush=True)

    return progress


@dataclass(slots=True)
class Scenario:
    name: str
    shape: str
    level: str  # max, half, common (the peer's half rate), find, failover
    live_batches: int = 0


class _SystemRun:
    """Starts one system on a fresh (or prebuilt) state, runs its scenarios, stops it."""

    def __init__(self, name: str, config: RunConfig, scratch: Path, install: bool, progress: Progress) -> None:
        self.name = name
        self.config = config
        self.scratch = scratch / f"{name}-{time.monotonic_ns()}"
        self.install = install
        self.progress = progress
        self._server: CoordinatorServer | None = None
        self._cluster: PostgresCluster | None = None
        self.cluster: ReplicatedCluster | None = None  # coordinator-replicated's nodes, which the failover kills

    def start(self, live_batches: int) -> System:
        if self.name == REPLICATED:
            settings = {
                **FAILOVER_CLUSTER_SETTINGS, **dict(self.config.replicated_settings),
                **dict(self.config.coordinator_settings),
            }  # fmt: skip
            settings["diskless.coordinator.pipeline.enable"] = "true"
            self.cluster = ReplicatedCluster(self.scratch, self.config.coordinators, settings, self.install)
            self.cluster.start()
            return CoordinatorSystem(self.name, self.cluster.nodes)
        if self.name.startswith("coordinator"):
            data = self.scratch / "data"
            if live_batches:
                # Built once per run and copied: both coordinator systems start from the same state.
                prebuilt = self.scratch.parent / f"coordinator-state-{live_batches}"
                if not prebuilt.exists():
                    build_coordinator_state(prebuilt, self.config.coordinators, live_batches, self.progress)
                shutil.copytree(prebuilt, data)
            settings = dict(self.config.coordinator_settings)
            settings["diskless.coordinator.pipeline.enable"] = str(self.name == "coordinator").lower()
            self._server = CoordinatorServer(data, self.config.coordinators, settings)
            if self.config.server_tree:
                self._server.tree = Path(self.config.server_tree)
            self._server.start()
            return CoordinatorSystem(self.name, [self._server])
        if self.name == "raw-apsw":
            path = self.scratch / "raw.sqlite"
            if live_batches:
                build_raw_state(path, self.scratch / "raw-log", live_batches)
            return RawApswSystem(path)
        try:  # psycopg comes with the bench extra; without it only the PostgreSQL peers are skipped
            from bench.postgres_peers import peer_cluster, peer_system
        except ImportError as error:
            raise SystemUnavailable(f"{error}: install the bench extra (pip install -e '.[bench]')") from error
        self._cluster = peer_cluster(self.name, self.scratch / "postgres", self.install)
        self._cluster.start()
        if live_batches:
            self._cluster.prefill(live_batches, PREFILL_PARTITIONS, PREFILL_BATCHES_PER_FILE)
        return peer_system(self.name, self._cluster, self.config.brokers, self.config.consumers)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self._cluster is not None:
            self._cluster.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)


@dataclass(slots=True)
class ScenarioResults:
    done: list[tuple[Scenario, LoadPlan, LoadOutcome]] = field(default_factory=list)
    failover: FailoverOutcome | None = None


async def _run_scenarios(
    system: System, config: RunConfig, scenarios: list[Scenario], progress: Progress,
    cluster: ReplicatedCluster | None = None, common_rates: dict[str, float] | None = None,
    known_max_rates: dict[str, float] | None = None,
) -> ScenarioResults:  # fmt: skip
    await system.open()
    results = ScenarioResults()
    # Maxima measured elsewhere (a comparison's two sides): the half and find-batches loads are taken from them.
    max_rates: dict[str, float] = dict(known_max_rates or {})
    try:
        for index, scenario in enumerate(scenarios):
            shape = SHAPES[scenario.shape]
            plan = LoadPlan(shape, config.brokers, 0.0, config.warmup_s, config.window_s, config.windows,
                            config.duplicate_share)  # fmt: skip
            if scenario.level == "failover":
                assert cluster is not None and isinstance(system, CoordinatorSystem), "failover needs a cluster"
                plan = replace(plan, interval_s=config.brokers / _steady_rate(config, max_rates, scenario.shape),
                               duplicate_share=0.0)  # fmt: skip
                results.failover = await run_failover(
                    cluster, system, plan, config.failover_kills, config.failover_settle_s, progress
                )
                continue
            if scenario.level in ("half", "common"):
                rates = max_rates if scenario.level == "half" else (common_rates or {})
                rate = rates.get(scenario.shape, 0.0) / 2
                if rate <= 0:
                    continue
                plan = replace(plan, interval_s=config.brokers / rate)
            elif scenario.level == "find":
                if isinstance(system, CoordinatorSystem):
                    system.reads_from_one_replica = scenario.name == FIND_ONE_REPLICA
                plan = replace(plan, interval_s=config.brokers / _steady_rate(config, max_rates, scenario.shape),
                               consumers=config.consumers)  # fmt: skip
            topic = await system.create_topic(f"bench-{index}-{scenario.shape}", shape.partitions)
            outcome = await run_load(system, topic, plan, seed=index, key_prefix=f"wal/{index}")
            figures = outcome.median()
            if scenario.level == "max":
                max_rates[scenario.shape] = figures["commits_per_s"]
            results.done.append((scenario, plan, outcome))
            progress(f"{system.name:<22} {scenario.name:<28} {_summary(scenario, figures)}")
    finally:
        await system.close()
    return results


def _steady_rate(config: RunConfig, max_rates: dict[str, float], shape: str) -> float:
    """Commits/s of a steady load: brokers commit every 250 ms, slower if that is past half the system's maximum."""
    rate = config.brokers / COMMIT_INTERVAL_S_DEFAULT
    if max_rates.get(shape, 0.0) > 0:
        rate = min(rate, max_rates[shape] / 2)
    return rate


def _summary(scenario: Scenario, figures: dict[str, float]) -> str:
    if scenario.level == "find":
        return (f"FindBatches {figures['find_calls_per_s']:.0f} calls/s p99 {figures['find_p99_ms']:.1f} ms "
                f"(commits {figures['commits_per_s']:.0f}/s)")  # fmt: skip
    return (f"{figures['commits_per_s']:.0f} commits/s {figures['batches_per_s']:.0f} batches/s "
            f"p50 {figures['p50_ms']:.1f} p99 {figures['p99_ms']:.1f} ms")  # fmt: skip


def scenarios_of(config: RunConfig, system: str = "coordinator") -> list[tuple[int, list[Scenario]]]:
    """(live batches prefilled, scenarios run on that state), empty state first; only those chosen, if any.

    The replicated system runs the empty state's scenarios, then the failover; not the grown states (those are
    one node's prebuilt state: a cluster's replicas would have to be built together).
    """
    empty = [Scenario(f"{s} max", s, "max") for s in config.max_shapes]
    empty += [Scenario(f"{s} half", s, "half") for s in config.half_shapes]
    empty += [Scenario(f"{s} {COMMON_RATE_SUFFIX}", s, "common") for s in config.half_shapes]
    empty.append(Scenario("find-batches", FIND_SHAPE, "find"))
    if system == REPLICATED:
        one_replica = Scenario(FIND_ONE_REPLICA, FIND_SHAPE, "find")
        groups = [(0, [*empty, one_replica, Scenario("failover", FAILOVER_SHAPE, "failover")])]
    else:
        grown = [(n, [Scenario(f"{GROWN_SHAPE} max @{n // 1_000_000}M live", GROWN_SHAPE, "max", n)])
                 for n in config.live_states]  # fmt: skip
        groups = [(0, empty), *grown]
    if not config.scenarios:
        return groups
    chosen = [(n, [s for s in scenarios if s.name in config.scenarios]) for n, scenarios in groups]
    return [(n, scenarios) for n, scenarios in chosen if scenarios]


def scenario_names(config: RunConfig) -> list[str]:
    every = replace(config, scenarios=())
    names = [
        s.name for system in ("coordinator", REPLICATED) for _, group in scenarios_of(every, system) for s in group
    ]
    return list(dict.fromkeys(names))


def row_of(system: str, scenario: Scenario, plan: LoadPlan, outcome: LoadOutcome) -> dict[str, Any]:
    figures = outcome.median()
    find = scenario.level == "find"
    return {
        "scenario": scenario.name,
        "system": system,
        "rpc": "FindBatches" if find else "CommitFile",
        "shape": scenario.shape,
        "level": scenario.level,
        "live_batches_before": scenario.live_batches,
        "brokers": plan.brokers,
        "target_commits_per_s": round(plan.target_commits_per_s, 1),
        "commits_per_s": figures["commits_per_s"],
        "batches_per_s": figures["batches_per_s"],
        "p50_ms": figures["find_p50_ms" if find else "p50_ms"],
        "p99_ms": figures["find_p99_ms" if find else "p99_ms"],
        "p999_ms": figures["find_p999_ms" if find else "p999_ms"],
        "commit_p99_ms": figures["p99_ms"],
        # The commits' p50/p99 timed from their actual send, and how far behind schedule the brokers sent: with
        # p50_ms/p99_ms (from the intended send time) they show how much of the latency was waiting to be sent.
        "commit_p50_from_send_ms": figures["p50_from_send_ms"],
        "commit_p99_from_send_ms": figures["p99_from_send_ms"],
        "send_lag_p99_ms": figures["send_lag_p99_ms"],
        "send_lag_max_ms": figures["send_lag_max_ms"],
        "find_calls_per_s": figures["find_calls_per_s"],
        "find_batches_per_call": figures["find_batches_per_call"],
        "cpu_s_per_find_call": figures["cpu_s_per_find_call"],
        "cpu_s_per_batch": figures["cpu_s_per_batch"],
        "client_cpu_s_per_batch": figures["client_cpu_s_per_batch"],
        "fsyncs_per_commit": figures["fsyncs_per_commit"],
        "bytes_written_per_batch": figures["bytes_written_per_batch"],
        "windows": len(outcome.windows),
        "window_s": plan.window_s,
    }


@dataclass(slots=True)
class SystemResults:
    rows: list[dict[str, Any]] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=dict)  # commit (or find) latencies by scenario
    note: str = ""  # the version, for the results' header
    failover: FailoverOutcome | None = None


def run_system(
    name: str, config: RunConfig, scratch: Path, install: bool, progress: Progress,
    common_rates: dict[str, float] | None = None, known_max_rates: dict[str, float] | None = None,
) -> SystemResults:  # fmt: skip
    """Every scenario against one system; the common-rate ones at half of `common_rates` (the peer's maxima);
    the half and find-batches ones at half of `known_max_rates` where given and no max scenario runs before."""
    results = SystemResults()
    for live_batches, scenarios in scenarios_of(config, name):
        run = _SystemRun(name, config, scratch, install, progress)
        try:
            if live_batches:
                progress(f"{name}: building a state of {live_batches:,} live batches")
            system = run.start(live_batches)
            if run._cluster is not None:
                results.note = run._cluster.description
            done = asyncio.run(
                _run_scenarios(system, config, scenarios, progress, run.cluster, common_rates, known_max_rates)
            )
        finally:
            run.stop()
        for scenario, plan, outcome in done.done:
            results.rows.append(row_of(name, scenario, plan, outcome))
            results.latencies[scenario.name] = (
                outcome.find_latencies_ms if scenario.level == "find" else outcome.commit_latencies_ms
            )
        results.failover = done.failover or results.failover
    return results


@dataclass(slots=True)
class RunResults:
    rows: list[dict[str, Any]] = field(default_factory=list)
    latencies: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # by system, then scenario
    notes: dict[str, str] = field(default_factory=dict)
    failovers: dict[str, dict[str, Any]] = field(default_factory=dict)  # by system: FailoverOutcome.summary()


def run_all(config: RunConfig, systems: tuple[str, ...], install: bool, progress: Progress) -> RunResults:
    results = RunResults()
    # The peer first: its maxima set the common rate the others are measured at too.
    ordered = sorted(systems, key=lambda name: name != PEER)
    common_rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="diskless-bench-") as scratch:
        os.chmod(scratch, 0o755)  # the postgres user must reach its cluster's directory inside
        for name in ordered:
            progress(f"{name}: starting")
            try:
                system = run_system(name, config, Path(scratch), install, progress, common_rates)
            except SystemUnavailable as error:
                results.notes[name] = f"skipped: {error}"
                progress(f"{name}: skipped: {error}")
                continue
            results.rows += system.rows
            results.latencies[name] = system.latencies
            if name == PEER:
                common_rates = {row["shape"]: row["commits_per_s"] for row in system.rows if row["level"] == "max"}
            if system.note:
                results.notes[name] = system.note
            if system.failover is not None:
                results.failovers[name] = system.failover.summary()
    results.rows.sort(key=lambda row: systems.index(row["system"]))  # the order asked, the peer's rows included
    return results


def progress_printer() -> Progress:
    return _progress_printer()
