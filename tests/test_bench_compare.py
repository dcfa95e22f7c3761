"""`diskless bench compare REV`: the rounds alternate which side goes first, ratios are taken per round with their
spread, the half load is one rate for both sides, a revision that is not one (or whose tree does not import) is a
usage error (exit 2), and a tiny comparison of HEAD against the working tree runs end to end in a git repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.cli import main
from bench.compare import CompareProblem, plan_scenarios
from bench.compare_report import (
    BASELINE,
    CURRENT,
    Comparison,
    Spread,
    compare_values,
    comparison_json,
    comparison_table,
    comparisons,
    markdown,
    round_order,
    shared_max_rates,
)
from bench.revision_tree import Revision, RevisionProblem, check_imports, materialise, resolve_revision
from bench.run import MODES

REPO = Path(__file__).resolve().parent.parent
COMPARE_TIMEOUT_S = 180
GIT_IDENTITY = ("-c", "user.name=bench test", "-c", "user.email=bench@test.invalid")


def _git_repository(path: Path, files: dict[str, str]) -> str:
    """A repository at `path` with one commit of `files`; its sha."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), *GIT_IDENTITY, "commit", "-q", "-m", "one"], check=True)
    done = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_rounds_alternate_which_side_goes_first_and_each_round_runs_both() -> None:
    orders = [round_order(i) for i in range(4)]
    assert [order[0] for order in orders] == [BASELINE, CURRENT, BASELINE, CURRENT]
    assert all(sorted(order) == sorted((BASELINE, CURRENT)) for order in orders)


def test_the_ratio_is_taken_per_round_with_its_spread_and_a_zero_baseline_has_none() -> None:
    baseline, current, ratio = compare_values([100.0, 200.0, 400.0], [50.0, 200.0, 480.0])
    assert baseline == Spread(200.0, 100.0, 400.0)
    assert current == Spread(200.0, 50.0, 480.0)
    # Per round 0.5, 1.0 and 1.2: their median, not the ratio of the medians (200/200 = 1.0 by chance here).
    assert ratio == Spread(1.0, 0.5, 1.2)
    _, _, ratio = compare_values([0.0, 10.0], [5.0, 30.0])
    assert ratio == Spread(3.0, 3.0, 3.0)  # the round that measured nothing on the baseline has no ratio
    assert compare_values([0.0], [5.0])[2] is None
    with pytest.raises(ValueError, match="rounds"):
        compare_values([1.0], [1.0, 2.0])


def test_the_half_load_of_a_round_is_half_the_lower_of_both_sides_maxima() -> None:
    rows = {
        BASELINE: [{"level": "max", "shape": "100x100", "commits_per_s": 120.0},
                   {"level": "max", "shape": "small", "commits_per_s": 2000.0}],
        CURRENT: [{"level": "max", "shape": "100x100", "commits_per_s": 95.5},
                  {"level": "half", "shape": "small", "commits_per_s": 900.0}],
    }  # fmt: skip
    # `small` has one side's maximum only: no shared rate for it (its half load would not be comparable).
    assert shared_max_rates(rows) == {"100x100": 95.5}


def _row(scenario: str, level: str, **figures: float) -> dict[str, Any]:
    return {"scenario": scenario, "level": level, "shape": "100x100", **figures}


