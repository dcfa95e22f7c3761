"""Every background task of a node and of its coordinators, declared once (STYLE §5: background work has one owner).

A spec says what runs, in which scope (the node's, one per coordinator replica, one per coordinator led here), what
paces it, and where its task is made. The supervised ones (`started_in` None) run under the node's
`WorkerSupervisor` (coordinator/base/workers.py): started, stopped and woken there, restarted after a failure with a
bounded backoff, counted in `diskless_worker_failures_total`, shown in DescribeCoordinators and in health. The others
still make their task at the seam named, inside the part that owns their state; tests/test_worker_registry.py fails
on a task made anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from coordinator.base.clock import Clock
from coordinator.base.metrics import Metrics
from coordinator.base.workers import LoopWorker, Scope, Worker, WorkerSpec, WorkerSupervisor
from coordinator.cluster.controller import ClusterController
from coordinator.cluster.peers import PeerClient
from coordinator.commits.producer_expiry_worker import ProducerExpiryWorker
from coordinator.config.settings import Settings
from coordinator.files.loan_returns import LoanReturnWorker
from coordinator.files.object_store import ObjectStore
from coordinator.files.workers import FileWorker
from coordinator.runtime.shard import CoordinatorShard
from coordinator.runtime.worker_specs import RUNTIME_WORKERS
from coordinator.topics.move_worker import MoveWorker
from coordinator.topics.purge_worker import TopicPurger
from coordinator.topics.retention_worker import RetentionWorker

# ---------------------------------------------------------------- supervised: a coordinator's leader's work

FILE_WORKER = WorkerSpec(
    "file-worker", Scope.LEADER_ONLY, "WAL files: hands them over, takes unclaimed ones, schedules and runs deletions",
    "coordinator.files.workers:FileWorker.run", "file_worker_interval_ms",
)  # fmt: skip
TOPIC_PURGER = WorkerSpec(
    "topic-purger", Scope.LEADER_ONLY, "removes the batches of deleted topics, a bounded step a pass; woken by a "
    "deletion", "coordinator.topics.purge_worker:TopicPurger.run", "topic_purge_interval_ms",
)  # fmt: skip
PRODUCER_EXPIRY = WorkerSpec(
    "producer-expiry", Scope.LEADER_ONLY, "expires idempotent producers idle past producer.id.expiration.ms",
    "coordinator.runtime.shard.worker:PeriodicWorker.run", "producer_id_expiration_check_interval_ms",
)  # fmt: skip
RETENTION = WorkerSpec(
    "retention", Scope.LEADER_ONLY, "moves log start offsets past batches older or beyond the topic's retention",
    "coordinator.runtime.shard.worker:PeriodicWorker.run", "retention_check_interval_ms",
)  # fmt: skip
PARTITION_MOVES = WorkerSpec(
    "partition-moves", Scope.LEADER_ONLY, "drives the partitions frozen here for a move to their target: chunks, "
    "adoption; cancels one stuck past partition.move.timeout.ms before its adoption was asked",
    "coordinator.runtime.shard.worker:PeriodicWorker.run", "partition_move_interval_ms",
)  # fmt: skip
LOAN_RETURNS = WorkerSpec(
    "loan-returns", Scope.LEADER_ONLY, "gives WAL files a move's target borrowed and holds no live batch in back to "
    "their lenders (ReturnFiles), then forgets them", "coordinator.runtime.shard.worker:PeriodicWorker.run",
    "partition_move_interval_ms",
)  # fmt: skip

# ---------------------------------------------------------------- supervised: the node's own

READER_ADVERTISING = WorkerSpec(
    "reader-advertising", Scope.NODE, "names the node's reader processes in its etcd registration (in a cluster)",
    "coordinator.node.reader_advertising:ReaderAdvertising.run",
)  # fmt: skip
HEALTH = WorkerSpec(
    "health", Scope.NODE, "publishes SERVING / NOT_SERVING on the gRPC health service as coordinators and workers "
    "go in and out of service", "coordinator.node.assembly:track_health",
)  # fmt: skip

# ---------------------------------------------------------------- supervised: the node's own, in a cluster

# The cluster controller's loops (ClusterController.loops): each catches what etcd being away raises and tries again
# at its next round; what escapes that is counted and the loop started again after the backoff (each holds its state
# in the controller, so a new one goes on where the last stopped: a session lapsed is renewed or registered anew).

CLUSTER_SESSION = WorkerSpec(
    "cluster-session", Scope.NODE, "keeps the node's etcd lease alive (its liveness for the cluster)",
    "coordinator.cluster.controller:ClusterController._keep_alive", "node_heartbeat_interval_ms",
)  # fmt: skip
CLUSTER_REFRESH = WorkerSpec(
    "cluster-refresh", Scope.NODE, "reads assignments and live nodes from etcd, sets coordinators' roles, elects",
    "coordinator.cluster.controller:ClusterController._refresh_loop", "cluster_refresh_interval_ms",
)  # fmt: skip
INCARNATION_MARK = WorkerSpec(
    "cluster-directory-mark", Scope.NODE, "refreshes the incarnation marks of the node's replica directories",
    "coordinator.cluster.controller:ClusterController._mark_loop", "node_incarnation_mark_interval_ms",
)  # fmt: skip
PEER_DEATHS = WorkerSpec(
    "cluster-peer-deaths", Scope.NODE, "probes peers that stopped answering and revokes a dead one's session",
    "coordinator.cluster.peer_death:PeerDeathWatch.run", "peer_death_probe_interval_ms",
)  # fmt: skip
PREFERRED_LEADERS = WorkerSpec(
    "cluster-preferred-leaders", Scope.NODE, "moves leadership back to preferred replicas (auto leader rebalance)",
    "coordinator.cluster.preferred_leaders:balance_leaders", "leader_imbalance_check_interval_ms",
)  # fmt: skip

# ---------------------------------------------------------------- supervised: the node's child processes

# Each slot restarts its own child process with read.process.restart.backoff; a failure escaping that (a bug) may
# leave a child running that a restart would start a second of: counted, not started again, health NOT_SERVING.
# Both kinds run the same loop (ChildSupervisor.run), each over its own slots.
COMMIT_PROCESSES = WorkerSpec(
    "commit-processes", Scope.NODE, "keeps each commit process of a multi-process node running (restart, backoff)",
    "coordinator.base.child_processes:ChildSupervisor.run", "read_process_restart_backoff_ms", restart=False,
)  # fmt: skip
READER_PROCESSES = WorkerSpec(
    "reader-processes", Scope.NODE, "keeps each reader process running (restart with read.process.restart.backoff)",
    "coordinator.base.child_processes:ChildSupervisor.run", "read_process_restart_backoff_ms", restart=False,
)  # fmt: skip

# ---------------------------------------------------------------- at their seams (their owner makes the task)

# In a commit process (a child of the node's first process, with a node and a supervisor of its own): the wait for
# its parent's messages is what ends the process's serving, so it is the process's main task, not a worker of its
# node's supervisor, which that serving holds open and closes.
PARENT_MESSAGES = WorkerSpec(
    "parent-messages", Scope.NODE, "in a commit process: its parent's messages (damage reports, stop) until stopped",
    "coordinator.base.child_processes:wait_told_to_stop", None, "coordinator.node.processes.commit_process:_serve",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class WorkerInputs:
    """What a coordinator's supervised workers are made from (besides the coordinator)."""

    settings: Settings
    clock: Clock
    metrics: Metrics
    object_store: ObjectStore
    peers: PeerClient


