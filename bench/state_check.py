"""How long checking a coordinator's SQLite state takes at load, per million live batches.

    .venv/bin/python -m bench.state_check [--live 1000000,10000000] [--coordinators 8] [--rounds 3]

Builds each state with the benchmark's prefill (bench/state.py), then times
`PRAGMA quick_check` and `PRAGMA integrity_check` on every coordinator's file,
each in a process of its own so no page cache of SQLite is warm (the OS page
cache is: a node that just crashed has its files there too). A node runs the
check on every coordinator at once, one thread each, so the node's time is
the wall time of all of them together; both are reported, as medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.state import build_coordinator_state

CHECK_SCRIPT = """
import sys, time, apsw
from pathlib import Path
from snapshot import page_checksums  # as the node checks: every page's checksum verified too
path, pragma = sys.argv[1], sys.argv[2]
started = time.monotonic()
connection = page_checksums.connect(Path(path), apsw.SQLITE_OPEN_READWRITE)
rows = [row[0] for row in connection.execute(f"PRAGMA {pragma}(5)")]
print(time.monotonic() - started, rows == ["ok"])
"""


def _check(paths: list[Path], pragma: str) -> tuple[float, list[float]]:
    """Runs the check on every file at once (as a loading node does); (wall seconds, seconds per file)."""
    started = time.monotonic()
    processes = [
        subprocess.Popen([sys.executable, "-c", CHECK_SCRIPT, str(path), pragma], stdout=subprocess.PIPE, text=True)
        for path in paths
    ]
    per_file = []
    for process in processes:
        output, _ = process.communicate(timeout=3600)
        seconds, ok = output.split()
        if ok != "True":
            raise RuntimeError(f"{pragma} found the prefilled state damaged")
        per_file.append(float(seconds))
    return time.monotonic() - started, per_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", default="1000000", help="live batch counts, comma-separated")
    parser.add_argument("--coordinators", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for live in (int(n) for n in args.live.split(",")):
        with tempfile.TemporaryDirectory(prefix="state-check-") as scratch:
            data_dir = Path(scratch) / "data"
            print(f"building {live:,} live batches over {args.coordinators} coordinators", file=sys.stderr)
            build_coordinator_state(data_dir, args.coordinators, live, lambda line: print(line, file=sys.stderr))
            paths = sorted(data_dir.glob("coordinator-*/state.sqlite"))
            size = sum(path.stat().st_size for path in paths)
            for pragma in ("quick_check", "integrity_check"):
                walls, per_file = [], []
                for round_number in range(args.rounds):
                    wall, files = _check(paths, pragma)
                    walls.append(wall)
                    per_file.extend(files)
                    print(f"  {pragma} round {round_number + 1}: {wall:.2f}s for the node", file=sys.stderr)
                row: dict[str, Any] = {
                    "live_batches": live,
                    "state_bytes": size,
                    "check": pragma,
                    "node_seconds_median": statistics.median(walls),
                    "file_seconds_median": statistics.median(per_file),
                    "node_seconds_per_million_batches": statistics.median(walls) / (live / 1e6),
                }
                results.append(row)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'live batches':>14} {'state MB':>9} {'check':>16} {'node s':>8} {'per file s':>11} {'s per 1M':>9}")
        for row in results:
            print(
                f"{row['live_batches']:>14,} {row['state_bytes'] / 1e6:>9.0f} {row['check']:>16} "
                f"{row['node_seconds_median']:>8.2f} {row['file_seconds_median']:>11.2f} "
                f"{row['node_seconds_per_million_batches']:>9.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
