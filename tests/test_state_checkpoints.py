"""The state's WAL is checkpointed on a thread of its own, past its threshold, and never lost by it."""

from __future__ import annotations

import time
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


def _fill(store: StateStore, files: int, pause_s: float = 0.0) -> int:
    """Commits `files` files of one batch per partition, one apply each; returns the batches per partition."""
    store.apply([(store.applied_offset + 1, [records.partition_created(p, TOPIC, "t", p) for p in range(PARTITIONS)])])
    for n in range(files):
        batch_id = store.load_view().next_batch_id
        batches = [CommittedBatch(batch_id + p, p, 0, 10, n, n, 0, -1, -1, -1, -1, 2, 0) for p in range(PARTITIONS)]
        store.apply([(store.applied_offset + 1, [records.file_committed(n, f"wal/{n}", 10, 1, [0], 1000, batches)])])
        time.sleep(pause_s)
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
    files = _fill(store, 100, pause_s=0.01)  # each apply dirties pages all over the batches B-tree
    largest_wal = _wal_pages(path)
    store.close()  # waits for a running checkpoint; the writer's close is then the last one
    assert store.checkpoints_completed > 0
    assert store.checkpoints_in_apply == 0
    assert largest_wal < HARD_BOUND_FACTOR * 100, "the WAL starts over once a pass copied every frame"
    assert not path.with_name("state.sqlite-wal").exists(), "the writer's close checkpoints and removes the WAL"
    _assert_all_there(path, files)


def test_a_writer_that_never_pauses_still_has_a_bounded_wal(tmp_path: Path) -> None:
    """No moment for the thread to finish: past the hard bound an apply checkpoints itself, once the pass ends."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=100)
    files = _fill(store, 600)  # about 80 WAL pages per apply: 48,000 pages without checkpoints
    largest_wal = _wal_pages(path)  # the file keeps its largest size: it is reused, not cut
    store.close()
    assert store.checkpoints_in_apply > 0
    # The hard bound, plus what the applies add while the thread's last pass ends (a few milliseconds).
    assert largest_wal < 4 * HARD_BOUND_FACTOR * 100
    _assert_all_there(path, files)


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
