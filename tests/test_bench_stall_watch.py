"""bench/stall_watch.py: a node that stands still is caught while it stands still, with its stacks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.node_process import start_node, stop_node
from bench.stall_watch import summarize


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
