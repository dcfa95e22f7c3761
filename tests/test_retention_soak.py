"""`python -m bench.retention_soak`, a few seconds of its three variants side by side: the brokers keep their schedule,
retention and the simulated tiered copier bound the live batches (the control keeps them all), the file workers
delete the WAL objects, and the figures are written (issue #28's soak; the full run's figures: docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import retention_soak

RATE = 400  # batches/s
RETENTION_MS = 800


@pytest.mark.slow
def test_a_short_soak_of_both_variants_stays_bounded(tmp_path: Path) -> None:
    retention_soak.main([
        "--retention-ms", str(RETENTION_MS), "--periods", "4", "--baseline-seconds", "1.5", "--rate", str(RATE),
        "--output", str(tmp_path),
    ])  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    by_variant = {v["variant"]: v for v in summary["variants"]}
    assert set(by_variant) == {"retention", "tiered", "control"}
    control = by_variant.pop("control")
    # The control removes nothing: it keeps every batch committed.
    assert control["series"]["live_batches"]["median"] > RATE * RETENTION_MS / 1000 * 2
    for variant in by_variant.values():
        series = variant["series"]
        assert series["batches_per_s"]["median"] == pytest.approx(RATE, rel=0.2)  # the fixed schedule was kept
        # Commits went on for 5 s at 400/s (2,000 batches, 200 WAL objects): only the last retention's remain.
        assert 0 < series["live_batches"]["median"] < RATE * RETENTION_MS / 1000 * 1.5
        assert 0 < series["object_files"]["median"] < 150  # the file workers deleted the others
        assert variant["commits"]["steady"]["commits"] > 0
        assert variant["commits"]["control_same_window"]["commits"] > 0
        assert (tmp_path / f"samples-{variant['variant']}.csv").stat().st_size > 0
    tiered = by_variant["tiered"]["copier"]
    assert tiered["errors"] == {}
    assert tiered["offloaded_batches"] > 0 and tiered["expired_batches"] > 0
    # Offload keeps only the last local retention (half of retention.ms) of batches here.
    assert by_variant["tiered"]["series"]["live_batches"]["median"] < RATE * RETENTION_MS / 2000 * 1.5
    assert (tmp_path / "soak.png").stat().st_size > 0
