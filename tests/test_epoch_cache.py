"""The leader-epoch checkpoint (KIP-101/KIP-279): answers, truncations, the file, and rebuilding from the log."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.base.invariants import InvariantViolation
from coordinator.runtime.log.epoch_cache import (
    CHECKPOINT_NAME,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segments import MetadataLog
from tests.lanes import sized

BIG_SEGMENT = 2**40
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def write_log(directory: Path, frames: list[tuple[int, int]], segment_bytes: int = BIG_SEGMENT) -> MetadataLog:
    """A log of one frame per (epoch, record count), each appended in its own group."""
    log = MetadataLog(directory, segment_bytes)
    for epoch, count in frames:
        base = log.end_offset
        log.append(encode_frame(base, epoch, count, b"\x0a\x01x"), base + count, epoch)
    return log


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in pairs]


@pytest.fixture
def cache(tmp_path: Path) -> LeaderEpochCache:
    """Epochs 1 at 0, 3 at 10, 5 at 20; the log ends at 30 (epoch 2 and 4 never wrote)."""
    log = write_log(tmp_path / "log", [(1, 10), (3, 4), (3, 6), (5, 10)])
    opened = LeaderEpochCache.open(tmp_path, log)
    assert opened.entries() == entries((1, 0), (3, 10), (5, 20))
    return opened


# ---------------------------------------------------------------------- end_offset_for


def test_end_offset_for_a_known_epoch_is_the_next_epochs_start(cache: LeaderEpochCache) -> None:
    assert cache.end_offset_for(1, 30) == (1, 10)
    assert cache.end_offset_for(3, 30) == (3, 20)


def test_end_offset_for_the_latest_epoch_is_the_log_end(cache: LeaderEpochCache) -> None:
    assert cache.end_offset_for(5, 30) == (5, 30)


def test_end_offset_for_an_unknown_higher_epoch_is_the_latest_and_the_log_end(cache: LeaderEpochCache) -> None:
    assert cache.end_offset_for(6, 30) == (5, 30)
    assert cache.end_offset_for(2**31 - 1, 30) == (5, 30)


def test_end_offset_for_an_unknown_epoch_between_is_the_epoch_below_it(cache: LeaderEpochCache) -> None:
    """KIP-279: the follower of epoch 2 learns that the leader's epoch 1 ended at 10, and truncates there."""
    assert cache.end_offset_for(2, 30) == (1, 10)
    assert cache.end_offset_for(4, 30) == (3, 20)


def test_end_offset_for_an_epoch_below_every_known_one_is_undefined(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log", [(4, 2), (6, 1)])
    cache = LeaderEpochCache.open(tmp_path, log)
    assert cache.end_offset_for(3, 3) == UNDEFINED
    assert cache.end_offset_for(0, 3) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 3) == UNDEFINED
    assert cache.end_offset_for(4, 3) == (4, 2)


def test_empty_cache_knows_nothing(tmp_path: Path) -> None:
    cache = LeaderEpochCache.open(tmp_path, MetadataLog(tmp_path / "log", BIG_SEGMENT))
    assert cache.entries() == [] and cache.latest_epoch == UNDEFINED_EPOCH
    assert cache.end_offset_for(3, 0) == UNDEFINED


# ---------------------------------------------------------------------- assign and truncations


def test_assign_adds_new_epochs_and_is_durable(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    cache = LeaderEpochCache.open(tmp_path, log)
    cache.assign(2, 0)
    cache.assign(2, 5)  # the latest epoch already: nothing
    cache.assign(4, 7)
    assert cache.entries() == entries((2, 0), (4, 7)) and cache.latest_epoch == 4
    cache.assign(6, 7)  # epoch 4 never wrote a record: it goes, as Kafka's assign drops it
    assert cache.entries() == entries((2, 0), (6, 7))
    text = (tmp_path / CHECKPOINT_NAME).read_text().splitlines()
    assert text[:4] == ["0", "2", "2 0", "6 7"] and text[4].startswith("crc ")
    assert not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize(("epoch", "start_offset"), [(3, 10), (5, 4), (4, 9), (-1, 20), (7, -1)])
def test_assign_that_goes_back_is_refused(cache: LeaderEpochCache, epoch: int, start_offset: int) -> None:
    with pytest.raises(InvariantViolation):
        cache.assign(epoch, start_offset)
    assert cache.entries() == entries((1, 0), (3, 10), (5, 20))


def test_truncate_from_end_drops_epochs_starting_at_or_after_it(tmp_path: Path, cache: LeaderEpochCache) -> None:
    cache.truncate_from_end(25)
    assert cache.entries() == entries((1, 0), (3, 10), (5, 20))
    cache.truncate_from_end(20)
    assert cache.entries() == entries((1, 0), (3, 10))
    assert cache.end_offset_for(5, 20) == (3, 20)
    cache.truncate_from_end(5)
    assert cache.entries() == entries((1, 0))
    cache.truncate_from_end(0)
    assert cache.entries() == []
    assert (tmp_path / CHECKPOINT_NAME).read_text().splitlines()[:2] == ["0", "0"]


def test_truncate_from_start_keeps_the_epoch_holding_the_new_start(cache: LeaderEpochCache) -> None:
    cache.truncate_from_start(0)
    assert cache.entries() == entries((1, 0), (3, 10), (5, 20))
    cache.truncate_from_start(12)
    assert cache.entries() == entries((3, 12), (5, 20))
    cache.truncate_from_start(20)
    assert cache.entries() == entries((5, 20))
    cache.truncate_from_start(29)
    assert cache.entries() == entries((5, 29))
    assert cache.end_offset_for(3, 30) == UNDEFINED


def test_changes_survive_a_reopen(tmp_path: Path, cache: LeaderEpochCache) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    cache.truncate_from_start(12)
    cache.assign(5, 20)
    assert LeaderEpochCache.open(tmp_path, log).entries() == entries((3, 12), (5, 20))


# ---------------------------------------------------------------------- the file against the log


def test_missing_or_unreadable_file_is_rebuilt_from_the_log(tmp_path: Path, cache: LeaderEpochCache) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    path = tmp_path / CHECKPOINT_NAME
    good = path.read_bytes()
    damaged = [
        b"",
        good.replace(b"3 10", b"3 11"),  # the checksum no longer matches
        good[:-4],
        b"7\n0\n" + good[4:],
        b"0\n1\n1 0\n" + b"crc 00000000\n",
    ]
    for content in [None, *damaged]:
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content)
        assert LeaderEpochCache.open(tmp_path, log).entries() == entries((1, 0), (3, 10), (5, 20))
        assert path.read_bytes() == good, "the rebuilt checkpoint is written"


