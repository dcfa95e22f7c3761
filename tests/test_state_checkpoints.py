"""The state's WAL is checkpointed on a thread of its own, past its threshold, and never lost by it."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from coordinator.machine import records
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state.checkpoints import HARD_BOUND_FACTOR
from coordinator.machine.state.store import StateStore

TOPIC = b"\x02" * 16
PARTITIONS = 64
PAGE_BYTES = 4096


def _wal_pages(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size // PAGE_BYTES if wal.exists() else 0


def _fill(store: StateStore, files: int, pause: Callable[[], None] = lambda: None) -> int:
    """Commits `files` files of one batch per partition, one apply each, `pause` after each; returns the batches per
    partition."""
    store.apply([(store.applied_offset + 1, [records.partition_created(p, TOPIC, "t", p) for p in range(PARTITIONS)])])
    for n in range(files):
        batch_id = store.load_view().next_batch_id
        batches = [CommittedBatch(batch_id + p, p, 0, 10, n, n, 0, -1, -1, -1, -1, 2, 0) for p in range(PARTITIONS)]
        store.apply([(store.applied_offset + 1, [records.file_committed(n, f"wal/{n}", 10, 1, [0], 1000, batches)])])
        pause()
    return files


def _assert_all_there(path: Path, files: int) -> None:
    again = StateStore(path, 0)
    try:
        assert again.meta["live_batch_count"] == files * PARTITIONS
        (count,) = again.reader.execute("SELECT count(*) FROM batches").fetchone()
        assert count == files * PARTITIONS
    finally:
        again.close()


def test_between_applies_the_thread_checkpoints_and_the_apply_never_does(tmp_path: Path) -> None:
    """A coordinator's writer pauses between groups (the log write, other coordinators' applies): passes fit there."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=100)
    checkpoints = store._checkpoints
    assert checkpoints is not None

    def until_the_pass_ends() -> None:  # a pause long enough for the pass, however slow the machine: no sleep
        if checkpoints._running is not None:
            checkpoints._running.result()

    files = _fill(store, 100, until_the_pass_ends)  # each apply dirties pages all over the batches B-tree
    largest_wal = _wal_pages(path)
    store.close()  # waits for a running checkpoint; the writer's close is then the last one
    assert store.checkpoints_completed > 0
    assert store.checkpoints_in_apply == 0
    assert largest_wal < HARD_BOUND_FACTOR * 100, "the WAL starts over once a pass copied every frame"
    assert not path.with_name("state.sqlite-wal").exists(), "the writer's close checkpoints and removes the WAL"
    _assert_all_there(path, files)


def test_a_writer_that_never_pauses_still_has_a_bounded_wal(disk_tmp_path: Path) -> None:
    """No moment for the thread to finish: past the hard bound an apply checkpoints itself, once the pass ends.

    Counted per apply, not timed: how far the WAL grows while the thread's last pass runs depends on the machine's
    load, so the bound checked is the hard bound plus what the applies made during the longest run of applies that
    found the thread busy, and the rule is checked at every apply that found it idle past the bound. On the disk: in
    memory the thread can keep up with the applies, and the bound is never reached."""
    path = disk_tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=100)
    checkpoints = store._checkpoints
    assert checkpoints is not None
    bound = HARD_BOUND_FACTOR * 100
    seen: list[tuple[int, bool, int, int]] = []  # per apply: WAL pages, thread busy, WAL pages after, in-apply count
    written = checkpoints.written

    def observed() -> None:
        pages, running = checkpoints._wal_pages, checkpoints._running is not None and not checkpoints._running.done()
        written()
        seen.append((pages, running, checkpoints._wal_pages, checkpoints.completed_in_apply))

    checkpoints.written = observed  # type: ignore[method-assign]
    files = _fill(store, 600)  # about 80 WAL pages per apply: 48,000 pages without checkpoints
    store.close()
    assert store.checkpoints_in_apply > 0
    in_apply_before = 0
    for pages, running, after, in_apply in seen:
        if pages >= bound and not running:  # the rule: the apply that finds the thread idle checkpoints itself
            assert (after, in_apply) == (0, in_apply_before + 1), (pages, after, in_apply)
        in_apply_before = in_apply
    # Between two such applies the WAL grows only while the thread is busy: by at most the pages of the longest
    # run of applies that found it so.
    per_apply = max(later[0] - earlier[2] for earlier, later in itertools.pairwise(seen))
    longest_busy = max_run([running for _, running, _, _ in seen])
    assert max(pages for pages, _, _, _ in seen) <= bound + (longest_busy + 1) * per_apply
    _assert_all_there(path, files)


def max_run(flags: list[bool]) -> int:
    longest = current = 0
    for flag in flags:
        current = current + 1 if flag else 0
        longest = max(longest, current)
    return longest


def test_zero_leaves_checkpoints_to_sqlite_in_the_apply(tmp_path: Path) -> None:
    """0 is the baseline: SQLite's automatic checkpoint (past 1000 pages), inside the apply that passes them."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=0)
    files = _fill(store, 300)
    largest_wal = _wal_pages(path)
    store.close()
    assert store.checkpoints_completed == store.checkpoints_in_apply == 0
    assert 1000 <= largest_wal <= 1000 + 200, "SQLite's own threshold, passed by the last apply before it"
    _assert_all_there(path, files)


def test_below_the_threshold_no_checkpoint_starts(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite", 0, checkpoint_pages=1_000_000)
    try:
        _fill(store, 20)
    finally:
        store.close()
    assert store.checkpoints_completed == store.checkpoints_in_apply == 0
