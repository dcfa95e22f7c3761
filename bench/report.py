"""The run's outputs: results.json, results.md (table and targets) and the PNG plots."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

import apsw

from bench.driver import COMMITS_IN_FLIGHT_PER_BROKER
from bench.replicated import REPLICATED

TARGET_BATCHES_PER_S = 25_000
TARGET_HALF_P99_MS = 20.0
TARGET_FIND_CALLS_PER_S = 2_000
TARGET_FIND_P99_MS = 10.0
TARGET_PEER_RATIO = 2.0
TARGET_RAW_RATIO = 0.5
TARGET_GROWN_RATIO = 0.8


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kib / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "host": platform.node(),
    }


def _find(rows: list[dict[str, Any]], scenario: str, system: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["scenario"] == scenario and r["system"] == system), None)


def _field(row: dict[str, Any] | None, key: str) -> float | None:
    return None if row is None else float(row[key])


def _ratio(row: dict[str, Any] | None, other: dict[str, Any] | None, key: str) -> float | None:
    return None if row is None or other is None else float(row[key]) / float(other[key])


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each issue-#15 target: the measured value, the target, met or not, and the ratio to the target."""
    checks: list[dict[str, Any]] = []

    def add(name: str, value: float | None, target: float | None, higher_is_better: bool = True) -> None:
        if value is None or target is None:
            checks.append({"target": name, "value": value, "goal": target, "met": None, "of_goal": None})
            return
        met = value >= target if higher_is_better else value <= target
        of_goal = (value / target if higher_is_better else target / value) if value and target else 0.0
        checks.append({"target": name, "value": round(value, 3), "goal": round(target, 3), "met": met,
                       "of_goal": round(of_goal, 3)})  # fmt: skip

    coordinator_max = _find(rows, "100x100 max", "coordinator")
    find = _find(rows, "find-batches", "coordinator")
    add("batches/s at 100 batches per commit", _field(coordinator_max, "batches_per_s"), TARGET_BATCHES_PER_S)
    for row in rows:
        if row["system"] == "coordinator" and row["level"] == "half":
            add(f"commit p99 ms, {row['scenario']}", row["p99_ms"], TARGET_HALF_P99_MS, False)
    add("FindBatches calls/s", _field(find, "find_calls_per_s"), TARGET_FIND_CALLS_PER_S)
    add("FindBatches p99 ms", _field(find, "p99_ms"), TARGET_FIND_P99_MS, False)
    for row in rows:
        if row["system"] != "coordinator" or row["live_batches_before"]:
            continue
        # At the common rate the peer runs at its own half: its half row is its common-rate row.
        same_rate = f"{row['shape']} half" if row["level"] == "common" else row["scenario"]
        peer = _find(rows, same_rate, "postgres")
        raw = _find(rows, row["scenario"], "raw-apsw")
        rate = "find_calls_per_s" if row["rpc"] == "FindBatches" else "batches_per_s"
        if row["level"] in ("max", "find"):
            add(f"{row['scenario']}: throughput vs the peer (x)", _ratio(row, peer, rate), TARGET_PEER_RATIO)
            add(f"{row['scenario']}: throughput vs raw-apsw (x)", _ratio(row, raw, rate), TARGET_RAW_RATIO)
        add(f"{row['scenario']}: p99 ms, at most the peer's", row["p99_ms"], _field(peer, "p99_ms"), False)
    for row in rows:
        if row["system"] == "coordinator" and row["live_batches_before"] and coordinator_max:
            add(f"throughput at {row['live_batches_before']:,} live batches vs empty (x)",
                row["batches_per_s"] / coordinator_max["batches_per_s"], TARGET_GROWN_RATIO)  # fmt: skip
    return checks


def _format(value: float, digits: int = 1) -> str:
    return "n/a" if value < 0 else f"{value:,.{digits}f}"


