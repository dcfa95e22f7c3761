"""`diskless bench compare REV`: the node of a git revision against the working tree's, alternately, on this machine.

    diskless bench compare REV [--scenarios "100x100 max,small max,100x100 half,find-batches"] [--rounds 3]
                               [--out DIR] [--set NAME=VALUE] [--coordinators N] [--json] [--tiny | --full]

REV (a sha, a branch, HEAD~3) is extracted once into a cache outside the checkout (bench/revision_tree.py)
and reused. Each round runs the chosen scenarios of `diskless bench run` (bench/run.py) against a `diskless
serve` node started from REV's tree and one from the working tree, the baseline first in even rounds and the
working tree first in odd ones; the harness and the load driver are this tree's for both sides (only the
node's process, its cwd and PYTHONPATH, come from each tree). A round has two parts: the `max` scenarios on
one node per side, then the `half` and find-batches scenarios on a fresh node per side, at half the lower of
the two sides' maxima of that round, so that a p99 at half load is taken at the same rate on both sides.
The output is each figure's median per side over the rounds and current/baseline per round (its median and
min-max), on stdout (or the JSON with --json) and in results.md and results.json under --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.compare_report import (
    BASELINE,
    CURRENT,
    comparison_json,
    comparisons,
    markdown,
    round_order,
    shared_max_rates,
)
from bench.coordinator_system import REPO
from bench.report import load_average, machine
from bench.revision_tree import (
    Revision,
    RevisionProblem,
    cache_root,
    check_imports,
    describe_working_tree,
    materialise,
    resolve_revision,
)
from bench.run import MODES, RunConfig, progress_printer, run_system, scenarios_of

SCENARIOS_DEFAULT = ("100x100 max", "small max", "100x100 half", "find-batches")
ROUNDS_DEFAULT = 3
ROUNDS_MAX = 50  # a bound on a command left running: 50 quick rounds take about an hour
SYSTEM = "coordinator"  # bench.run's single node with group commit, the system compared
COMPARED_LEVELS = ("max", "half", "find")
OUT_ROOT = REPO / "bench" / "results" / "compare"

Progress = Callable[[str], None]


class CompareProblem(Exception):
    """Bad flags (unknown or unsupported scenarios, a bad --set, rounds out of range): exit 2."""


@dataclass(frozen=True, slots=True)
class Plan:
    """The chosen scenarios split in a round's two parts, in the order shown."""

    maxima: tuple[str, ...]  # each side as fast as it goes
    shared_rate: tuple[str, ...]  # half and find-batches: at rates taken from both sides' maxima
    levels: dict[str, str]  # scenario -> level
    added: tuple[str, ...] = ()  # max scenarios run only because a chosen half scenario needs its maximum

    @property
    def shown(self) -> list[tuple[str, str]]:
        return [(name, self.levels[name]) for name in (*self.maxima, *self.shared_rate)]


def plan_scenarios(chosen: Sequence[str], config: RunConfig) -> Plan:
    """The plan of `chosen` in `config`'s mode; CompareProblem for a name the mode lacks or that is not compared
    (grown states are built by this tree's code, and the common rate needs the PostgreSQL peer)."""
    empty_state = next((group for live, group in scenarios_of(replace(config, scenarios=())) if live == 0), [])
    comparable = {s.name: s for s in empty_state if s.level in COMPARED_LEVELS}
    unknown = [name for name in chosen if name not in comparable]
    if unknown or not chosen:
        raise CompareProblem(f"unknown or uncompared scenarios {unknown}; choose from {', '.join(comparable)}")
    ordered = list(dict.fromkeys(chosen))
    maxima = [name for name in ordered if comparable[name].level == "max"]
    added = []
    for name in ordered:
        needed = f"{comparable[name].shape} max"
        if comparable[name].level == "half" and needed not in maxima:
            maxima.append(needed)
            added.append(needed)
    return Plan(
        tuple(maxima), tuple(name for name in ordered if comparable[name].level != "max"),
        {name: scenario.level for name, scenario in comparable.items()}, tuple(added),
    )  # fmt: skip


