"""The workers that used to start at their own seams run under the node's supervisor (coordinator/base/workers.py):
a coordinator's life loop, snapshots and scrub, a leader's ISR ticker, the node's replica fetcher and the cluster
controller's loops. Each one that raises is counted in `diskless_worker_failures_total` and shown; each that may be
started again is, after the backoff; the life loop is not (its failure leaves the coordinator FAILED until a reload)
and makes health NOT_SERVING at once. Time is the node's clock (a manual one, or the simulated loop's), never the
wall clock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from coordinator.base.clock import ManualClock
from coordinator.base.workers import NODE_WIDE, Scope, SupervisionBounds, WorkerSpec, WorkerState, WorkerSupervisor
from coordinator.cluster.controller import ClusterController
from coordinator.runtime.replication import fetcher
from coordinator.runtime.replication.leader import LeaderReplication
from coordinator.runtime.shard.lifecycle import Lifecycle
from coordinator.runtime.shard.scrubber import Scrubber
from coordinator.runtime.shard.snapshots import SnapshotScheduler
from coordinator.runtime.worker_specs import COORDINATOR_LIFE, ISR_TICKER, REPLICA_FETCHER, SCRUB, SNAPSHOTS
from tests.in_process import InProcessNode, wait_until
from tests.simulation.cluster import SimCluster, SimNode
from tests.test_simulation import _commit, _leader, _partition_of, _topic, _until, simulate

SETTINGS = {
    "diskless.server.worker.restart.backoff.ms": "100",
    "diskless.server.worker.restart.backoff.max.ms": "100",
    "diskless.server.worker.failures.max": "2",
}


def _failures(node: InProcessNode, name: str, coordinator_id: int) -> float | None:
    return node.node.metrics.registry.get_sample_value(
        "diskless_worker_failures_total", {"worker": name, "coordinator": str(coordinator_id)}
    )


def _status(node: InProcessNode, name: str, coordinator_id: int) -> tuple[WorkerState, int, bool]:
    (status,) = [s for s in node.node.workers.statuses() if (s.name, s.coordinator_id) == (name, coordinator_id)]
    return status.state, status.failures, status.failing


@pytest.mark.parametrize(
    ("spec", "patch", "settings", "again_after_ms"),
    [
        # A snapshot due is tried at once by the new worker; a scrub pass an interval after it starts.
        (SNAPSHOTS, (SnapshotScheduler, "create_snapshot"), {"diskless.coordinator.snapshot.interval.ms": "1000"}, 0),
        (SCRUB, (Scrubber, "run_pass"), {"diskless.coordinator.scrub.interval.ms": "1000"}, 1000),
    ],
    ids=["snapshots", "scrub"],
)
def test_a_coordinators_worker_that_raises_is_counted_and_started_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spec: WorkerSpec,
    patch: tuple[type, str],
    settings: dict[str, str],
    again_after_ms: int,
) -> None:
    runs: list[int] = []

    async def broken(self: SnapshotScheduler | Scrubber) -> object:
        runs.append(self.coordinator_id)
        raise RuntimeError(f"{spec.name} broken on coordinator {self.coordinator_id}")

    monkeypatch.setattr(*patch, broken)
    node = InProcessNode(tmp_path / "data", coordinators=1, settings={**SETTINGS, **settings}).start()
    try:
        assert node.node.workers.runs(spec.name, 0)
        node.advance(1000)  # the first try raises; the worker is started again 100 ms later
        assert runs == [0] and _failures(node, spec.name, 0) == 1.0
        assert _status(node, spec.name, 0) == (WorkerState.BACKING_OFF, 1, False)
        assert node.health() == health_pb2.HealthCheckResponse.SERVING
        node.advance(100 + again_after_ms)  # started again after the backoff; the new one's try raises too
        assert runs == [0, 0], "not started again"
        assert _failures(node, spec.name, 0) == 2.0  # two failures reach the bound
        wait_until(lambda: node.health() == health_pb2.HealthCheckResponse.NOT_SERVING, "health says NOT_SERVING")
    finally:
        node.stop()


def test_the_scrub_worker_runs_only_at_a_rate_above_0(tmp_path: Path) -> None:
    settings = {**SETTINGS, "diskless.coordinator.scrub.bytes.per.second": "0"}
    node = InProcessNode(tmp_path / "data", coordinators=1, settings=settings).start()
    try:
        assert node.node.workers.runs(SNAPSHOTS.name, 0) and not node.node.workers.runs(SCRUB.name, 0)
    finally:
        node.stop()


def test_a_life_loop_that_raises_leaves_its_coordinator_failed_counted_and_is_not_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve = Lifecycle._serve

    async def broken(self: Lifecycle) -> BaseException | None:
        if self.coordinator_id == 1:
            raise RuntimeError("a bug in coordinator 1's serving")
        return await serve(self)

    monkeypatch.setattr(Lifecycle, "_serve", broken)
    node = InProcessNode(tmp_path / "data", coordinators=2, settings=SETTINGS).start(wait_serving=False)
    try:
        wait_until(lambda: node.node.shards[1].state.name == "FAILED", "coordinator 1 FAILED")
        assert "internal error: a bug in coordinator 1's serving" in node.node.shards[1].problem
        assert _status(node, COORDINATOR_LIFE.name, 1) == (WorkerState.FAILED, 1, True)  # failing at once
        assert _status(node, COORDINATOR_LIFE.name, 0) == (WorkerState.RUNNING, 0, False)
        assert _failures(node, COORDINATOR_LIFE.name, 1) == 1.0
        node.advance(10_000)  # no restart: a reload is what brings it back
        assert _status(node, COORDINATOR_LIFE.name, 1) == (WorkerState.FAILED, 1, True)
        assert node.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        node.stop()


def _raising_once(monkeypatch: pytest.MonkeyPatch, owner: type, method: str, raised: list[str]) -> None:
    """The first run of `owner.method` raises (after a moment of simulated time), every later one is the real one."""
    real = getattr(owner, method)

    async def once(self: object) -> None:
        if method not in raised:
            raised.append(method)
            await asyncio.sleep(0.5)
            raise RuntimeError(f"{method} broken once")
        await real(self)

    monkeypatch.setattr(owner, method, once)


def _node_failures(sim_node: SimNode, name: str, coordinator_id: int = NODE_WIDE) -> list[tuple[int, WorkerState]]:
    assert sim_node.node is not None
    return [
        (s.failures, s.state)
        for s in sim_node.node.workers.statuses()
        if (s.name, s.coordinator_id) == (name, coordinator_id)
    ]


def test_a_cluster_nodes_workers_that_raise_are_counted_and_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ISR ticker (leader-only), the replica fetcher's sessions and a controller's loop (node-wide) each raise
    on their first run; each is counted, started again, and the cluster goes on committing and replicating."""
    raised: list[str] = []
    _raising_once(monkeypatch, LeaderReplication, "run_isr_ticks", raised)
    _raising_once(monkeypatch, fetcher._Session, "run", raised)
    _raising_once(monkeypatch, ClusterController, "_mark_loop", raised)

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _until("each worker raised once", lambda: len(raised) == 3, within_s=10)
        await _topic(sim)
        leader = _leader(sim, 0)
        counted = {
            name: sum(failures for node in sim.running() for failures, _ in _node_failures(node, name, cid))
            for name, cid in ((ISR_TICKER.name, 0), (REPLICA_FETCHER.name, NODE_WIDE), ("cluster-directory-mark", -1))
        }
        # Each raised once on one node (whichever ran it first): counted there, once.
        assert counted[REPLICA_FETCHER.name] == 1 and counted["cluster-directory-mark"] == 1
        assert counted[ISR_TICKER.name] in (0, 1)  # 1 unless that leadership ended since (its count went with it)
        await _until(
            "every worker runs again",
            lambda: all(
                state is WorkerState.RUNNING
                for node in sim.running()
                for name in (REPLICA_FETCHER.name, "cluster-directory-mark")
                for _, state in _node_failures(node, name)
            ),
            within_s=5,
        )
        assert _node_failures(leader, ISR_TICKER.name, 0)[0][1] is WorkerState.RUNNING
        offset = await _commit(leader, _partition_of(sim, 0), "after-the-failures")
        assert offset >= 0, offset  # acknowledged: the followers in the ISR fetched it through the restarted fetcher

    simulate(tmp_path, 44, work)


