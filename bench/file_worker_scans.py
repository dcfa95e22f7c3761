"""What one file-worker cycle's reads cost on a state like the end of the 100,000-file consolidation (issue #38 item
5; docs/benchmarks.md, "The file workers' lists"): one coordinator's state with `--files` file rows, `--idle` of them
with no live batch in the mixed states the job leaves (to hand over, awaiting ownership, deletion scheduled and in its
grace period, due, unscheduled), built through the real apply path (StateStore.apply of FileCommitted and
FileDeletionScheduled records).

Per list, schema 13's read (every list through files_idle: the idle rows in file id order, each tested, until the
limit) against this schema's (each list through an index of its own): rows visited (index entries that reached the
WHERE, counted by a function placed first in it), SQLite VM steps, pages read by a fresh connection, and wall time
warm (median of `--repeat`) and cold (the OS page cache dropped before each read; needs root). Then the node loop's
longest block while the cycle's five reads run: schema 13's on the loop (as the workers read them) against this
schema's on a thread (CoordinatorWorker._read), measured by a task that sleeps 1 ms at a time and records how late
it wakes.

    flock -x /tmp/bench.lock .venv/bin/python -m bench.file_worker_scans --out bench/results/file-worker-scans/x.json
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import apsw

from coordinator.machine import records
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state import adoptions, file_reads
from coordinator.machine.state.detached_read import read_transaction
from coordinator.machine.state.store import StateStore, open_reader

NOW = 10_000_000
LIMIT = 1000  # diskless.coordinator.file.worker.max.files' default
LOAN_LIMIT = 100  # diskless.partition.move.return.files' default
PARTITIONS = 100
_LENT = "EXISTS (SELECT 1 FROM file_loans AS l WHERE l.file_id = files.file_id)"
# Schema 13's reads (main at 9ef2c9e): every list through files_idle, in file id order.
_OLD_CONDITIONS = {
    "to_hand_over": "owned = 1 AND is_last_owner = 0 AND lender_id < 0 AND file_id > ?",
    "awaiting_ownership": "owned = 0 AND lender_id < 0 AND committed_at_ms <= ? AND file_id > ?",
    "to_schedule": "owned = 1 AND is_last_owner = 1 AND lender_id < 0 AND delete_after_ms < 0",
    "due_for_deletion": "owned = 1 AND is_last_owner = 1 AND lender_id < 0 AND delete_after_ms >= 0 "
    "AND delete_after_ms <= ?",
}
_NEW_QUERIES = {
    "to_hand_over": file_reads.IdleFilesQuery.TO_HAND_OVER,
    "awaiting_ownership": file_reads.IdleFilesQuery.AWAITING_OWNERSHIP,
    "to_schedule": file_reads.IdleFilesQuery.TO_SCHEDULE,
    "due_for_deletion": file_reads.IdleFilesQuery.DUE_FOR_DELETION,
}
_BINDINGS: dict[str, tuple[int, ...]] = {
    "to_hand_over": (-1, LIMIT),
    "awaiting_ownership": (NOW, -1, LIMIT),
    "to_schedule": (LIMIT,),
    "due_for_deletion": (NOW, LIMIT),
    "loan_rows_to_return": (LOAN_LIMIT,),
}
# The idle rows' states, as shares of --idle: most deletions in their grace period, as in the job's last minutes.
_IDLE_MIX = (("to_hand_over", 20), ("awaiting_ownership", 15), ("in_grace", 55), ("to_schedule", 5), ("due", 5))


def _counted(statement: str) -> str:
    """The statement with `visited(file_id)` first in its WHERE: called for each index entry the read reaches."""
    where = statement.index(" WHERE ", statement.index(" FROM files INDEXED BY "))
    return f"{statement[:where]} WHERE visited(files.file_id) AND {statement[where + len(' WHERE ') :]}"


def statements() -> dict[str, tuple[str, str]]:
    """list -> (schema 13's statement, this schema's)."""
    found = {
        name: (
            f"SELECT {file_reads._FILE_COLUMNS} FROM files INDEXED BY files_idle WHERE live_batches = 0 "
            f"AND NOT {_LENT} AND ({condition}) ORDER BY file_id LIMIT ?",
            file_reads.idle_files_statement(_NEW_QUERIES[name]),
        )
        for name, condition in _OLD_CONDITIONS.items()
    }
    found["loan_rows_to_return"] = (
        adoptions.LOAN_ROWS_TO_RETURN.replace("INDEXED BY files_loan_rows_idle", "INDEXED BY files_idle"),
        adoptions.LOAN_ROWS_TO_RETURN,
    )
    return found


def build_state(path: Path, files: int, idle: int) -> dict[str, int]:
    """The state, through the apply path; how many rows of each kind it holds."""
    store = StateStore(path, 0)
    store.apply(
        [(store.applied_offset + 1, [records.partition_created(p, b"\x01" * 16, "t", p) for p in range(PARTITIONS)])]
    )
    kinds: list[str] = []
    for name, share in _IDLE_MIX:
        kinds += [name] * (idle * share // 100)
    step = files // max(1, len(kinds))  # the idle rows spread over the file ids, among the live ones
    batch_id = store.load_view().next_batch_id
    offsets = [0] * PARTITIONS
    counts: dict[str, int] = {"live": 0}
    scheduled: list[tuple[int, int]] = []
    pending: list[Any] = []
    for file_id in range(files):
        kind = kinds[file_id // step] if file_id % step == 0 and file_id // step < len(kinds) else "live"
        counts[kind] = counts.get(kind, 0) + 1
        owners = {"to_hand_over": [0, 1], "awaiting_ownership": [1, 0]}.get(kind, [0])
        batches = []
        if kind == "live":
            partition = file_id % PARTITIONS
            offset = offsets[partition]
            offsets[partition] += 1
            batches = [CommittedBatch(batch_id, partition, 0, 1000, offset, offset, 0, -1, -1, -1, -1, 2, 0)]
            batch_id += 1
        key = f"diskless/{file_id % 16:02d}/{file_id:020d}-0123456789abcdef0123456789abcdef"
        pending.append(records.file_committed(file_id, key, 4_000_000, file_id % 16, owners, 1000 + file_id, batches))
        if kind in ("in_grace", "due"):
            scheduled.append((file_id, NOW + 3_600_000 if kind == "in_grace" else NOW - 1))
        if len(pending) == 5000:
            store.apply([(store.applied_offset + 1, pending)])
            pending = []
    if pending:
        store.apply([(store.applied_offset + 1, pending)])
    for start in range(0, len(scheduled), 5000):
        chunk = scheduled[start : start + 5000]
        store.apply([(store.applied_offset + 1, [records.file_deletion_scheduled(f, t) for f, t in chunk])])
    store.close()
    return counts


def _drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def measure_read(path: Path, statement: str, bindings: tuple[int, ...], repeat: int, cold: int) -> dict[str, Any]:
    """Rows visited, VM steps, pages read and wall times of one read."""
    db = open_reader(path)
    visited = 0

    def visit(*_file_id: apsw.SQLiteValue) -> int:
        nonlocal visited
        visited += 1
        return 1

    db.create_scalar_function("visited", visit, 1)
    steps = 0

    def step() -> bool:
        nonlocal steps
        steps += 1
        return False

    db.set_progress_handler(step, 1)
    db.status(apsw.SQLITE_DBSTATUS_CACHE_MISS, True)
    with read_transaction(db):
        returned = len(db.execute(_counted(statement), bindings).fetchall())
    pages, _ = db.status(apsw.SQLITE_DBSTATUS_CACHE_MISS, True)
    db.set_progress_handler(None)
    db.close()
    warm = []
    for _ in range(repeat):
        db = open_reader(path)  # a fresh connection: SQLite's own cache empty, the OS's warm
        started = time.perf_counter()
        with read_transaction(db):
            db.execute(statement, bindings).fetchall()
        warm.append((time.perf_counter() - started) * 1000)
        db.close()
    cold_ms = []
    for _ in range(cold):
        _drop_caches()
        db = open_reader(path)
        started = time.perf_counter()
        with read_transaction(db):
            db.execute(statement, bindings).fetchall()
        cold_ms.append((time.perf_counter() - started) * 1000)
        db.close()
    return {
        "returned": returned,
        "rows_visited": visited,
        "vm_steps": steps,
        "pages_read": pages,
        "warm_ms_median": round(statistics.median(warm), 3),
        "cold_ms_median": round(statistics.median(cold_ms), 2) if cold_ms else None,
        "cold_ms": [round(x, 2) for x in cold_ms],
    }


def _fetch_all(db: apsw.Connection, statement: str, bindings: tuple[int, ...]) -> int:
    return len(db.execute(statement, bindings).fetchall())


async def _probe_lag(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append((time.perf_counter() - started) * 1000 - 1)


async def _cycle(path: Path, shapes: dict[str, str], on_loop: bool) -> dict[str, float]:
    """The cycle's five reads with a lag probe running: on the loop (schema 13's way) or on a thread each."""
    store = StateStore(path, 0)
    lags: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe_lag(stop, lags))
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    for name, statement in shapes.items():
        bindings = _BINDINGS[name]
        if on_loop:
            with store.read_transaction() as db:
                db.execute(statement, bindings).fetchall()
            await asyncio.sleep(0)  # the worker's awaits between its lists
        else:
            reads = store.detached_read(one_snapshot=False)
            await reads.read(functools.partial(_fetch_all, statement=statement, bindings=bindings))
            reads.close()
    took = (time.perf_counter() - started) * 1000
    await asyncio.sleep(0.01)
    stop.set()
    await probe
    store.close()
    return {"cycle_reads_ms": round(took, 2), "loop_longest_block_ms": round(max(lags), 2)}


def measure_cycles(path: Path, cold: bool) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pairs = statements()
    for label, shapes, on_loop in (
        ("schema13_on_loop", {n: old for n, (old, _) in pairs.items()}, True),
        ("schema14_on_thread", {n: new for n, (_, new) in pairs.items()}, False),
    ):
        if cold:
            _drop_caches()
        found[label] = asyncio.run(_cycle(path, shapes, on_loop))
    return found


def _uptime() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=75_000)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold", type=int, default=3, help="cold reads per query (0: none; needs root)")
    parser.add_argument("--dir", type=Path, default=None, help="where the state is built (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    cold = args.cold if os.geteuid() == 0 else 0
    with tempfile.TemporaryDirectory(dir=args.dir) as where:
        path = Path(where) / "state.sqlite"
        started = time.perf_counter()
        counts = build_state(path, args.files, args.idle)
        result: dict[str, Any] = {
            "files": args.files,
            "rows": counts,
            "build_s": round(time.perf_counter() - started, 1),
            "load_before": _uptime(),
            "reads": {},
        }
        for name, (old, new) in statements().items():
            result["reads"][name] = {
                "schema13": measure_read(path, old, _BINDINGS[name], args.repeat, cold),
                "schema14": measure_read(path, new, _BINDINGS[name], args.repeat, cold),
            }
            print(name, json.dumps(result["reads"][name]), flush=True)
        result["cycle_warm"] = measure_cycles(path, cold=False)
        if cold:
            result["cycle_cold"] = measure_cycles(path, cold=True)
        result["load_after"] = _uptime()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