@dataclass(slots=True)
class RoundResult:
    order: tuple[str, str]
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {BASELINE: [], CURRENT: []})
    shared_max_commits_per_s: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def run_round(
    index: int, trees: dict[str, Path], plan: Plan, config: RunConfig, scratch: Path, progress: Progress
) -> RoundResult:
    started = time.monotonic()
    result = RoundResult(round_order(index))
    # First each side's maxima, then the loads both sides share, at rates taken from those maxima.
    for part, shared in ((plan.maxima, False), (plan.shared_rate, True)):
        if not part:
            continue
        if shared:
            result.shared_max_commits_per_s = shared_max_rates(result.rows)
        for side in result.order:
            side_config = replace(config, scenarios=part, server_tree=str(trees[side]))
            done = run_system(SYSTEM, side_config, scratch, install=False,
                              progress=_labelled(progress, f"round {index + 1} {side:<8}"),
                              known_max_rates=result.shared_max_commits_per_s if shared else None)  # fmt: skip
            result.rows[side] += done.rows
    result.seconds = time.monotonic() - started
    return result


def _labelled(progress: Progress, label: str) -> Progress:
    return lambda message: progress(f"{label} {message}")


def _config(args: argparse.Namespace) -> RunConfig:
    mode = "tiny" if args.tiny else "full" if args.full else "quick"
    overrides = []
    for pair in args.set:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CompareProblem(f"--set takes NAME=VALUE, got {pair!r}")
        overrides.append((name, value))
    if args.coordinators is not None and args.coordinators < 1:
        raise CompareProblem("--coordinators takes a count >= 1")
    if not 1 <= args.rounds <= ROUNDS_MAX:
        raise CompareProblem(f"--rounds takes 1 to {ROUNDS_MAX}")
    config = MODES[mode]
    return replace(config, coordinators=args.coordinators or config.coordinators,
                   coordinator_settings=tuple(overrides))  # fmt: skip


def _chosen(args: argparse.Namespace, config: RunConfig) -> list[str]:
    if args.scenarios:
        return [name.strip() for name in args.scenarios.split(",") if name.strip()]
    # The default four where the mode has them (the tiny mode has no `small` shape).
    available = {s.name for _, group in scenarios_of(replace(config, scenarios=())) for s in group}
    return [name for name in SCENARIOS_DEFAULT if name in available]


@dataclass(frozen=True, slots=True)
class Sides:
    baseline: Revision
    trees: dict[str, Path]  # side -> the tree its node runs from
    current: Revision | None = None  # None: the working tree, as it is (uncommitted changes included)


def _revision_tree(asked: str, progress: Progress) -> tuple[Revision, Path]:
    revision = resolve_revision(REPO, asked)
    tree, reused = materialise(REPO, revision, cache_root())
    progress(f"{asked} is {revision.sha}: its tree {'reused from' if reused else 'extracted to'} {tree}")
    check_imports(tree)
    return revision, tree


def _prepare(args: argparse.Namespace, progress: Progress) -> tuple[Sides, RunConfig, Plan]:
    config = _config(args)
    plan = plan_scenarios(_chosen(args, config), config)
    baseline, baseline_tree = _revision_tree(args.revision, progress)
    current, current_tree = _revision_tree(args.current, progress) if args.current else (None, REPO)
    return Sides(baseline, {BASELINE: baseline_tree, CURRENT: current_tree}, current), config, plan