CoordinatorFactory = Callable[[CoordinatorShard, WorkerInputs], Worker]

# The supervised workers of each coordinator, in start order.
COORDINATOR_WORKERS: tuple[tuple[WorkerSpec, CoordinatorFactory], ...] = (
    (FILE_WORKER, lambda shard, i: FileWorker(shard, i.settings, i.clock, i.object_store, i.peers, i.metrics)),
    (TOPIC_PURGER, lambda shard, i: TopicPurger(shard, i.settings, i.clock, i.metrics)),
    (PRODUCER_EXPIRY, lambda shard, i: ProducerExpiryWorker(shard, i.settings, i.clock, i.metrics)),
    (RETENTION, lambda shard, i: RetentionWorker(shard, i.settings, i.clock, i.metrics)),
    (PARTITION_MOVES, lambda shard, i: MoveWorker(shard, i.settings, i.clock, i.peers)),
    (LOAN_RETURNS, lambda shard, i: LoanReturnWorker(shard, i.settings, i.clock, i.peers)),
)

# The cluster controller's loops, in start order (those its settings turn off are not among its `loops`).
CLUSTER_WORKERS: tuple[WorkerSpec, ...] = (
    CLUSTER_SESSION, CLUSTER_REFRESH, INCARNATION_MARK, PEER_DEATHS, PREFERRED_LEADERS,
)  # fmt: skip


def start_cluster_workers(workers: WorkerSupervisor, controller: ClusterController) -> None:
    """Starts the controller's loops on the node's supervisor (once its coordinators are loading)."""
    loops = controller.loops()
    unknown = set(loops) - {spec.name for spec in CLUSTER_WORKERS}
    assert not unknown, f"cluster loops not declared in the worker registry: {sorted(unknown)}"
    for spec in CLUSTER_WORKERS:
        loop = loops.get(spec.name)
        if loop is not None:
            workers.start(spec, partial(LoopWorker, loop))


async def stop_cluster_workers(workers: WorkerSupervisor) -> None:
    """Stops the controller's loops and waits for them (before the controller closes its session)."""
    for spec in CLUSTER_WORKERS:
        await workers.stop_waiting(spec.name)


# Every worker, supervised or not: describe, the docs and the registry's test read this.
WORKERS: tuple[WorkerSpec, ...] = (
    *(spec for spec, _ in COORDINATOR_WORKERS),
    READER_ADVERTISING,
    HEALTH,
    *RUNTIME_WORKERS,
    CLUSTER_SESSION,
    CLUSTER_REFRESH,
    INCARNATION_MARK,
    PEER_DEATHS,
    PREFERRED_LEADERS,
    COMMIT_PROCESSES,
    READER_PROCESSES,
    PARENT_MESSAGES,
)
