"""`diskless bench compare`'s arithmetic and its table: each side's median over the rounds with its min-max,
and current/baseline as the median of the per-round ratios with their min-max. Pure functions of the rows."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

BASELINE = "baseline"
CURRENT = "current"
SIDES = (BASELINE, CURRENT)


def round_order(round_index: int) -> tuple[str, str]:
    """Which side runs first in a round: the baseline in even rounds, the current tree in odd ones, so that
    neither always has the cooler (or hotter) machine."""
    return SIDES if round_index % 2 == 0 else (CURRENT, BASELINE)


@dataclass(frozen=True, slots=True)
class Figure:
    label: str
    key: str  # the field of bench.run.row_of's row
    scale: float  # row value x scale = the value shown (seconds of CPU to µs)
    higher_is_better: bool


COMMIT_FIGURES = (
    Figure("batches/s", "batches_per_s", 1.0, True),
    Figure("server CPU µs/batch", "cpu_s_per_batch", 1e6, False),
    Figure("commit p50 ms", "p50_ms", 1.0, False),
    Figure("commit p99 ms", "p99_ms", 1.0, False),
)
# In find-batches the row's p50/p99 are FindBatches' own (bench.run.row_of).
FIND_FIGURES = (
    Figure("FindBatches calls/s", "find_calls_per_s", 1.0, True),
    Figure("server CPU µs/call", "cpu_s_per_find_call", 1e6, False),
    Figure("FindBatches p50 ms", "p50_ms", 1.0, False),
    Figure("FindBatches p99 ms", "p99_ms", 1.0, False),
)


def figures_of(level: str) -> tuple[Figure, ...]:
    return FIND_FIGURES if level == "find" else COMMIT_FIGURES


@dataclass(frozen=True, slots=True)
class Spread:
    median: float
    low: float
    high: float


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("a spread of no values")
    return Spread(statistics.median(values), min(values), max(values))


@dataclass(frozen=True, slots=True)
class Comparison:
    scenario: str
    figure: str
    higher_is_better: bool
    baseline: Spread
    current: Spread
    ratio: Spread | None  # current/baseline per round; None when no round's baseline was above 0


def compare_values(baseline: Sequence[float], current: Sequence[float]) -> tuple[Spread, Spread, Spread | None]:
    """Both sides' spreads and the per-round ratios' spread; the rounds pair the values (same index, same round).

    The ratio is taken within each round, where both sides shared the machine's state, rather than between the
    two medians; a round whose baseline value is 0 (nothing measured) has no ratio.
    """
    if len(baseline) != len(current):
        raise ValueError(f"{len(baseline)} baseline rounds against {len(current)} current ones")
    ratios = [c / b for b, c in zip(baseline, current, strict=True) if b > 0]
    return spread(baseline), spread(current), spread(ratios) if ratios else None


def shared_max_rates(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, float]:
    """Per shape, the lower of the two sides' maxima (commits/s) measured in one round: half of it is the rate
    both sides' `half` scenario is driven at, and the cap of both sides' find-batches commit load."""
    maxima: dict[str, list[float]] = {}
    for side in SIDES:
        for row in rows.get(side, ()):
            if row["level"] == "max":
                maxima.setdefault(str(row["shape"]), []).append(float(row["commits_per_s"]))
    return {shape: min(rates) for shape, rates in maxima.items() if len(rates) == len(SIDES)}


def comparisons(
    scenarios: Sequence[tuple[str, str]], rounds: Sequence[Mapping[str, Sequence[Mapping[str, Any]]]]
) -> list[Comparison]:
    """(scenario, level) in the order shown; `rounds` each side's rows per round. A scenario missing on either side
    in some round is compared over the rounds where both have it."""
    found: list[Comparison] = []
    for scenario, level in scenarios:
        pairs = []
        for rows in rounds:
            baseline = next((r for r in rows.get(BASELINE, ()) if r["scenario"] == scenario), None)
            current = next((r for r in rows.get(CURRENT, ()) if r["scenario"] == scenario), None)
            if baseline is not None and current is not None:
                pairs.append((baseline, current))
        if not pairs:
            continue
        for figure in figures_of(level):
            baseline_values = [float(b[figure.key]) * figure.scale for b, _ in pairs]
            current_values = [float(c[figure.key]) * figure.scale for _, c in pairs]
            base, now, ratio = compare_values(baseline_values, current_values)
            found.append(Comparison(scenario, figure.label, figure.higher_is_better, base, now, ratio))
    return found


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    return asdict(comparison)


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _cell(figures: Spread) -> str:
    if figures.low == figures.high:  # one round: no spread to show
        return _number(figures.median)
    return f"{_number(figures.median)} ({_number(figures.low)}-{_number(figures.high)})"


def _ratio_cell(comparison: Comparison) -> str:
    ratio = comparison.ratio
    if ratio is None:
        return "—"
    better = ratio.median > 1 if comparison.higher_is_better else ratio.median < 1
    verdict = "" if round(ratio.median, 2) == 1 else (" better" if better else " worse")
    shown = "" if ratio.low == ratio.high else f" ({ratio.low:.2f}-{ratio.high:.2f})"
    return f"{ratio.median:.2f}x{shown}{verdict}"


def comparison_table(found: Sequence[Comparison], baseline_name: str, current_name: str) -> list[str]:
    lines = [
        f"| scenario | figure | {baseline_name} | {current_name} | {current_name} / {baseline_name} |",
        "|---|---|---:|---:|---:|",
    ]
    for comparison in found:
        arrow = "↑" if comparison.higher_is_better else "↓"
        lines.append(
            f"| {comparison.scenario} | {comparison.figure} {arrow} | {_cell(comparison.baseline)} | "
            f"{_cell(comparison.current)} | {_ratio_cell(comparison)} |"
        )
    return lines


def markdown(document: Mapping[str, Any]) -> str:
    """results.md: what was compared on which machine, how the rates were chosen, and the table."""
    head = document["machine"]
    config = document["config"]
    baseline = document["baseline"]
    current = document["current"]
    rounds = document["rounds"]
    baseline_name = f"`{baseline['asked']}`" + ("" if baseline["asked"].startswith(baseline["short"]) else
                                                f" ({baseline['short']})")  # fmt: skip
    if "sha" in current:  # --current: another revision's tree
        current_name = f"`{current['asked']}`" + ("" if current["asked"].startswith(current["short"]) else
                                                  f" ({current['short']})")  # fmt: skip
    else:
        changes = ", uncommitted changes" if current["uncommitted_changes"] else ""
        current_name = f"working tree ({current['head'][:7] or 'no HEAD'}{changes})"
    seconds = ", ".join(f"{r['seconds']:.0f}" for r in rounds)
    lines = [
        f"`diskless bench compare` on {document['date']}: {baseline_name} (baseline) against {current_name}, "
        f"{len(rounds)} round{'s' if len(rounds) != 1 else ''} alternating (each round's first side: "
        f"{', '.join(r['order'][0] for r in rounds)}); rounds took {seconds} s.",
        f"Machine: {head['cores']} cores ({head['cpu']}), {head['memory_gib']} GiB, Linux {head['kernel']}, "
        f"Python {head['python']}, SQLite {head['sqlite']}; load average {document['load_average_before']} "
        f"before, {document['load_average_after']} after.",
        f"Load (`{config['mode']}`): {config['brokers']} brokers, {config['windows']} windows of "
        f"{config['window_s']} s after {config['warmup_s']} s of warm-up per scenario; node of "
        f"{config['coordinators']} coordinators"
        + "".join(f", `{name}={value}`" for name, value in config["coordinator_settings"])
        + ". The harness and load driver are the working tree's for both sides; only the node's process comes from "
        "each tree.",
    ]
    shared = [r["shared_max_commits_per_s"] for r in rounds if r["shared_max_commits_per_s"]]
    if shared:
        per_round = "; ".join(", ".join(f"{shape} {rate / 2:,.1f}" for shape, rate in rates.items())
                              for rates in shared)  # fmt: skip
        lines.append(
            "`half` scenarios are driven at one rate for both sides in a round: half the lower of the two sides' "
            f"maxima of that round (commits/s per round: {per_round}); find-batches' brokers commit at the lower of "
            "that and their 250 ms cadence, also the same for both sides."
        )
    lines += [
        "",
        "Each side: median over the rounds (min-max); the ratio: median of the per-round ratios (min-max), "
        "↑ higher is better, ↓ lower is better.",
        "",
        *comparison_table(
            [Comparison(**_spreads(c)) for c in document["comparisons"]],
            baseline_name,
            current_name if "sha" in current else "working tree",
        ),
    ]
    return "\n".join(lines) + "\n"


def _spreads(comparison: Mapping[str, Any]) -> dict[str, Any]:
    fields = dict(comparison)
    for side in ("baseline", "current", "ratio"):
        if fields[side] is not None:
            fields[side] = Spread(**fields[side])
    return fields