def _document(
    args: argparse.Namespace, sides: Sides, config: RunConfig, plan: Plan, rounds: list[RoundResult],
    load_before: str,
) -> dict[str, Any]:  # fmt: skip
    baseline, current = sides.baseline, sides.current
    if current is None:
        working = describe_working_tree(REPO)
        current_side = {"tree": str(REPO), "head": working.head, "uncommitted_changes": working.uncommitted_changes}
    else:
        current_side = {"asked": current.asked, "sha": current.sha, "short": current.short,
                        "tree": str(sides.trees[CURRENT])}  # fmt: skip
    kept = ("mode", "brokers", "warmup_s", "window_s", "windows", "coordinators", "coordinator_settings",
            "duplicate_share")  # fmt: skip
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "arguments": {
            name: str(value) if isinstance(value, Path) else value
            for name, value in vars(args).items()
            if not callable(value)
        },
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "baseline": {
            "asked": baseline.asked,
            "sha": baseline.sha,
            "short": baseline.short,
            "tree": str(sides.trees[BASELINE]),
        },
        "current": current_side,
        "config": {name: value for name, value in asdict(config).items() if name in kept},
        "scenarios": [name for name, _ in plan.shown],
        "added_for_half": list(plan.added),
        "rounds": [
            {
                "order": list(r.order),
                "seconds": round(r.seconds, 1),
                "shared_max_commits_per_s": r.shared_max_commits_per_s,
                "rows": r.rows,
            }
            for r in rounds
        ],
        "comparisons": [comparison_json(c) for c in comparisons(plan.shown, [r.rows for r in rounds])],
    }


def _write(out: Path, document: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "results.md").write_text(markdown(document))


def run(args: argparse.Namespace) -> int:
    """Compares; 2 on bad flags or a revision that cannot run, 1 if a round failed (the rounds before it are kept)."""
    progress = progress_printer()
    try:
        sides, config, plan = _prepare(args, progress)
    except (CompareProblem, RevisionProblem) as problem:
        print(f"diskless bench compare: {problem}", file=sys.stderr)
        return 2
    current_name = sides.current.short if sides.current else "worktree"
    out: Path = args.out or OUT_ROOT / f"{sides.baseline.short}-vs-{current_name}"
    load_before = load_average()
    progress(
        f"{sides.baseline.short} (baseline) against {sides.trees[CURRENT]}: {args.rounds} rounds of "
        f"{', '.join(name for name, _ in plan.shown)} ({config.mode}); load average {load_before} on "
        f"{os.cpu_count()} cores" + (f"; {', '.join(plan.added)} added for the half load" if plan.added else "")
    )
    rounds: list[RoundResult] = []
    with tempfile.TemporaryDirectory(prefix="diskless-compare-") as scratch:
        for index in range(args.rounds):
            try:
                rounds.append(run_round(index, sides.trees, plan, config, Path(scratch), progress))
            except RuntimeError as error:
                progress(f"round {index + 1} failed: {error}")
                return 1
            # Written after every round: an interrupted or failed comparison keeps the rounds it finished.
            _write(out, _document(args, sides, config, plan, rounds, load_before))
            progress(f"round {index + 1} of {args.rounds} took {rounds[-1].seconds:.0f} s")
    document = json.loads((out / "results.json").read_text())
    print(json.dumps(document, indent=2) if args.json else markdown(document))
    progress(f"wrote {out}/results.json and results.md")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("revision", metavar="REV", help="the baseline: any git revision (sha, branch, HEAD~3)")
    parser.add_argument(
        "--scenarios",
        metavar="NAME[,NAME]",
        help=f"comma-separated scenarios of the mode (default: {','.join(SCENARIOS_DEFAULT)}); a half scenario "
        "brings its shape's max",
    )
    parser.add_argument(
        "--current",
        metavar="REV2",
        help="run the current side from this revision's tree too, not the working tree (two commits of a bisection)",
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS_DEFAULT, help=f"alternating rounds (default {ROUNDS_DEFAULT})"
    )
    parser.add_argument("--out", type=Path, help=f"output directory (default {OUT_ROOT}/<short sha>-vs-worktree)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a node setting for both sides (repeatable)")  # fmt: skip
    parser.add_argument("--coordinators", type=int, help="coordinators of each node (default 8; tiny 2)")
    parser.add_argument("--json", action="store_true", help="print results.json instead of the table")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--tiny", action="store_true", help="seconds-long windows (tests)")
    size.add_argument("--full", action="store_true", help="bench run --full's longer windows")
