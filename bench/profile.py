"""Where the coordinator's time goes: one maximum-rate load against a server running under cProfile."""

from __future__ import annotations

import asyncio
import io
import pstats
import tempfile
from pathlib import Path

from bench.coordinator_system import CoordinatorServer, CoordinatorSystem
from bench.driver import LoadOutcome, LoadPlan, run_load
from bench.workload import DUPLICATE_SHARE_DEFAULT, SHAPES

PROFILE_FUNCTIONS_SHOWN = 30


async def load_once(system: CoordinatorSystem, plan: LoadPlan, name: str = "profile") -> LoadOutcome:
    """Opens the system, runs `plan` on a new topic called `name`, closes it."""
    await system.open()
    try:
        topic = await system.create_topic(name, plan.shape.partitions)
        return await run_load(system, topic, plan, seed=1, key_prefix=f"wal/{name}")
    finally:
        await system.close()


def profile_coordinator(out: Path, shape: str, brokers: int, coordinators: int, seconds: float) -> str:
    """Runs `shape` at the maximum rate for `seconds` under cProfile; writes and returns profile.txt."""
    plan = LoadPlan(SHAPES[shape], brokers, 0.0, 1.0, seconds, 1, DUPLICATE_SHARE_DEFAULT)
    with tempfile.TemporaryDirectory(prefix="diskless-profile-") as scratch:
        stats_path = Path(scratch) / "server.prof"
        server = CoordinatorServer(Path(scratch) / "data", coordinators, {}, profile_to=stats_path)
        server.start()
        try:
            outcome = asyncio.run(load_once(CoordinatorSystem("coordinator", [server]), plan))
        finally:
            server.stop()
        text = io.StringIO()
        stats = pstats.Stats(str(stats_path), stream=text)
        figures = outcome.median()
        text.write(
            f"coordinator under cProfile (slower than unprofiled), {shape} at the maximum rate, {brokers} brokers, "
            f"{coordinators} coordinators: {figures['commits_per_s']:.0f} commits/s, "
            f"{figures['batches_per_s']:.0f} batches/s\n\nby own time:\n"
        )
        stats.sort_stats("tottime").print_stats(PROFILE_FUNCTIONS_SHOWN)
        text.write("by cumulative time:\n")
        stats.sort_stats("cumulative").print_stats(PROFILE_FUNCTIONS_SHOWN)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.txt").write_text(text.getvalue())
    return text.getvalue()
