"""What a ReplaceBatches record costs the coordinator that applies it, alone or grouped with the runs that share its
source files (issue #38 item 5; docs/benchmarks.md, "Runs that share source files, committed together").

Builds the consolidation benchmark's store (`bench.consolidate.build`: `--files` WAL files of 16 brokers over 1,000
partitions, through a real node) or reuses one (`--reuse`), then works on a copy of one coordinator's state with the
node stopped. Each of that coordinator's partitions is cut into runs of `--run-batches` batches in offset order; a
broker's partitions have a batch in each of its files, so their k-th runs leave the same files. The runs are applied
through the real apply path (StateStore.apply of BatchesReplaced records), in rank order, either one run per
transaction (`single`, what a lone ReplaceBatches call writes) or the runs of one broker's partitions at one rank,
`--group` of them per transaction (what `replace_groups` sends together). After `--warm` transactions: the apply's
wall time per transaction (median, max), its CPU per batch moved, and the WAL bytes per batch moved (checkpoints
held off, so the WAL holds every frame written).

    flock -x /tmp/bench.lock .venv/bin/python -m bench.replace_apply --work-dir /tmp/replace-apply \\
        --out bench/results/replace-apply/100k.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench.consolidate import BenchSize, build
from coordinator.machine import records
from coordinator.machine.state.store import StateStore
from protos import records_pb2 as rec

BROKERS = BenchSize().brokers


Runs = list[tuple[int, ...]]  # (partition key, base offset, last offset, batches) each


def _runs_by_rank(store: StateStore, partitions: list[tuple[str, int]], run_batches: int) -> list[Runs]:
    """The coordinator's runs: per (rank, broker), its partitions' k-th runs as (partition key, base, last, batches)."""
    by_group: dict[tuple[int, int], Runs] = {}
    for index, (topic_hex, partition) in enumerate(partitions):
        found = list(
            store.reader.execute(
                "SELECT partition_key FROM partitions WHERE topic_id = ? AND partition = ?",
                (bytes.fromhex(topic_hex), partition),
            )
        )
        if not found:
            continue  # another coordinator's
        key = found[0][0]
        offsets = list(
            store.reader.execute(
                "SELECT base_offset, last_offset FROM batches WHERE partition_key = ? ORDER BY last_offset", (key,)
            )
        )
        for start in range(0, len(offsets), run_batches):
            chunk = offsets[start : start + run_batches]
            by_group.setdefault((start // run_batches, index % BROKERS), []).append(
                (key, chunk[0][0], chunk[-1][1], len(chunk))
            )
    return [by_group[group] for group in sorted(by_group)]


def measure(state_dir: Path, coordinator_id: int, partitions: list[tuple[str, int]], mode: str, group: int,
            run_batches: int, transactions: int, warm: int, copy_dir: Path) -> dict[str, Any]:  # fmt: skip
    shutil.rmtree(copy_dir, ignore_errors=True)
    copy_dir.mkdir(parents=True)
    for file in state_dir.iterdir():
        if file.name.startswith("state.sqlite"):
            shutil.copy(file, copy_dir / file.name)
    store = StateStore(copy_dir / "state.sqlite", coordinator_id, checkpoint_pages=10**9)  # every frame kept
    try:
        plan: list[Runs] = []
        for runs in _runs_by_rank(store, partitions, run_batches):
            step = 1 if mode == "single" else group
            plan.extend(runs[i : i + step] for i in range(0, len(runs), step))
        plan = plan[: warm + transactions]
        file_id, offset = store.meta["next_file_id"], store.applied_offset
        wal = copy_dir / "state.sqlite-wal"
        times_ms: list[float] = []
        batches = wal_start = 0
        cpu_start = 0.0
        for number, runs in enumerate(plan):
            if number == warm:
                wal_start, cpu_start = wal.stat().st_size, time.process_time()
            frames = []
            for key, base, last, count in runs:
                offset += 1
                run = rec.BatchesReplaced.Run(partition_key=key, base_offset=base, last_offset=last, batches=count)
                record = records.batches_replaced(file_id, f"bench/replace/{file_id}", count * 600, 0,
                                                  [coordinator_id], 0, [run], [])  # fmt: skip
                file_id += 1
                frames.append((offset, [record]))
            started = time.perf_counter()
            store.apply(frames)
            if number >= warm:
                times_ms.append((time.perf_counter() - started) * 1000)
                batches += sum(run[3] for run in runs)
        cpu_s = time.process_time() - cpu_start
        return {
            "mode": mode,
            "group": 1 if mode == "single" else group,
            "run_batches": run_batches,
            "transactions": len(times_ms),
            "batches": batches,
            "apply_ms_p50": round(statistics.median(times_ms), 2),
            "apply_ms_max": round(max(times_ms), 2),
            "cpu_us_per_batch": round(cpu_s * 1e6 / batches, 1),
            "wal_bytes_per_batch": round((wal.stat().st_size - wal_start) / batches),
        }
    finally:
        store.close()
        shutil.rmtree(copy_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--reuse", action="store_true", help="the store already built in --work-dir")
    parser.add_argument("--coordinator", type=int, default=3)
    parser.add_argument("--transactions", type=int, default=40)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument(
        "--cases",
        default="single:500,group:500:2,group:500:4,group:500:8,single:250,group:250:4",
        help="MODE:RUN_BATCHES[:GROUP], comma-separated",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    work: Path = args.work_dir
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
        size = BenchSize(files=args.files, store_dir=str(work / "store"))
        built = build(work, size)
        (work / "partitions.json").write_text(json.dumps([[topic.hex(), p] for topic, p in built]))
    partitions = [(topic, p) for topic, p in json.loads((work / "partitions.json").read_text())]
    state_dir = work / "a" / "data" / f"coordinator-{args.coordinator}"
    results = []
    for case in args.cases.split(","):
        mode, run_batches, *group = case.split(":")
        result = measure(state_dir, args.coordinator, partitions, mode, int(group[0]) if group else 1,
                         int(run_batches), args.transactions, args.warm, work / "copy")  # fmt: skip
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"files": args.files, "coordinator": args.coordinator, "results": results},
                                       indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
