"""What one background worker's read costs the node's event loop: `CoordinatorWorker._read`'s path, alone.

Every pass of every coordinator's workers (file hand-over and deletion, loans, retention, ...) reads the committed
state through `StateStore.detached_read(one_snapshot=False)`: a read on the loop's executor, in a connection and
transaction of its own, then closed. This opens, reads one small query and closes such a read `--reads` times on
one loop, `--repeats` times, over a state of `--files` committed files, and prints the medians per read: the wall
time and the CPU of the loop's thread (`time.thread_time`), which is what every other coordinator of the node waits
behind. Run it with two checkouts' environments to compare them:

    flock -x /tmp/bench.lock .venv/bin/python -m bench.worker_reads
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import apsw

from coordinator.machine import records
from coordinator.machine.state.store import StateStore


def _file_count(db: apsw.Connection) -> int:
    row = db.execute("SELECT count(*) FROM files").fetchone()
    return int(row[0]) if row is not None else 0


async def _per_read_us(store: StateStore, reads: int, repeats: int) -> tuple[float, float]:
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.thread_time()
        for _ in range(reads):
            read = store.detached_read(one_snapshot=False)
            try:
                await read.read(_file_count)
            finally:
                read.close()
        walls.append((time.perf_counter() - wall_start) / reads * 1e6)
        cpus.append((time.thread_time() - cpu_start) / reads * 1e6)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_reads", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        store = StateStore(Path(work) / "state.sqlite", 0)
        try:
            for file_id in range(args.files):
                record = records.file_committed(file_id, f"wal/{file_id}", 10, 1, [0], 1000, [])
                store.apply([(store.applied_offset + 1, [record])])
            wall_us, cpu_us = asyncio.run(_per_read_us(store, args.reads, args.repeats))
        finally:
            store.close()
    print(
        f"a worker's read (open, one query, close), median of {args.repeats} x {args.reads}: "
        f"wall {wall_us:.1f} us, the loop thread's CPU {cpu_us:.1f} us"
    )


if __name__ == "__main__":
    main()
