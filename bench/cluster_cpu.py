"""Where a 3-node cluster's CPU goes against one node's, at the same fixed rate (issue #37 item 3).

    python -m bench.cluster_cpu [--rounds 3] [--commits-per-s 30] [--seconds 12] [--set NAME=VALUE ...] [--json]
                                [--py-spy DIR]

Each round runs one node (`diskless serve`, 8 coordinators) and then a cluster of three on a local etcd
(bench/replicated.py: replication factor 3, min.insync.replicas 2), each under the same open-loop load of
`100x100` commits (6 brokers, `--commits-per-s` in all) through the routing client, as `diskless bench run` drives
them. It reads each node's CPU (the process and its children, /proc) and its replica fetcher's counters (the
node's /metrics) before and after the load, and prints per round: CPU per batch of the one node and of the
cluster summed and per node, their ratio, and FetchLogs calls per commit per node. Medians over the rounds last.
Nothing else should run on the machine: the CPU of a process waiting for a core is not counted, but its caches
and the interpreter lock's hand-overs are.

`--py-spy DIR` also samples each node of the cluster with py-spy during the load (DIR/node-I.raw, collapsed
stacks) and writes each node's samples split into leader, follower, loop and gRPC work (DIR/split.md,
bench/cpu_split.py). Sampling costs the nodes CPU: the figures of such a run are not comparable with others.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.coordinator_system import CoordinatorServer, CoordinatorSystem
from bench.cpu_split import split, table
from bench.driver import LoadPlan, run_load
from bench.py_spy import RECORDER_STOP_S, py_spy_binary
from bench.replicated import ReplicatedCluster
from bench.systems import process_cpu_s, process_tree
from bench.workload import DUPLICATE_SHARE_DEFAULT, SHAPES

COORDINATORS = 8
BROKERS = 6
WARMUP_S = 2.0
SETTLE_S = 3.0  # after a cluster listens: its leaders elected and every follower joined its session
FETCHER_CALLS = "diskless_replica_fetcher_calls_total"
SAMPLES_PER_S = 100


def tree_cpu_s(pid: int) -> float:
    total = 0.0
    for each in process_tree(pid):
        try:
            total += process_cpu_s(each)
        except OSError:  # ended between listing and reading
            continue
    return total


def fetcher_calls(server: CoordinatorServer) -> float:
    """FetchLogs calls the node's replica fetcher made so far (0 on a node alone)."""
    found = None
    for line in server.output:
        found = re.search(r"metrics at (http://\S+/metrics)", line) or found
    if found is None:
        return 0.0
    with urllib.request.urlopen(found.group(1), timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(FETCHER_CALLS))


def start_py_spy(servers: list[CoordinatorServer], plan: LoadPlan, out: Path) -> list[subprocess.Popen[str]]:
    """A py-spy recorder per node for the load's warm-up and window (raw collapsed stacks, without pausing it)."""
    out.mkdir(parents=True, exist_ok=True)
    seconds = round(plan.warmup_s + plan.window_s * plan.windows)
    recorders = []
    for index, server in enumerate(servers):
        command = [py_spy_binary(), "record", "--pid", str(server.pid), "--subprocesses", "--nonblocking",
                   "--rate", str(SAMPLES_PER_S), "--duration", str(seconds), "--format", "raw",
                   "--output", str(out / f"node-{index}.raw")]  # fmt: skip
        recorders.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    return recorders


def split_py_spy(recorders: list[subprocess.Popen[str]], out: Path) -> None:
    named = {}
    for index, recorder in enumerate(recorders):
        _, errors = recorder.communicate(timeout=RECORDER_STOP_S)
        if recorder.returncode != 0:
            raise RuntimeError(f"py-spy failed ({recorder.returncode}): {errors.strip()[-500:]}")
        named[f"node {index}"] = split((out / f"node-{index}.raw").read_text())
    (out / "split.md").write_text(table(named))
    print(table(named), end="", flush=True)


