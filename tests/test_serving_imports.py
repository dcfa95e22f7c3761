"""What the serving processes import: numpy only when a crashed WAL is checked (snapshot/wal_frames.py).

numpy's import starts OpenBLAS's thread pool, whose threads spin waiting for work the coordinator never gives
them: a reader process answering FindBatches spent a quarter of its instructions per call there (callgrind).
"""

from __future__ import annotations

import subprocess
import sys

SERVING_MODULES = (
    "coordinator.cli.main",
    "coordinator.node.node",
    "coordinator.node.services",
    "coordinator.reads.readers.worker",
    "coordinator.runtime.shard.loading",
    "coordinator.runtime.shard.state_opening",
)


def test_the_node_and_reader_processes_do_not_import_numpy() -> None:
    imports = "; ".join(f"import {name}" for name in SERVING_MODULES)
    script = f"import sys; {imports}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy')[:3])"
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert printed.strip() == "[]"
