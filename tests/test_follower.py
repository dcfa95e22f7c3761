"""The follower's truncation rule (KIP-279), as a pure function, and the run that found it missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.runtime.replication.follower import divergence_end
from tests.test_simulation import _run


def test_a_follower_truncates_to_the_leaders_end_of_the_epoch_when_it_holds_more_of_it() -> None:
    # Both hold epoch 4; the leader's ends at 31, the follower wrote on to 35 in it (never committed).
    assert divergence_end(4, 31, own_epoch=4, own_end_offset=35, applied=20) == 31


def test_a_follower_truncates_where_its_unknown_epoch_began_even_when_the_leaders_epoch_ends_at_its_log_end() -> None:
    # The follower's epoch 5 (25..31) never reached the leader, whose epoch 4 ends at 31, the follower's log end:
    # the leader's end alone truncates nothing and every fetch diverges again (seed 1022 spun there for ever).
    assert divergence_end(4, 31, own_epoch=4, own_end_offset=25, applied=20) == 25


def test_a_follower_whose_epochs_the_leader_never_had_keeps_only_what_is_committed() -> None:
    assert divergence_end(-1, -1, own_epoch=4, own_end_offset=25, applied=20) == 20
    assert divergence_end(3, 18, own_epoch=-1, own_end_offset=-1, applied=12) == 12


@pytest.mark.slow
def test_the_run_where_a_deposed_leaders_epoch_ended_where_the_new_leaders_did_converges(tmp_path: Path) -> None:
    """Seed 1022 of the simulated cluster looped for ever, fetching and diverging, before the rule above."""
    report = _run(tmp_path, 1022, 1000)
    assert report.acknowledged > 0