def test_entries_past_the_log_end_are_dropped_at_open(tmp_path: Path, cache: LeaderEpochCache) -> None:
    """The log was truncated after the checkpoint was written, and a crash lost the checkpoint's truncation."""
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    cache.assign(7, 30)  # assigned when a leader took over; its first append never reached the log
    log.truncate_to(20)
    reopened = LeaderEpochCache.open(tmp_path, log)
    assert reopened.entries() == entries((1, 0), (3, 10))
    assert LeaderEpochCache.open(tmp_path, log).entries() == entries((1, 0), (3, 10))


def test_checkpoint_behind_the_log_is_rebuilt(tmp_path: Path, cache: LeaderEpochCache) -> None:
    """Frames of a new epoch reached the log; a crash lost the checkpoint write that recorded it."""
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    log.append(encode_frame(30, 8, 2, b"\x0a\x01x"), 32, 8)
    assert LeaderEpochCache.open(tmp_path, log).entries() == entries((1, 0), (3, 10), (5, 20), (8, 30))


def test_rebuild_starts_at_the_log_start(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log", [(1, 3), (1, 3), (2, 3), (2, 3), (4, 3), (4, 3)], segment_bytes=60)
    log.delete_segments_below(9)
    start = log.position().start_offset
    assert 0 < start <= 9
    cache = LeaderEpochCache.open(tmp_path, log)
    first_epoch = 1 if start < 6 else 2
    expected = [EpochEntry(first_epoch, start), *(e for e in entries((2, 6), (4, 12)) if e.start_offset > start)]
    assert cache.entries() == expected


def test_snapshot_install_then_new_epoch(tmp_path: Path, cache: LeaderEpochCache) -> None:
    """After `replace_with_empty` the log is empty: an open keeps no entry, the next append's epoch starts one."""
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    log.replace_with_empty(100)
    cache.truncate_from_start(100)
    assert cache.entries() == entries((5, 100))
    assert LeaderEpochCache.open(tmp_path, log).entries() == []
    log.append(encode_frame(100, 6, 1, b"\x0a\x01x"), 101, 6)
    assert LeaderEpochCache.open(tmp_path, log).entries() == entries((6, 100))


# ---------------------------------------------------------------------- property: the answer is the log's


def _scan_answer(frames: list[tuple[int, int, int]], epoch: int, log_end: int) -> tuple[int, int]:
    """end_offset_for computed from the frames themselves: (base, count, epoch) per frame."""
    below = [f for f in frames if f[2] <= epoch]
    if not below:
        return UNDEFINED
    found = max(f[2] for f in below)
    later = [f[0] for f in frames if f[2] > found]
    return found, min(later) if later else log_end


@settings(max_examples=sized(60, 20), deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=0, max_size=25),
    truncate_frames=st.integers(0, 10),
)
def test_end_offset_for_matches_a_scan_of_the_log(steps: list[tuple[int, int]], truncate_frames: int) -> None:
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        log = MetadataLog(directory / "log", 200)
        cache = LeaderEpochCache.open(directory, log)
        frames: list[tuple[int, int, int]] = []
        epoch = 0
        for epoch_step, count in steps:
            epoch += epoch_step
            base = log.end_offset
            cache.assign(epoch, base)  # as a leader does before it appends
            log.append(encode_frame(base, epoch, count, b"\x0a\x01x"), base + count, epoch)
            frames.append((base, count, epoch))
        if truncate_frames and frames:  # a follower's truncation: log first, then the cache
            kept = frames[: max(0, len(frames) - truncate_frames)]
            cut = kept[-1][0] + kept[-1][1] if kept else 0
            log.truncate_to(cut)
            cache.truncate_from_end(cut)
            frames = kept
        log_end = log.end_offset
        for current in (cache, LeaderEpochCache.open(directory, log)):
            for asked in range(-1, epoch + 3):
                assert current.end_offset_for(asked, log_end) == _scan_answer(frames, asked, log_end), asked
        (directory / CHECKPOINT_NAME).unlink()
        assert LeaderEpochCache.open(directory, log).entries() == cache.entries()
        log.close()
