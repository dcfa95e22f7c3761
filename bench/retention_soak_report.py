"""The retention soak's figures (bench/retention_soak.py): each series' spread after warm-up, commit latency by
phase, and with an output directory samples-<variant>.csv, summary.json and soak.png."""

from __future__ import annotations

import argparse
import collections
import csv
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.driver import NAN, percentile_ms
from bench.tiered_copier import CopierStats

SAMPLE_INTERVAL_S = 0.5
# The series that must be flat after warm-up (issue #28), then the load's own.
FLAT_SERIES = (
    "live_batches", "state_bytes", "log_bytes", "snapshot_bytes", "rss_bytes", "known_files", "object_files",
)  # fmt: skip
SERIES = (*FLAT_SERIES, "batches_per_s", "late_ms", "remote_batches", "load_1m")
# The first seconds of the baseline are left out of its latencies: channels and the node's first commits warm up.
BASELINE_SKIP_S = 2.0


@dataclass
class Run:
    variant: str
    commit_batches: int = 10
    commits: list[tuple[float, float, float]] = field(default_factory=list)  # (sent, answered, late s), monotonic
    samples: list[dict[str, float]] = field(default_factory=list)
    started: float = 0.0
    retention_from: float = 0.0
    end: float = 0.0
    copier: CopierStats | None = None
    errors: collections.Counter[str] = field(default_factory=collections.Counter)  # refused commits, retried

    @property
    def warm_from(self) -> float:
        """The steady phase: the second half of the retention phase (the baseline's backlog goes in the first)."""
        return self.retention_from + (self.end - self.retention_from) / 2

    def latencies(self, start: float, end: float) -> list[float]:
        """From each commit's intended send time (its due time, `sent - late`), as bench/driver.py measures."""
        return [answered - sent + late for sent, answered, late in self.commits if start <= sent < end]

    def lateness(self, start: float, end: float) -> list[float]:
        return [late for sent, _, late in self.commits if start <= sent < end]


def _spread(values: list[float]) -> dict[str, float]:
    median = statistics.median(values) if values else 0.0
    if not median:
        return {"median": median, "low_pct": 0.0, "high_pct": 0.0}
    return {"median": median, "low_pct": (min(values) / median - 1) * 100, "high_pct": (max(values) / median - 1) * 100}


def _latency(values: list[float]) -> dict[str, float]:
    return {
        "commits": len(values),
        "p50_ms": percentile_ms(values, 0.5, empty=NAN),
        "p99_ms": percentile_ms(values, 0.99, empty=NAN),
        "max_ms": percentile_ms(values, 1.0, empty=NAN),
    }


def _during_passes(run: Run, start: float, end: float) -> list[float]:
    """Latencies of the commits in flight while a copier pass ran (steady phase)."""
    spans = sorted(run.copier.pass_spans) if run.copier else []
    found: list[float] = []
    for sent, answered, late in run.commits:
        if start <= sent < end and any(s < answered and sent < e for s, e in spans):
            found.append(answered - sent + late)
    return found


def summarise(run: Run, control: Run | None) -> dict[str, Any]:
    warm_t = run.warm_from - run.started
    settled = [s for s in run.samples if s["t"] >= warm_t]
    skip = min(BASELINE_SKIP_S, (run.retention_from - run.started) / 4)
    baseline = _latency(run.latencies(run.started + skip, run.retention_from))
    steady = _latency(run.latencies(run.warm_from, run.end))
    summary: dict[str, Any] = {
        "variant": run.variant,
        "retention_set_at_s": run.retention_from - run.started,
        "steady_from_s": warm_t,
        "end_s": run.end - run.started,
        "steady_samples": len(settled),
        "series": {name: _spread([s[name] for s in settled]) for name in SERIES},
        "commits": {
            "baseline": baseline,
            "draining": _latency(run.latencies(run.retention_from, run.warm_from)),
            "steady": steady,
        },
        "p99_steady_over_baseline": steady["p99_ms"] / baseline["p99_ms"] if baseline["p99_ms"] else float("nan"),
        "p50_steady_over_baseline": steady["p50_ms"] / baseline["p50_ms"] if baseline["p50_ms"] else float("nan"),
        "broker_lateness_ms": {
            "p99": percentile_ms(run.lateness(run.started, run.end), 0.99, empty=NAN),
            "max": percentile_ms(run.lateness(run.started, run.end), 1.0, empty=NAN),
        },
        "refused_commits": dict(run.errors),
        "load_1m": {"min": min(s["load_1m"] for s in run.samples), "max": max(s["load_1m"] for s in run.samples)},
    }
    if control is not None and control is not run:
        # The control ran side by side, same schedule, nothing removed: its commits over this run's steady window
        # went through the same machine load. That is the "same run without" retention or offload.
        same = _latency(control.latencies(run.warm_from, run.end))
        summary["commits"]["control_same_window"] = same
        summary["p99_steady_over_control"] = steady["p99_ms"] / same["p99_ms"] if same["p99_ms"] else float("nan")
        summary["p50_steady_over_control"] = steady["p50_ms"] / same["p50_ms"] if same["p50_ms"] else float("nan")
    if run.copier is not None:
        stats = run.copier
        summary["copier"] = {
            "passes": stats.passes, "segments": stats.segments, "offloaded_batches": stats.offloaded_batches,
            "expired_segments": stats.expired_segments, "expired_batches": stats.expired_batches,
            "errors": dict(stats.errors),
            "pass_p50_ms": percentile_ms([e - s for s, e in stats.pass_spans], 0.5, empty=NAN),
            "pass_p99_ms": percentile_ms([e - s for s, e in stats.pass_spans], 0.99, empty=NAN),
        }  # fmt: skip
        summary["commits"]["steady_during_copier_passes"] = _latency(_during_passes(run, run.warm_from, run.end))
    return summary


