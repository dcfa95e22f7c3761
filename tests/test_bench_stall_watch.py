"""bench/stall_watch.py: a node that stands still is caught while it stands still, with its stacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.node_process import start_node, stop_node
from bench.stall_watch import summarize, tree_io_bytes


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_stopped_node_is_recorded_as_a_stall_with_its_stacks(tmp_path: Path) -> None:
    (tmp_path / "node").mkdir()
    node, address, _ = start_node(tmp_path / "node", 1, {})
    out = tmp_path / "stalls.jsonl"
    watcher = subprocess.Popen([sys.executable, "-m", "bench.stall_watch", "--address", address,
                                "--pid", str(node.pid), "--out", str(out), "--stall-ms", "300"])  # fmt: skip
    try:
        time.sleep(2.5)  # ticks and quick probes first: none of them a stall
        before_stop = time.time()
        os.kill(node.pid, signal.SIGSTOP)
        time.sleep(2.0)
        os.kill(node.pid, signal.SIGCONT)
        time.sleep(1.5)
    finally:
        watcher.terminate()
        watcher.wait(30)
        os.kill(node.pid, signal.SIGCONT)
        stop_node(node)
    quiet = summarize(out, 0.0, before_stop)
    assert quiet["stalls"] == 0, quiet
    stalled = summarize(out, before_stop, time.time())
    assert stalled["stalls"] == 1 and 1_500 <= stalled["longest_ms"] <= 3_000, stalled
    stall = next(line for line in out.read_text().splitlines() if '"kind": "stall"' in line)
    assert "Thread" in stall and str(node.pid) in stall, stall[:500]  # py-spy's dump of the stopped node
    tick = json.loads(out.read_text().splitlines()[0])
    assert set(tick["disk"]) == {"read_mb_s", "write_mb_s", "busy_pct"}
    assert str(node.pid) in tick["tree_read_write_mb_s"]


def test_a_process_trees_io_counts_what_its_children_write(disk_tmp_path: Path) -> None:
    """The bytes a child (as the job's JVM and workers are the benchmark's) writes count in its parent's tree."""
    size = 4 << 20
    script = (
        f"import os, sys, time; d = os.open({str(disk_tmp_path / 'f')!r}, os.O_WRONLY | os.O_CREAT); "
        f"os.write(d, b'x' * {size}); os.fsync(d); print('written', flush=True); time.sleep(30)"
    )
    before = tree_io_bytes(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "written"
        after = tree_io_bytes(os.getpid())
        if tree_io_bytes(child.pid)[1] == 0:
            pytest.skip(f"{disk_tmp_path} is on a file system whose writes reach no block device (tmpfs)")
        assert size <= after[1] - before[1] < 2 * size, (before, after)
        apart = tree_io_bytes(os.getpid(), frozenset({os.getpid(), child.pid}))  # the child counted on its own
        assert apart[1] - before[1] < size, (before, apart)
    finally:
        child.kill()
        child.wait()
