"""The produce-gateway benchmark's table (results.md) and plot (gateways.png)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

COLUMNS = (
    ("calls_per_file", "commit calls / file", "{:.2f}"),
    ("calls_per_file_max", "max", "{:.0f}"),
    ("nodes_per_file", "leader nodes / file", "{:.2f}"),
    ("batches_per_s", "batches/s", "{:,.0f}"),
    ("p50_ms", "p50 ms", "{:.1f}"),
    ("p99_ms", "p99 ms", "{:.1f}"),
    ("server_cpu_ms_per_batch", "server CPU ms / batch", "{:.3f}"),
    ("harness_cpu_share", "harness CPU (cores)", "{:.2f}"),
)


def markdown(rows: Sequence[dict[str, object]], about: str) -> str:
    lines = [
        "# Produce gateways: brokers following them against brokers taking any partition",
        "",
        f"{about}.",
        "",
        "| brokers | cadence | brokers take | " + " | ".join(title for _, title, _ in COLUMNS) + " | calls per file |",
        "|---:|---|---|" + "---:|" * len(COLUMNS) + "---|",
    ]
    for row in rows:
        histogram = row["calls_per_file_histogram"]
        assert isinstance(histogram, dict)
        total = sum(histogram.values()) or 1
        shares = ", ".join(f"{calls}: {100 * count / total:.0f}%" for calls, count in histogram.items())
        cells = " | ".join(form.format(row[name]) for name, _, form in COLUMNS)
        lines.append(f"| {row['brokers']} | {row['cadence']} | {row['mode']} | {cells} | {shares} |")
    return "\n".join(lines) + "\n"


def plot(path: Path, rows: Sequence[dict[str, object]]) -> Path | None:
    """Commit calls per file and commit p99, per broker count and cadence, the two modes side by side."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((row["brokers"], row["cadence"]) for row in rows))
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    for offset, mode in ((-width / 2, "any"), (width / 2, "gateways")):
        by_group = {(r["brokers"], r["cadence"]): r for r in rows if r["mode"] == mode}
        positions = [i + offset for i in range(len(groups))]
        for axis, name in zip(axes, ("calls_per_file", "p99_ms"), strict=True):
            values = [float(by_group[g][name]) if g in by_group else 0.0 for g in groups]  # type: ignore[arg-type]
            axis.bar(positions, values, width, label=f"brokers take {mode}")
    labels = [f"{brokers} brokers\n{cadence}" for brokers, cadence in groups]
    for axis, title in zip(axes, ("commit calls per WAL file", "commit p99 (ms)"), strict=True):
        axis.set_xticks(range(len(groups)), labels)
        axis.set_title(title)
    handles, names = axes[0].get_legend_handles_labels()
    figure.legend(handles, names, loc="upper center", ncol=2)
    figure.tight_layout(rect=(0, 0, 1, 0.9))
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