def _print(summary: dict[str, Any]) -> None:
    variant = summary["variant"]
    print(f"{variant}: steady phase from {summary['steady_from_s']:.1f} s ({summary['steady_samples']} samples):")
    for name, spread in summary["series"].items():
        print(
            f"  {name}: median {spread['median']:.0f}, spread {spread['low_pct']:+.1f}% .. {spread['high_pct']:+.1f}%"
        )
    for phase, figures in summary["commits"].items():
        print(
            f"  commits {phase}: {figures['commits']}, median {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f}"
            f" ms, max {figures['max_ms']:.2f} ms"
        )
    if "p99_steady_over_control" in summary:
        print(
            f"  p99 steady / control's over the same window: {summary['p99_steady_over_control']:.2f} (p50 "
            f"{summary['p50_steady_over_control']:.2f})"
        )
    late = summary["broker_lateness_ms"]
    print(
        f"  p99 steady / baseline: {summary['p99_steady_over_baseline']:.2f} (p50 "
        f"{summary['p50_steady_over_baseline']:.2f}); brokers late p99 {late['p99']:.1f} ms, max {late['max']:.1f} ms;"
        f" load {summary['load_1m']['min']:.1f}..{summary['load_1m']['max']:.1f}"
    )
    if summary["refused_commits"]:
        print(f"  refused commits (retried): {summary['refused_commits']}")
    if "copier" in summary:
        print(f"  copier: {summary['copier']}")


def write_report(args: argparse.Namespace, runs: list[Run], output: Path | None) -> None:
    control = next((run for run in runs if run.variant == "control"), None)
    summaries = [summarise(run, control) for run in runs]
    for summary in summaries:
        _print(summary)
    if output is None:
        return
    output.mkdir(parents=True, exist_ok=True)
    for run in runs:
        with (output / f"samples-{run.variant}.csv").open("w", newline="") as file:
            writer = csv.DictWriter(file, ["t", *SERIES])
            writer.writeheader()
            writer.writerows(run.samples)
    document = {"arguments": {k: str(v) for k, v in vars(args).items()}, "variants": summaries}
    (output / "summary.json").write_text(json.dumps(document, indent=2) + "\n")
    _plot(runs, output / "soak.png")
    print(f"wrote {output}/samples-*.csv, summary.json and soak.png")


def _plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [name for name in SERIES if name != "load_1m"]
    figure, axes = plt.subplots(len(shown), 1, figsize=(9, 1.8 * len(shown)), sharex=True)
    for run in runs:
        origin = run.retention_from - run.started
        for axis, name in zip(axes, shown, strict=True):
            axis.plot([s["t"] - origin for s in run.samples], [s[name] for s in run.samples], label=run.variant)
    for axis, name in zip(axes, shown, strict=True):
        axis.axvline(0, color="grey", linestyle="--")
        if runs:
            axis.axvline(runs[0].warm_from - runs[0].retention_from, color="grey", linestyle=":")
        axis.set_ylabel(name, fontsize=8)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("seconds since retention.ms was set (dashed); dotted: steady phase from")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