async def measured_load(servers: list[CoordinatorServer], plan: LoadPlan, py_spy: Path | None) -> dict[str, Any]:
    system = CoordinatorSystem("cluster-cpu", servers)
    await system.open()
    try:
        topic = await system.create_topic("cpu", plan.shape.partitions)
        cpu_before = [tree_cpu_s(s.pid) for s in servers]
        calls_before = [fetcher_calls(s) for s in servers]
        recorders = start_py_spy(servers, plan, py_spy) if py_spy is not None else []
        started = time.monotonic()
        outcome = await run_load(system, topic, plan, seed=1, key_prefix="wal/cpu")
        took_s = time.monotonic() - started
        cpu = [tree_cpu_s(s.pid) - b for s, b in zip(servers, cpu_before, strict=True)]
        calls = [fetcher_calls(s) - b for s, b in zip(servers, calls_before, strict=True)]
        if py_spy is not None:
            split_py_spy(recorders, py_spy)
    finally:
        await system.close()
    figures = outcome.median()
    # The CPU is read around the whole load (warm-up included): per batch over every batch it carried.
    batches = figures["batches_per_s"] * took_s
    commits = figures["commits_per_s"] * took_s
    return {
        "batches_per_s": figures["batches_per_s"],
        "cpu_us_per_batch": sum(cpu) / batches * 1e6,
        "per_node_cpu_us_per_batch": [c / batches * 1e6 for c in cpu],
        "fetch_calls_per_commit_per_node": [c / commits for c in calls],
        "commit_p50_ms": statistics.median(outcome.commit_latencies_ms) if outcome.commit_latencies_ms else 0.0,
    }


def run_node(plan: LoadPlan, settings: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cluster-cpu-") as scratch:
        server = CoordinatorServer(Path(scratch) / "node", COORDINATORS, settings)
        server.start()
        try:
            return asyncio.run(measured_load([server], plan, None))
        finally:
            server.stop()


def run_cluster(plan: LoadPlan, settings: dict[str, str], py_spy: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cluster-cpu-") as scratch:
        cluster = ReplicatedCluster(Path(scratch), COORDINATORS, settings, install=False)
        cluster.start()
        try:
            time.sleep(SETTLE_S)
            return asyncio.run(measured_load(cluster.nodes, plan, py_spy))
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits-per-s", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting of every node")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="sample each cluster node (DIR/round-N/)")
    arguments = parser.parse_args()
    settings = dict(item.split("=", 1) for item in arguments.set)
    settings.setdefault("diskless.metrics.listen", "127.0.0.1:0")
    plan = LoadPlan(
        SHAPES["100x100"], BROKERS, BROKERS / arguments.commits_per_s, WARMUP_S, arguments.seconds, 1,
        DUPLICATE_SHARE_DEFAULT,
    )  # fmt: skip
    rounds = []
    for index in range(arguments.rounds):
        node = run_node(plan, settings)
        py_spy = arguments.py_spy / f"round-{index + 1}" if arguments.py_spy else None
        cluster = run_cluster(plan, settings, py_spy)
        ratio = cluster["cpu_us_per_batch"] / node["cpu_us_per_batch"]
        rounds.append({"node": node, "cluster": cluster, "ratio": ratio})
        print(
            f"round {index + 1}: node {node['cpu_us_per_batch']:.0f} µs/batch, cluster "
            f"{cluster['cpu_us_per_batch']:.0f} µs/batch (per node "
            f"{', '.join(f'{c:.0f}' for c in cluster['per_node_cpu_us_per_batch'])}), ratio {ratio:.2f}x; FetchLogs "
            f"per commit per node {', '.join(f'{c:.2f}' for c in cluster['fetch_calls_per_commit_per_node'])}",
            flush=True,
        )
    summary = {
        "node_cpu_us_per_batch": statistics.median(r["node"]["cpu_us_per_batch"] for r in rounds),
        "cluster_cpu_us_per_batch": statistics.median(r["cluster"]["cpu_us_per_batch"] for r in rounds),
        "ratio": statistics.median(r["ratio"] for r in rounds),
        "settings": settings,
        "commits_per_s": arguments.commits_per_s,
    }
    print(
        f"median over {len(rounds)} rounds: node {summary['node_cpu_us_per_batch']:.0f} µs/batch, cluster "
        f"{summary['cluster_cpu_us_per_batch']:.0f} µs/batch, ratio {summary['ratio']:.2f}x"
    )
    if arguments.json:
        print(json.dumps({"summary": summary, "rounds": rounds}))


if __name__ == "__main__":
    main()