def test_figures_are_the_commit_ones_or_the_find_ones_cpu_in_microseconds() -> None:
    commit = {"batches_per_s": 10_000.0, "cpu_s_per_batch": 80e-6, "p50_ms": 10.0, "p99_ms": 40.0}
    find = {"find_calls_per_s": 400.0, "cpu_s_per_find_call": 3e-3, "p50_ms": 2.0, "p99_ms": 9.0}
    rounds = [
        {BASELINE: [_row("100x100 max", "max", **commit), _row("find-batches", "find", **find)],
         CURRENT: [_row("100x100 max", "max", **{**commit, "batches_per_s": 8_000.0, "cpu_s_per_batch": 100e-6}),
                   _row("find-batches", "find", **{**find, "find_calls_per_s": 300.0})]},
    ]  # fmt: skip
    found = {(c.scenario, c.figure): c for c in comparisons([("100x100 max", "max"), ("find-batches", "find")], rounds)}
    assert len(found) == 8
    batches = found[("100x100 max", "batches/s")]
    assert batches.higher_is_better and batches.ratio == Spread(0.8, 0.8, 0.8)
    cpu = found[("100x100 max", "server CPU µs/batch")]
    assert not cpu.higher_is_better and cpu.baseline.median == pytest.approx(80.0)
    assert cpu.ratio is not None and cpu.ratio.median == pytest.approx(1.25)
    assert found[("find-batches", "FindBatches calls/s")].ratio == Spread(0.75, 0.75, 0.75)
    assert found[("find-batches", "server CPU µs/call")].current.median == pytest.approx(3000.0)
    document = {
        "date": "today", "load_average_before": "1.0 1.0 1.0", "load_average_after": "2.0 1.0 1.0",
        "machine": {"cores": 2, "cpu": "a CPU", "memory_gib": 1.0, "kernel": "6", "python": "3.11", "sqlite": "3"},
        "config": {"mode": "quick", "brokers": 16, "windows": 3, "window_s": 2.0, "warmup_s": 1.0,
                   "coordinators": 8, "coordinator_settings": []},
        "baseline": {"asked": "e3c3b08", "short": "e3c3b08"},
        "current": {"head": "0" * 40, "uncommitted_changes": True},
        "rounds": [{"order": [BASELINE, CURRENT], "seconds": 60.0, "shared_max_commits_per_s": {"100x100": 80.0}}],
        "comparisons": [comparison_json(c) for c in found.values()],
    }  # fmt: skip
    text = markdown(json.loads(json.dumps(document)))
    # One round: the values alone, no spread.
    assert "| 100x100 max | batches/s ↑ | 10,000 | 8,000 | 0.80x worse |" in text
    assert "| 100x100 max | server CPU µs/batch ↓ | 80.0 | 100 | 1.25x worse |" in text
    assert "| find-batches | FindBatches p50 ms ↓ | 2.00 | 2.00 | 1.00x |" in text  # no verdict at 1.00x
    assert "commits/s per round: 100x100 40.0" in text and "uncommitted changes" in text
    # --current: the current side is another revision, named as asked.
    document["current"] = {"asked": "main~2", "sha": "a" * 40, "short": "a" * 7}
    text = markdown(json.loads(json.dumps(document)))
    assert "`e3c3b08` (baseline) against `main~2` (aaaaaaa)" in text
    assert "| scenario | figure | `e3c3b08` | `main~2` (aaaaaaa) | `main~2` (aaaaaaa) / `e3c3b08` |" in text


def test_several_rounds_show_each_sides_spread_and_the_per_round_ratios_spread() -> None:
    baseline, current, ratio = compare_values([100.0, 50.0, 80.0], [90.0, 60.0, 80.0])
    table = comparison_table([Comparison("100x100 max", "batches/s", True, baseline, current, ratio)], "old", "new")
    assert table[-1] == "| 100x100 max | batches/s ↑ | 80.0 (50.0-100) | 80.0 (60.0-90.0) | 1.00x (0.90-1.20) |"
    lower = Comparison("find-batches", "p99 ms", False, baseline, current, Spread(0.9, 0.8, 1.1))
    assert comparison_table([lower], "old", "new")[-1].endswith("| 0.90x (0.80-1.10) better |")


def test_a_half_scenario_brings_its_maximum_and_grown_or_peer_scenarios_are_refused() -> None:
    quick = MODES["quick"]
    plan = plan_scenarios(["find-batches", "100x100 half", "small max"], quick)
    assert plan.maxima == ("small max", "100x100 max") and plan.added == ("100x100 max",)
    assert plan.shared_rate == ("find-batches", "100x100 half")
    for refused in (["100x100 max @1M live"], ["100x100 @ peer's half"], ["small max"], []):
        with pytest.raises(CompareProblem):
            plan_scenarios(refused, MODES["tiny"] if refused == ["small max"] else quick)