def test_a_worker_that_must_not_be_started_again_is_failing_at_once_and_a_stoppable_one_is_never_cancelled() -> None:
    clock = ManualClock(0)
    counted: list[tuple[str, int]] = []
    once = WorkerSpec("once", Scope.NODE, "raises", "tests:none", restart=False)
    steady = WorkerSpec("steady", Scope.COORDINATOR, "stops at its own point", "tests:none")

    class Raises:
        async def run(self) -> None:
            raise RuntimeError("broken")

    class Steady:
        def __init__(self) -> None:
            self.stop_asked = asyncio.Event()
            self.ended_cleanly = False

        async def run(self) -> None:
            await self.stop_asked.wait()
            await asyncio.sleep(0)  # the step in progress ends
            self.ended_cleanly = True

        def request_stop(self) -> None:
            self.stop_asked.set()

    async def scenario() -> None:
        workers = WorkerSupervisor(clock, SupervisionBounds(100, 100, 60_000, 3), lambda *key: counted.append(key),
                                   lambda: None)  # fmt: skip
        await workers.open()
        assert workers.start(once, Raises)
        steady_worker = Steady()
        assert workers.start(steady, lambda: steady_worker, 7)
        for _ in range(5):
            await asyncio.sleep(0)
        (status,) = [s for s in workers.statuses() if s.name == "once"]
        assert (status.state, status.failures, status.failing) == (WorkerState.FAILED, 1, True)  # 1 < 3, yet failing
        assert counted == [("once", NODE_WIDE)]
        clock.advance(1000)
        for _ in range(5):
            await asyncio.sleep(0)
        assert counted == [("once", NODE_WIDE)], "started again"
        workers.stop("once")
        assert workers.failing() == []
        await workers.stop_waiting("steady", 7)
        assert steady_worker.ended_cleanly, "cancelled instead of asked to stop"
        await workers.close()

    asyncio.run(scenario())
