"""A read of its own off the loop (coordinator/machine/state/detached_read.py): with one snapshot, every read sees
the state of its first; with one transaction per read (the workers' lists), each sees what was applied before it and
none holds a transaction between reads, so the WAL's checkpoints pass it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import apsw

from coordinator.machine import records
from coordinator.machine.state.detached_read import DetachedReadClosed
from coordinator.machine.state.store import StateStore


def _commit(store: StateStore, file_id: int) -> None:
    record = records.file_committed(file_id, f"wal/{file_id}", 10, 1, [0], 1000, [])
    store.apply([(store.applied_offset + 1, [record])])


def _file_count(db: apsw.Connection) -> int:
    (count,) = db.execute("SELECT count(*) FROM files").fetchone() or (0,)
    return int(count)


def _in_transaction(db: apsw.Connection) -> bool:
    return bool(db.in_transaction)


async def _reads(store: StateStore, one_snapshot: bool) -> tuple[list[int], bool]:
    reads = store.detached_read(one_snapshot)
    try:
        counts = [await reads.read(_file_count)]
        _commit(store, 1)
        counts.append(await reads.read(_file_count))
        return counts, await reads.read(_in_transaction)
    finally:
        reads.close(wait=True)


def test_one_snapshot_sees_the_state_of_its_first_read(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite", 0)
    _commit(store, 0)
    counts, held = asyncio.run(_reads(store, one_snapshot=True))
    assert counts == [1, 1] and held
    store.close()


def test_a_read_per_transaction_sees_what_was_applied_before_it_and_holds_nothing_between_reads(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state.sqlite", 0)
    _commit(store, 0)
    counts, held = asyncio.run(_reads(store, one_snapshot=False))
    assert counts == [1, 2]
    assert held  # inside the read's own transaction ...
    reads = store.detached_read(one_snapshot=False)
    asyncio.run(reads.read(_file_count))
    # ... which ended with it: a truncating checkpoint (refused while a reader holds a snapshot) empties the WAL.
    log_frames, checkpointed = store._writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    assert log_frames == checkpointed == 0
    reads.close(wait=True)
    store.close()


def test_a_workers_read_starts_no_thread_of_its_own_and_a_snapshots_read_is_closed_on_its_thread(
    tmp_path: Path,
) -> None:
    """A worker's read (one transaction per read) runs on the loop's executor: opening and closing it starts no
    thread, whose start the loop would wait for (a thread per read of every worker's pass, measured as 7% of the
    loop's time during a consolidation job). A read with one snapshot starts its thread at its first read."""
    store = StateStore(tmp_path / "state.sqlite", 0)
    _commit(store, 0)

    async def run() -> tuple[set[str], set[str]]:
        before = {thread.name for thread in threading.enumerate()}
        for _ in range(5):
            reads = store.detached_read(one_snapshot=False)
            assert await reads.read(_file_count) == 1
            reads.close()
        closed = store.detached_read(one_snapshot=True)
        closed.close()  # never read: nothing to close on a thread
        during = {thread.name for thread in threading.enumerate()} - before
        snapshot = store.detached_read(one_snapshot=True)
        assert await snapshot.read(_file_count) == 1
        started = {thread.name for thread in threading.enumerate()} - before
        snapshot.close(wait=True)
        return during, started

    during, started = asyncio.run(run())
    assert not any(name.startswith("detached-read") for name in during)  # (the loop's executor may add its own)
    assert any(name.startswith("detached-read") for name in started)
    store.close()


def test_a_read_after_close_is_refused(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite", 0)
    _commit(store, 0)
    for one_snapshot in (True, False):
        reads = store.detached_read(one_snapshot)
        reads.close()
        try:
            asyncio.run(reads.read(_file_count))
        except DetachedReadClosed:
            pass
        else:
            raise AssertionError(f"a read after close was answered (one_snapshot={one_snapshot})")
    store.close()