def test_an_unknown_revision_is_a_usage_error_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "no-such-revision-anywhere", "--tiny"]) == 2
    assert "unknown revision 'no-such-revision-anywhere'" in capsys.readouterr().err
    assert main(["compare", "HEAD", "--tiny", "--scenarios", "small max"]) == 2
    assert "small max" in capsys.readouterr().err
    assert main(["compare", "HEAD", "--rounds", "0"]) == 2
    assert "--rounds" in capsys.readouterr().err
    with pytest.raises(RevisionProblem, match="not a revision"):
        resolve_revision(REPO, "--all")


def test_a_revision_is_extracted_once_and_a_tree_that_does_not_import_is_refused(tmp_path: Path) -> None:
    sha = _git_repository(tmp_path / "repo", {"coordinator/__init__.py": "raise ImportError('broken here')\n"})
    revision = resolve_revision(tmp_path / "repo", "HEAD")
    assert revision == Revision("HEAD", sha)
    with pytest.raises(RevisionProblem, match="unknown revision 'HEAD~1'"):
        resolve_revision(tmp_path / "repo", "HEAD~1")
    tree, reused = materialise(tmp_path / "repo", revision, tmp_path / "cache")
    assert tree == tmp_path / "cache" / sha and not reused
    assert (tree / "coordinator" / "__init__.py").read_text().startswith("raise ImportError")
    assert materialise(tmp_path / "repo", revision, tmp_path / "cache") == (tree, True)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [sha]  # no .part directory left behind
    with pytest.raises(RevisionProblem, match="broken here"):
        check_imports(tree)


def _copy_of_this_tree(destination: Path) -> None:
    """This tree's files as they are (uncommitted changes included), committed in a new repository."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    subprocess.run(["git", "init", "-q", str(destination)], check=True)
    subprocess.run(["git", "-C", str(destination), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(destination), *GIT_IDENTITY, "commit", "-q", "-m", "tree"], check=True)


@pytest.mark.slow
def test_a_tiny_comparison_of_head_against_the_working_tree_writes_every_figure(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    _copy_of_this_tree(clone)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "bench", "compare", "HEAD", "--rounds", "1", "--tiny", "--out", str(out)],
        cwd=clone, capture_output=True, text=True, timeout=COMPARE_TIMEOUT_S,
        env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "results.json").read_text())
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert document["baseline"]["sha"] == head.strip()
    assert Path(document["baseline"]["tree"]) == tmp_path / "cache" / "diskless-bench" / "trees" / head.strip()
    assert document["current"]["tree"] == str(clone)
    assert [r["order"] for r in document["rounds"]] == [[BASELINE, CURRENT]]
    shared = document["rounds"][0]["shared_max_commits_per_s"]["100x100"]
    maxima = [r["commits_per_s"] for side in (BASELINE, CURRENT) for r in document["rounds"][0]["rows"][side]
              if r["level"] == "max"]  # fmt: skip
    assert shared == min(maxima)
    # Both sides' half load was asked at the same rate: half the lower maximum.
    for side in (BASELINE, CURRENT):
        (half,) = [r for r in document["rounds"][0]["rows"][side] if r["scenario"] == "100x100 half"]
        assert half["target_commits_per_s"] == pytest.approx(shared / 2, abs=0.06)
    figures = {(c["scenario"], c["figure"]) for c in document["comparisons"]}
    assert len(figures) == 12 and {s for s, _ in figures} == {"100x100 max", "100x100 half", "find-batches"}
    for comparison in document["comparisons"]:
        assert comparison["ratio"] is not None and comparison["ratio"]["median"] > 0, comparison
    assert "| 100x100 max | batches/s ↑ |" in done.stdout
    assert (out / "results.md").read_text() == done.stdout.removesuffix("\n")