def markdown(document: dict[str, Any]) -> str:
    head = document["machine"]
    lines = [
        f"Run `{document['mode']}` on {document['date']}: {head['cores']} cores ({head['cpu']}), "
        f"{head['memory_gib']} GiB, Linux {head['kernel']}, Python {head['python']}, SQLite {head['sqlite']}"
        + "".join(f"; `{name}`: {note}" for name, note in sorted(document["notes"].items()))
        + f"; load average {document['load_average_before']} before, {document['load_average_after']} after. "
        f"Node: {document['config']['coordinators']} coordinators"
        + "".join(f", `{name}={value}`" for name, value in document["config"]["coordinator_settings"])
        + f"; {document['config']['brokers']} brokers; {document['config']['windows']} windows of "
        f"{document['config']['window_s']} s after {document['config']['warmup_s']} s of warm-up.",
        "Medians over each scenario's measurement windows; latencies are per RPC (CommitFile, or FindBatches in "
        "`find-batches`), CPU is the server's (all PostgreSQL processes; the harness process for raw-apsw). "
        "Latencies of rate-claiming scenarios (`half`, `@ peer's half`, the commits of `find-batches`) are measured "
        "from the intended send time of each commit on the brokers' fixed schedule (wrk2's correction for "
        "coordinated omission), so they include any wait behind the schedule; `p99 from send` times the same "
        "commits from their actual send, and `send lag p99` is how far behind the schedule the brokers sent "
        f"(each broker keeps {document.get('load', {}).get('commits_in_flight_per_broker', 1)} commit in flight "
        "and sends late rather than skipping one). `max` scenarios are closed loop (back to back): there the "
        "two agree and nothing lags.",
        "",
        "| scenario | system | commits/s | batches/s | p50 ms | p99 ms | p999 ms | p99 from send ms "
        "| send lag p99 ms | CPU µs/batch | fsyncs/commit | bytes written/batch |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in document["rows"]:
        rate = _format(row["commits_per_s"])
        if row["rpc"] == "FindBatches":
            rate = (f"{row['find_calls_per_s']:,.0f} FindBatches/s ({row['commits_per_s']:,.0f} commits/s; "
                    f"{row.get('cpu_s_per_find_call', 0.0) * 1e6:,.0f} µs CPU/call)")  # fmt: skip
        lines.append(
            f"| {row['scenario']} | {row['system']} | {rate} | {row['batches_per_s']:,.0f} | {row['p50_ms']:.2f} | "
            f"{row['p99_ms']:.2f} | {row['p999_ms']:.2f} | {_from_send(row)} | "
            f"{row['cpu_s_per_batch'] * 1e6:.1f} | "
            f"{_format(row['fsyncs_per_commit'], 2)} | {row['bytes_written_per_batch']:,.0f} |"
        )
    for system, note in document["notes"].items():
        if note.startswith("skipped"):
            lines.append(f"\n`{system}` {note}")
    lines += _replicated_markdown(document)
    lines += ["", "| target | measured | goal | met | of goal |", "|---|---:|---:|---|---:|"]
    for check in document["targets"]:
        met = {True: "yes", False: "**no**", None: "not measured"}[check["met"]]
        value = "—" if check["value"] is None else f"{check['value']:,.2f}"
        goal = "—" if check["goal"] is None else f"{check['goal']:,.2f}"
        of_goal = "—" if check["of_goal"] is None else f"{check['of_goal']:.0%}"
        lines.append(f"| {check['target']} | {value} | {goal} | {met} | {of_goal} |")
    return "\n".join(lines) + "\n"


def _from_send(row: dict[str, Any]) -> str:
    """A CommitFile row's p99 from the send and its send lag (two cells); a FindBatches row's are not its RPC's."""
    if row["rpc"] != "CommitFile" or "commit_p99_from_send_ms" not in row:
        return "— | —"
    return f"{row['commit_p99_from_send_ms']:.2f} | {row['send_lag_p99_ms']:.2f}"


def _replicated_markdown(document: dict[str, Any]) -> list[str]:
    """The replicated system against one node, scenario by scenario, and its failovers (if it ran)."""
    replicated = document.get("replicated")
    if not replicated:
        return []
    settings = ", ".join(f"`{name}={value}`" for name, value in replicated["settings"].items())
    lines = [
        "",
        f"`{REPLICATED}`: {replicated['nodes']} nodes on this machine, on {replicated['etcd_members']} local etcd "
        f"member; {settings}. Its CPU, bytes written and fsyncs are summed over the nodes (followers' included); "
        "its calls go through the routing client bootstrapped from every node.",
    ]
    pairs = []
    for row in document["rows"]:
        single = _find(document["rows"], row["scenario"], "coordinator")
        if row["system"] == REPLICATED and row["rpc"] == "CommitFile" and single is not None:
            pairs.append((row, single))
    if pairs:
        lines += [
            "",
            "| scenario | batches/s, 1 node | batches/s, 3 nodes | x | p50 ms, 1 node | p50 ms, 3 nodes | "
            "p99 ms, 1 node | p99 ms, 3 nodes |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row, single in pairs:
            ratio = row["batches_per_s"] / single["batches_per_s"] if single["batches_per_s"] else 0.0
            lines.append(
                f"| {row['scenario']} | {single['batches_per_s']:,.0f} | {row['batches_per_s']:,.0f} | {ratio:.2f} | "
                f"{single['p50_ms']:.2f} | {row['p50_ms']:.2f} | {single['p99_ms']:.2f} | {row['p99_ms']:.2f} |"
            )
    lines += _find_batches_markdown(document["rows"])
    failover = document.get("failover", {}).get(REPLICATED)
    if failover:
        lines += failover_markdown(failover)
    return lines


EMPTY: dict[str, Any] = {"count": 0}  # a figure an older results file lacks


def _find_batches_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """FindBatches of the cluster (readers on every node) against one node's `find-batches`, same run: calls/s,
    p99 and the server's CPU per call summed over every process of every node (readers included)."""
    single = _find(rows, "find-batches", "coordinator")
    clustered = [r for r in rows if r["system"] == REPLICATED and r["rpc"] == "FindBatches"]
    if single is None or not clustered:
        return []
    lines = [
        "",
        "| FindBatches, commits at half load | calls/s | x 1 node | p50 ms | p99 ms | CPU µs/call (all processes) "
        "| commits/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in [single, *clustered]:
        ratio = row["find_calls_per_s"] / single["find_calls_per_s"] if single["find_calls_per_s"] else 0.0
        lines.append(
            f"| {row['system']}: {row['scenario']} | {row['find_calls_per_s']:,.0f} | {ratio:.2f} | "
            f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['cpu_s_per_find_call'] * 1e6:,.0f} | "
            f"{row['commits_per_s']:,.0f} |"
        )
    return lines


def failover_markdown(failover: dict[str, Any]) -> list[str]:
    commit, ready, in_sync = failover["commit_s"], failover["leader_ready_s"], failover["back_in_sync_s"]
    load, check = failover["load"], failover["verification"]
    lines = [
        "",
        f"Failover: {commit['count']} kill -9s of a coordinator's leader under a steady `{load['shape']}` load "
        f"({load['target_commits_per_s']:,.1f} commits/s asked, {load['batches_per_s']:,.0f} batches/s done; "
        f"commit p50 {load['p50_ms']:,.1f} ms, p99 {load['p99_ms']:,.1f} ms, max {load['max_ms']:,.0f} ms over the "
        "kills). Each killed node restarted and was back in every ISR before the next kill.",
        "",
        "| seconds after the kill -9 | median | p90 | max | every kill |",
        "|---|---:|---:|---:|---|",
    ]
    for label, figures in (
        ("a commit to that coordinator acknowledged (routing client, its retries)", commit),
        ("a surviving node leads it (LEADER, ACTIVE)", ready),
        ("restart to back in every ISR", in_sync),
        ("restart to leading its preferred coordinators again", failover.get("leader_return_s", EMPTY)),
    ):
        if figures["count"]:
            every = ", ".join(f"{v:.2f}" for v in figures["values"])
            lines.append(
                f"| {label} | {figures['median']:.2f} | {figures['p90']:.2f} | {figures['max']:.2f} | {every} |"
            )
    share_in_sync, share_returned = (
        failover.get(k, EMPTY) for k in ("preferred_share_in_sync", "preferred_share_returned")
    )
    if share_returned["count"]:
        lines += [
            "",
            f"Coordinators led by their preferred replica after each restart: median {share_in_sync['median']:.0%} "
            f"(min {share_in_sync['min']:.0%}) once the node was back in every ISR, median "
            f"{share_returned['median']:.0%} (min {share_returned['min']:.0%}) once leadership returned.",
        ]
    verdict = "none lost" if check["lost"] == 0 else f"**{check['lost']:,} LOST**"
    lines += [
        "",
        f"Acknowledged batches read back with FindBatches: {check['acknowledged']:,} acknowledged, {verdict} "
        f"({check['found']:,} batches found, {check['offset_gaps']} offset gaps).",
    ]
    lines += [f"- {lost}" for lost in check["lost_shown"]]
    return lines


def write_failover_plot(out: Path, failover: dict[str, Any]) -> str | None:
    """failover.png: each kill's times, and their distribution; None without matplotlib or kills."""
    try:
        import matplotlib
    except ImportError:
        return None
    if not failover["commit_s"]["count"]:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    commit = failover["commit_s"]["values"]
    ready = failover["leader_ready_s"]["values"]
    figure, (by_kill, cdf) = plt.subplots(1, 2, figsize=(11, 4.5))
    kills = range(1, len(commit) + 1)
    by_kill.plot(kills, commit, marker="o", label="commit acknowledged (routing client)")
    by_kill.plot(kills, ready, marker="s", linestyle="--", label="a surviving node leads (LEADER, ACTIVE)")
    by_kill.set_xlabel("kill")
    by_kill.set_ylabel("seconds after the kill -9")
    by_kill.set_ylim(bottom=0)
    by_kill.set_title("Each failover")
    by_kill.grid(True, alpha=0.3)
    by_kill.legend(fontsize=8)
    by_kill.xaxis.set_major_locator(MaxNLocator(integer=True))
    for label, values in (("commit acknowledged", commit), ("a surviving node leads", ready)):
        ordered = sorted(values)
        fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
        cdf.step([0.0, *ordered], [0.0, *fractions], where="post", label=label)
    cdf.set_xlabel("seconds after the kill -9")
    cdf.set_ylabel("fraction of kills")
    cdf.set_xlim(left=0)
    cdf.set_ylim(0, 1.02)
    cdf.set_title("Distribution")
    cdf.grid(True, alpha=0.3)
    cdf.legend(fontsize=8)
    figure.suptitle(f"{REPLICATED}: failover after kill -9 of a coordinator's leader")
    figure.tight_layout()
    figure.savefig(out / "failover.png", dpi=100)
    plt.close(figure)
    return "failover.png"


def write_plots(out: Path, rows: list[dict[str, Any]], latencies: dict[str, dict[str, list[float]]]) -> list[str]:
    try:
        import matplotlib
    except ImportError:  # the bench extra is not installed: the table and JSON are still written
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    figure, axes = plt.subplots(figsize=(8, 5))
    for system in sorted({r["system"] for r in rows}):
        for shape in ("100x100", "small"):
            points = sorted((r["batches_per_s"], r["p99_ms"]) for r in rows
                            if r["system"] == system and r["shape"] == shape and r["level"] in ("max", "half")
                            and not r["live_batches_before"])  # fmt: skip
            if points:
                axes.plot(*zip(*points, strict=True), marker="o", label=f"{system} ({shape})")
    axes.set_xlabel("batches/s committed")
    axes.set_ylabel("CommitFile p99 latency (ms)")
    axes.set_yscale("log")
    axes.set_title("Throughput against p99 latency (half rate and maximum rate)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "throughput_p99.png", dpi=100)
    plt.close(figure)
    written.append("throughput_p99.png")
    figure, axes = plt.subplots(figsize=(8, 5))
    for system, by_scenario in sorted(latencies.items()):
        samples = sorted(by_scenario.get("100x100 max", []))
        if samples:
            axes.plot(samples, [(i + 1) / len(samples) for i in range(len(samples))], label=system)
    axes.set_xscale("log")
    axes.set_xlabel("CommitFile latency (ms), 100 batches over 100 partitions per file, maximum rate")
    axes.set_ylabel("fraction of commits")
    axes.set_title("Latency distribution (CDF)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "latency_cdf.png", dpi=100)
    plt.close(figure)
    written.append("latency_cdf.png")
    return written


def write_results(
    out: Path,
    mode: str,
    rows: list[dict[str, Any]],
    latencies: dict[str, dict[str, list[float]]],
    notes: dict[str, str],
    load_before: str,
    config: dict[str, Any],
    failovers: dict[str, dict[str, Any]] | None = None,
    replicated: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`failovers` by system (FailoverOutcome.summary()); `replicated`: the replicated system's nodes and settings."""
    out.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "mode": mode,
        "config": config,
        # How the load was generated and timed (bench/driver.py), so that a reader of old results can tell.
        "load": {
            "commits_in_flight_per_broker": COMMITS_IN_FLIGHT_PER_BROKER,
            "open_loop_latency_from": "intended send time",
            "closed_loop_latency_from": "send",
        },
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "notes": notes,
        "rows": rows,
        "targets": targets(rows),
        "replicated": replicated,
        "failover": failovers or {},
    }
    plots = write_plots(out, rows, latencies)
    if failovers and REPLICATED in failovers:
        plots += [p for p in [write_failover_plot(out, failovers[REPLICATED])] if p is not None]
    document["plots"] = plots
    (out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "results.md").write_text(markdown(document))
    return document
