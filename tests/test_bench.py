"""`diskless bench run --tiny`: a seconds-long run writes a valid results.json with every system."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SYSTEMS = {"coordinator", "coordinator-sequential", "raw-apsw", "postgres", "postgres-simple"}
ROW_FIELDS = {"scenario", "system", "commits_per_s", "batches_per_s", "p50_ms", "p99_ms", "p999_ms", "cpu_s_per_batch"}
TINY_RUN_TIMEOUT_S = 240


def test_tiny_run_writes_results_for_every_system(tmp_path: Path) -> None:
    out = tmp_path / "results"
    # --no-install: the test never runs apt-get; without PostgreSQL only the two PostgreSQL peers are skipped.
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "bench", "run", "--tiny", "--no-install", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=TINY_RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "results.json").read_text())
    assert document["machine"]["cores"] and document["date"]
    skipped = {name for name, note in document["notes"].items() if note.startswith("skipped")}
    assert skipped <= {"postgres", "postgres-simple"}, document["notes"]
    systems = {row["system"] for row in document["rows"]}
    assert systems == SYSTEMS - skipped
    for row in document["rows"]:
        assert row.keys() >= ROW_FIELDS, row
        assert row["batches_per_s"] > 0 and row["p50_ms"] > 0, row
        if row["rpc"] == "CommitFile":
            assert row["commits_per_s"] > 0 and row["p99_ms"] >= row["p50_ms"], row
    assert {"100x100 max", "100x100 half", "find-batches"} <= {row["scenario"] for row in document["rows"]}
    assert (out / "results.md").read_text().startswith("Run `tiny`")
    for plot in document["plots"]:  # none without matplotlib (the bench extra)
        assert (out / plot).stat().st_size > 0


def test_scenarios_choose_a_subset_and_unknown_names_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from bench.cli import main
    from bench.run import FIND_SHAPE, MODES, Scenario, scenarios_of

    chosen = replace(MODES["quick"], scenarios=("find-batches", "100x100 max @1M live"))
    assert [(n, [s.name for s in group]) for n, group in scenarios_of(chosen)] == [
        (0, ["find-batches"]),
        (1_000_000, ["100x100 max @1M live"]),
    ]
    assert scenarios_of(replace(MODES["tiny"], scenarios=("find-batches",))) == [
        (0, [Scenario("find-batches", FIND_SHAPE, "find")])
    ]
    assert main(["run", "--tiny", "--scenarios", "find-batches,no such scenario"]) == 2
    assert "unknown scenarios ['no such scenario']" in capsys.readouterr().err
