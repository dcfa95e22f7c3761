"""`diskless bench run --tiny`: a seconds-long run writes a valid results.json with every system; the replicated
system (three nodes on a real etcd) against one node, and its failovers with nothing acknowledged lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.py_spy import summarise

REPO = Path(__file__).resolve().parent.parent
# The single-node systems; coordinator-replicated has a test of its own below.
SYSTEMS = {"coordinator", "coordinator-sequential", "raw-apsw", "postgres", "postgres-simple"}
ROW_FIELDS = {"scenario", "system", "commits_per_s", "batches_per_s", "p50_ms", "p99_ms", "p999_ms", "cpu_s_per_batch"}
TINY_RUN_TIMEOUT_S = 240
TINY_KILLS = 2


@pytest.mark.slow
def test_tiny_run_writes_results_for_every_system(tmp_path: Path) -> None:
    out = tmp_path / "results"
    # --no-install: the test never runs apt-get; without PostgreSQL only the two PostgreSQL peers are skipped.
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "bench", "run", "--tiny", "--no-install", "--out", str(out),
         "--systems", ",".join(sorted(SYSTEMS))],
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
            # From the intended send time, never less than from the send (bench/driver.py); closed loop: no lag.
            assert row["p99_ms"] >= row["commit_p99_from_send_ms"] and row["send_lag_p99_ms"] >= 0, row
            if row["level"] == "max":
                assert row["send_lag_max_ms"] == 0, row
    assert document["load"]["commits_in_flight_per_broker"] == 1
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


@pytest.mark.slow
def test_tiny_replicated_run_compares_three_nodes_with_one_and_loses_nothing_acknowledged_over_its_kills(
    tmp_path: Path,
) -> None:
    out = tmp_path / "results"
    # Real etcd (the README's test command installs it), three `diskless serve` nodes, kill -9 and restarts.
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "bench", "run", "--tiny", "--no-install", "--out", str(out),
         "--systems", "coordinator,coordinator-replicated", "--kills", str(TINY_KILLS)],
        cwd=REPO, capture_output=True, text=True, timeout=TINY_RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "results.json").read_text())
    assert not document["notes"], document["notes"]
    rows = {(row["system"], row["scenario"]): row for row in document["rows"]}
    for system in ("coordinator", "coordinator-replicated"):
        for scenario in ("100x100 max", "100x100 half"):
            row = rows[(system, scenario)]
            assert row["batches_per_s"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0, row
            assert row["cpu_s_per_batch"] > 0 and row["fsyncs_per_commit"] > 0, row
    for scenario in ("find-batches", "find-batches @ one replica"):  # readers on every node serve them
        row = rows[("coordinator-replicated", scenario)]
        assert row["find_calls_per_s"] > 0 and row["cpu_s_per_find_call"] > 0, row
    assert document["replicated"]["nodes"] == 3
    assert document["replicated"]["settings"]["diskless.coordinator.replication.factor"] == "3"

    failover = document["failover"]["coordinator-replicated"]
    assert len(failover["kills"]) == TINY_KILLS == failover["commit_s"]["count"]
    for kill in failover["kills"]:
        # The new leader serves once the killed node's session is gone: revoked by a follower whose connects to its
        # port were refused (coordinator/cluster/peer_death.py), well before the 2 s it would take to lapse. It is
        # seen serving by polling (every 50 ms, and a DescribeCoordinators round): a commit queued behind its
        # elected log may be answered at the moment its reads open, a poll before the harness sees it.
        assert 0.0 < kill["leader_ready_s"] <= kill["commit_s"] + 0.25 and kill["commit_s"] < 30, kill
        assert kill["coordinators_led"] >= 1 and kill["back_in_sync_s"] > 0, kill
        # Leadership came back to the restarted node: every coordinator it prefers is led by it again.
        assert kill["leader_return_s"] >= kill["back_in_sync_s"], kill
        assert 0.0 < kill["preferred_share_returned"] <= 1.0, kill
    assert [k["coordinator_id"] for k in failover["kills"]] == [0, 1]
    commit = failover["commit_s"]
    assert commit["min"] <= commit["median"] <= commit["p90"] <= commit["max"]
    check = failover["verification"]
    assert check["lost"] == 0 and check["lost_shown"] == [], check
    assert check["acknowledged"] > TINY_KILLS and check["found"] >= check["acknowledged"], check
    assert check["offset_gaps"] == 0, check
    assert failover["load"]["commits"] > 0

    text = (out / "results.md").read_text()
    assert "| 100x100 max | " in text and "Failover: 2 kill -9s" in text and "none lost" in text
    assert "leading its preferred coordinators again" in text
    assert "| coordinator-replicated: find-batches @ one replica | " in text
    if document["plots"]:  # matplotlib (the bench extra) is there
        assert "failover.png" in document["plots"] and (out / "failover.png").stat().st_size > 0


def test_a_failover_distribution_and_a_lost_batch_are_told() -> None:
    from bench.acknowledged import AcknowledgedBatches, lost_in_partition
    from bench.failover import distribution

    figures = distribution([3.0, 1.0, 2.0, 10.0])
    assert figures == {"count": 4, "median": 2.5, "p90": 10.0, "min": 1.0, "max": 10.0, "values": [3.0, 1.0, 2.0, 10.0]}
    assert distribution([])["count"] == 0

    acknowledged = AcknowledgedBatches()
    acknowledged.add("wal/a", [(0, 0), (1, 0)])
    acknowledged.add("wal/b", [(0, 1)])
    assert acknowledged.batches == 3 and acknowledged.partitions == [0, 1]
    assert acknowledged.of_partition(0) == [(0, "wal/a"), (1, "wal/b")]
    assert lost_in_partition(0, acknowledged.of_partition(0), {0: "wal/a", 1: "wal/b"}) == []
    assert lost_in_partition(0, acknowledged.of_partition(0), {0: "wal/a", 1: "wal/c"}) == [
        "partition 0 offset 1: acknowledged in wal/b, found a batch of wal/c"
    ]
    assert lost_in_partition(1, acknowledged.of_partition(1), {}) == [
        "partition 1 offset 0: acknowledged in wal/a, found nothing"
    ]


def test_only_the_replicated_system_runs_the_failover_and_it_can_be_chosen() -> None:
    from dataclasses import replace

    from bench.run import MODES, scenario_names, scenarios_of

    quick = MODES["quick"]
    assert "failover" in scenario_names(quick)
    assert all(s.level != "failover" for _, group in scenarios_of(quick, "coordinator") for s in group)
    replicated = scenarios_of(quick, "coordinator-replicated")
    assert [n for n, _ in replicated] == [0]  # no grown states: they are one node's prebuilt state
    assert replicated[0][1][-1].name == "failover" and quick.failover_kills == 20
    assert "find-batches @ one replica" in [s.name for s in replicated[0][1]]
    assert all(s.name != "find-batches @ one replica" for _, group in scenarios_of(quick, "coordinator") for s in group)
    chosen = replace(quick, scenarios=("100x100 max", "failover"))
    assert [s.name for _, group in scenarios_of(chosen, "coordinator-replicated") for s in group] == [
        "100x100 max",
        "failover",
    ]


def test_py_spy_summary_counts_own_and_inclusive_samples_by_function_not_line() -> None:
    raw = (
        f'process 7:"python -m coordinator serve";run ({REPO}/coordinator/loop.py:10);apply (store.py:3) 3\n'
        f"run ({REPO}/coordinator/loop.py:12) 1\n"
    )
    summary = summarise(raw)
    assert summary.splitlines()[0] == "4 samples"
    own = summary.split("by own samples:")[1].split("by inclusive samples:")[0]
    inclusive = summary.split("by inclusive samples:")[1]
    assert "75.0%  apply (store.py)" in own and "25.0%  run (coordinator/loop.py)" in own
    assert "100.0%  run (coordinator/loop.py)" in inclusive and "process" not in summary


def test_the_coordinators_add_report_names_each_time_and_every_coordinators_count() -> None:
    from bench.coordinators_add import Outcome, markdown

    outcome = Outcome("host", 5.2, 0.9, 1.3, [2, 0, 1], 2, {c: 11 for c in range(9)})
    text = markdown(outcome)
    assert "loaded machine" in text and "| 0.900 |" in text and "| 1.300 |" in text and "| 5.200 |" in text
    assert "| partitions | " + " | ".join(["11"] * 9) + " |" in text
