"""Background work has one owner (coordinator/node/worker_registry.py, coordinator/base/workers.py).

Every task made in coordinator/ is made by the supervisor, at a registered worker's seam, or is one call's helper
listed below with why; a new loop started anywhere else fails here until it is declared. A failing worker shows in
DescribeCoordinators, in the metrics and in health; a coordinator's leader-only workers follow its leadership.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from collections import Counter
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from coordinator.base.workers import Scope
from coordinator.cli.operator_commands import workers_cell
from coordinator.config.settings import Settings
from coordinator.node.worker_registry import COORDINATOR_WORKERS, HEALTH, RETENTION, WORKERS
from coordinator.runtime.worker_specs import COORDINATOR_LIFE, SCRUB, SNAPSHOTS
from coordinator.topics.retention_worker import RetentionWorker
from protos import coordinator_pb2 as pb
from tests.in_process import InProcessNode, wait_until
from tests.simulation.cluster import SimCluster, SimNode
from tests.test_simulation import _leader, _until, simulate

PACKAGE = Path(__file__).resolve().parent.parent / "coordinator"
# What makes a task (or a thread) that could outlive the call making it.
SPAWNERS = frozenset({"create_task", "ensure_future", "TaskGroup", "run_coroutine_threadsafe", "Thread"})
SUPERVISOR = "coordinator.base.workers:WorkerSupervisor"
# Tasks that are one call's helpers, not background work: each ends with the call that made it.
ONE_CALL = {
    "coordinator.base.clock:_wait_event_on_loop": "the event's wait within one bounded wait",
    "coordinator.base.clock:ManualClock.wait_event": "the event's wait within one bounded wait",
    "coordinator.cluster.waiting:run_within": "one call, bounded by a timeout, its outcome always retrieved",
    "coordinator.edge.loop:EdgeLoop.__init__": "the gRPC edge's own event loop thread, the server's, not a worker",
    "coordinator.edge.loop:EdgeLoop.run": "one call handed to the edge loop and awaited",
    "coordinator.edge.loop:NodeHop._there": "one call handed to the node's loop and awaited",
    "coordinator.runtime.node_coordinators:NodeCoordinators.run_parts": "one call's prefetches, each one bounded read",
    "coordinator.runtime.node_coordinators:NodeCoordinators.wait_all_applied": "one request's waits, awaited",
    "coordinator.runtime.replication.follower:Follower._unless_closed": "one fetch step raced against the close",
    "coordinator.runtime.replication.leader:LeaderReplication._change_isr": "one ISR change in flight at a time",
    "coordinator.runtime.replication.fetcher:_Session._call": "one FetchLogs in flight, a joining follower cancels it",
    "coordinator.runtime.shard.lifecycle:Lifecycle._wait_for_role": "one wait for a role or the close",
    "coordinator.runtime.shard.lifecycle:Lifecycle._attempt_load": "one notice once the new leader applied its log",
    "coordinator.runtime.shard.pipeline:Pipeline.__init__": "the new leader's log tail replicated, one write",
    "coordinator.runtime.shard.pipeline:Pipeline._start_flush": "one group's write in flight, awaited by the loop",
}


def _task_sites() -> list[tuple[str, str]]:
    """Every call in coordinator/ that makes a task or a thread: ("module:Qualname" of the function around it, what
    it calls)."""
    sites: list[tuple[str, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)

        def visit(node: ast.AST, scope: tuple[str, ...], module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    visit(child, (*scope, child.name))
                    continue
                if isinstance(child, ast.Call):
                    func = child.func
                    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                    if name in SPAWNERS:
                        sites.append((f"{module}:{'.'.join(scope)}", name))
                visit(child, scope)

        visit(ast.parse(path.read_text()), ())
    return sites


def _resolves(where: str) -> bool:
    module_name, _, qualname = where.partition(":")
    found: object = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return False
    return callable(found)


def _holding_a_task_group(sites: list[tuple[str, str]]) -> set[str]:
    """The loops of supervised workers whose children run in a TaskGroup the loop itself holds: a child that raises
    ends the worker (the supervisor counts it and starts the worker again), and every child ends with it."""
    loops = {spec.loop_in for spec in WORKERS if spec.supervised}
    return {site for site, name in sites if site in loops and name == "TaskGroup"}


def test_every_task_of_coordinator_is_made_by_the_supervisor_or_at_a_registered_seam() -> None:
    seams = {spec.started_in for spec in WORKERS if spec.started_in is not None}
    sites = _task_sites()
    places = {site for site, _ in sites}
    holders = _holding_a_task_group(sites)
    unregistered = sorted(
        site
        for site in places
        if not site.startswith(SUPERVISOR) and site not in seams and site not in ONE_CALL and site not in holders
    )
    assert not unregistered, (
        f"tasks made outside the worker registry: {unregistered}; declare each worker in "
        "coordinator/node/worker_registry.py (and run it under the supervisor), or list a one-call helper here"
    )
    stale = sorted((seams | set(ONE_CALL)) - places)
    assert not stale, f"declared task sites that make no task any more: {stale}"
    # The seams left are what cannot be supervised, each with its reason beside its spec.
    assert seams == {"coordinator.node.processes.commit_process:_serve"}, seams
    assert holders == {
        "coordinator.runtime.replication.fetcher:ReplicaFetcher.run",  # its fetch sessions, one per leader node
        "coordinator.base.child_processes:ChildSupervisor.run",  # a keeper per commit or reader process
    }, holders


def test_the_registry_declares_each_worker_once_with_its_loop_and_its_pacing_setting() -> None:
    names = Counter(spec.name for spec in WORKERS)
    assert [name for name, count in names.items() if count > 1] == []
    settings = {field.name for field in dataclasses.fields(Settings)}
    for spec in WORKERS:
        assert _resolves(spec.loop_in), f"{spec.name}: no loop at {spec.loop_in}"
        assert spec.started_in is None or _resolves(spec.started_in), f"{spec.name}: no seam at {spec.started_in}"
        assert spec.interval_setting is None or spec.interval_setting in settings, spec
    # A coordinator's supervised workers are its leader's: each acts only where the coordinator is led here.
    assert {spec.scope for spec, _ in COORDINATOR_WORKERS} == {Scope.LEADER_ONLY}
    assert all(spec.supervised for spec, _ in COORDINATOR_WORKERS)


WORKER_SETTINGS = {
    "diskless.coordinator.retention.check.interval.ms": "1000",
    "diskless.server.worker.restart.backoff.ms": "100",
    "diskless.server.worker.restart.backoff.max.ms": "100",
    "diskless.server.worker.failures.max": "2",
}


def test_a_failing_worker_is_restarted_counted_described_and_makes_health_not_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: RetentionWorker) -> object:
        raise RuntimeError(f"retention rule broken on coordinator {self.coordinator_id}")

    monkeypatch.setattr(RetentionWorker, "run_pass", broken)
    node = InProcessNode(tmp_path / "data", coordinators=2, settings=WORKER_SETTINGS).start()
    try:
        assert node.health() == health_pb2.HealthCheckResponse.SERVING
        node.advance(1000)  # each coordinator's first retention pass raises; a new worker after 100 ms
        first = node.node.running_workers(RETENTION.name)[0]
        assert node.health() == health_pb2.HealthCheckResponse.SERVING  # one failure: under the bound of two
        node.advance(100 + 1000)  # the new worker's first pass raises too
        assert node.node.running_workers(RETENTION.name)[0] is not first, "not started anew"
        wait_until(lambda: node.health() == health_pb2.HealthCheckResponse.NOT_SERVING, "health says NOT_SERVING")
        wait_until(lambda: "workers failing: retention (0), retention (1)" in "".join(node.output), "the log says why")
        samples = {
            coordinator_id: node.node.metrics.registry.get_sample_value(
                "diskless_worker_failures_total", {"worker": RETENTION.name, "coordinator": str(coordinator_id)}
            )
            for coordinator_id in (0, 1)
        }
        assert samples == {0: 2.0, 1: 2.0}
        described = node.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(coordinator_ids=[1]))
        (description,) = described.coordinators
        (retention,) = [worker for worker in description.workers if worker.name == RETENTION.name]
        assert (retention.scope, retention.failures, retention.recent_failures, retention.failing) == (
            "leader-only", 2, 2, True,
        )  # fmt: skip
        assert retention.last_failure == "RuntimeError: retention rule broken on coordinator 1"
        # Alone, a coordinator's leader also runs its life loop, snapshots and scrub (no ISR ticker: no followers).
        assert {worker.name for worker in description.workers} == {spec.name for spec, _ in COORDINATOR_WORKERS} | {
            COORDINATOR_LIFE.name, SNAPSHOTS.name, SCRUB.name,
        }  # fmt: skip
        assert HEALTH.name in {worker.name for worker in description.node_workers}
        assert workers_cell(description) == "retention:2/2!"  # `diskless describe`'s worker_failures column
    finally:
        node.stop()


def _supervised_here(node: SimNode, coordinator_id: int) -> set[str]:
    assert node.node is not None
    return {spec.name for spec, _ in COORDINATOR_WORKERS if node.node.workers.runs(spec.name, coordinator_id)}


def test_leader_only_workers_stop_on_demotion_and_start_on_promotion(tmp_path: Path) -> None:
    every = {spec.name for spec, _ in COORDINATOR_WORKERS}

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        old = _leader(sim, 0)
        for node in sim.running():
            assert _supervised_here(node, 0) == (every if node is old else set()), node.node_id
        registration = await sim.etcd_store().node_registration(old.node_id)
        assert registration is not None
        sim.etcd.revoke(registration.lease_id)  # the old leader steps down at its next renewal
        await _until("the old leader stops leading", lambda: not old.shard(0).leads, within_s=5)
        await _until("its leader-only workers stop", lambda: _supervised_here(old, 0) == set(), within_s=1)
        await _until("another node leads", lambda: any(n is not old for n in sim.leaders(0)), within_s=10)
        new = next(n for n in sim.leaders(0) if n is not old)
        await _until("the new leader's workers start", lambda: _supervised_here(new, 0) == every, within_s=1)
        for node in sim.running():
            if node is not new:
                assert _supervised_here(node, 0) == set(), node.node_id

    simulate(tmp_path, 43, work)
