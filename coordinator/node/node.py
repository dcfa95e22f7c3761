"""One node: the coordinators it hosts, loaded together and closed together.

Alone, the node leads coordinators 0..N-1. In a cluster (DESIGN §6a) it holds
a shard for every coordinator, each in the role etcd gives it (leader,
follower, offline, or no replica here), and the cluster controller changes
those roles as leaders come and go.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path

from coordinator.base.clock import Clock, SystemClock
from coordinator.base.executors import ExecutorFactory, thread_executor
from coordinator.base.metrics import Metrics
from coordinator.base.workers import SupervisionBounds, Worker, WorkerSupervisor
from coordinator.cluster.peers import PeerAddress, PeerClient
from coordinator.cluster.transport import Transport
from coordinator.config.settings import Settings
from coordinator.files.object_store import ObjectStore, StoreConfig, open_object_store
from coordinator.machine import kinds
from coordinator.machine.catalog import PlacedPartition, TopicCatalog
from coordinator.node.router import Router
from coordinator.node.worker_registry import COORDINATOR_WORKERS, TOPIC_PURGER, WorkerInputs
from coordinator.runtime.replication.fetcher import ReplicaFetcher
from coordinator.runtime.replication.link import ClusterLink
from coordinator.runtime.replication.role import ReplicaRole, RoleKind
from coordinator.runtime.shard import CoordinatorShard, ShardState
from coordinator.runtime.shard.append_ticks import AppendTicks
from coordinator.runtime.worker_specs import REPLICA_FETCHER
from protos import records_pb2 as rec

log = logging.getLogger(__name__)


def coordinator_directory(data_dir: Path, coordinator_id: int) -> Path:
    return data_dir / f"coordinator-{coordinator_id}"


def replica_on_disk(data_dir: Path, coordinator_id: int) -> bool:
    """Whether the data directory holds a log of the coordinator (its log directory with a segment in it)."""
    log_directory = coordinator_directory(data_dir, coordinator_id) / "log"
    return log_directory.is_dir() and any(log_directory.glob("*.log"))


class Node:
    def __init__(
        self,
        settings: Settings,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        roles: Mapping[int, ReplicaRole | None] | None = None,
        link: ClusterLink | None = None,
        catalog_address: str | None = None,
        transport: Transport | None = None,
        executors: ExecutorFactory = thread_executor,
    ) -> None:
        self.settings = settings
        clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        # Every background worker of the node runs under this one owner (coordinator/node/worker_registry.py): its
        # coordinators' too, each started by the coordinator's lifecycle.
        self.workers = WorkerSupervisor(clock, SupervisionBounds.of(settings), self._count_worker_failure,
                                        self.health_changed)  # fmt: skip
        ticks = AppendTicks(settings.append_linger_ms)  # a commit's parts on several coordinators written together
        # In a cluster, one fetch loop per leader node for every coordinator followed there (a node-scope worker).
        self.replica_fetcher = ReplicaFetcher(settings, clock, link) if link is not None else None

        def make_shard(i: int, role: ReplicaRole | None) -> CoordinatorShard:
            return CoordinatorShard(
                i,
                coordinator_directory(settings.data_dir, i),
                settings,
                clock,
                self.metrics,
                self._shard_state_changed,
                self._topic_records_applied,
                role,
                link,
                ticks,
                executors,
                self.replica_fetcher,
                self.workers,
            )

        # Coordinators added online (CreateCoordinators, coordinator/node/growth.py) are made the same way.
        self._make_shard = make_shard
        self.shards = [make_shard(i, None if roles is None else roles[i]) for i in range(settings.coordinators)]
        self._loaded = False
        self._health_changed = asyncio.Event()
        # Told of every state change of a coordinator (the reader processes' status board).
        self.state_listeners: list[Callable[[CoordinatorShard], None]] = []
        # Told of every coordinator that applied records the catalog follows (a commit process tells its first process).
        self.catalog_listeners: list[Callable[[int], None]] = []
        # Derived from the coordinators' records only: rebuilt when one (re)loads, followed as they apply.
        self.catalog = TopicCatalog()
        # A commit process (coordinator/node/processes/) sends catalog calls to its node's first process, which holds
        # the whole catalog; that process reads the partitions its commit processes lead from their state files.
        self._catalog_address = catalog_address
        self.outside_partitions: Callable[[], Iterable[PlacedPartition]] = lambda: ()
        # Whether the rest of the node serves (its commit processes, seen from its first process).
        self.others_serving: Callable[[], bool] = lambda: True
        # Calls to other nodes: gRPC sockets, or the simulated cluster's in-memory network.
        self.peers = PeerClient(settings, self._peer_address, transport)
        self.router = Router(self.shards, settings, clock, self.metrics, self.catalog, self.peers, self._catalog_holder)
        self._clock = clock
        self.object_store: ObjectStore | None = None
        self._worker_inputs: WorkerInputs | None = None  # set once the workers start
        self.router.worker_statuses = self.workers.statuses

    def _peer_address(self, coordinator_id: int) -> PeerAddress:
        """The node leading the coordinator: alone, this node's own address; in a cluster, etcd's leader."""
        # A coordinator another node's add made that this node has not made yet (it does at its next refresh): asked
        # here, it answers NOT_COORDINATOR, and the caller retries as for any leader change.
        role = self.shards[coordinator_id].role if coordinator_id < len(self.shards) else None
        if role is not None and role.leader_address:
            host, _, port = role.leader_address.rpartition(":")
            return PeerAddress(host, int(port))
        return PeerAddress(self.router.endpoint.host, self.router.endpoint.port)

    def _catalog_holder(self) -> str | None:
        """Where brokers' catalog calls go from a node holding no replica: coordinator 0's leader.

        That leader asks the leaders of coordinators it holds no replica of about partitions it does not know
        (topics/absent.py, reads/find_coordinator.py). None where this node holds a replica (it answers itself) or
        no leader is known (the call is answered here, with retriable errors).
        """
        if self._catalog_address is not None:
            return self._catalog_address
        roles = [shard.role for shard in self.shards]
        if not roles or any(role is None or role.kind is not RoleKind.NOT_REPLICA for role in roles):
            return None
        first = roles[0]
        return first.leader_address if first is not None and first.leader_address else None

    async def load(self) -> bool:
        """Loads every coordinator; True when all are ACTIVE.

        A coordinator that failed to load is out of service (its reason logged) and goes on
        trying by itself, unless only an operator can settle its failure.
        """
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        await self.workers.open()  # the coordinators' own workers start as they load
        fetcher = self.replica_fetcher
        if fetcher is not None:  # before the coordinators load: followers join it as they become ones
            self.workers.start(REPLICA_FETCHER, lambda: fetcher)
        outcomes = await asyncio.gather(*(shard.load() for shard in self.shards), return_exceptions=True)
        self.rebuild_catalog()
        self._loaded = True
        return not any(isinstance(o, BaseException) for o in outcomes)

    def serving(self) -> bool:
        """Whether every coordinator with a replica here serves, as leader or follower, and no background worker
        keeps failing (the node's health)."""
        return (
            self.others_serving()
            and all(shard.state is ShardState.ACTIVE for shard in self.shards if _hosted(shard))
            and not self.workers.failing()
        )

    def _count_worker_failure(self, name: str, coordinator_id: int) -> None:
        self.metrics.worker_failures.labels(name, "" if coordinator_id < 0 else str(coordinator_id)).inc()

    def health_changed(self) -> None:
        """Wakes `wait_health_change` (the rest of the node went in or out of service)."""
        self._health_changed.set()

    async def wait_health_change(self) -> None:
        """Returns after some coordinator went in or out of service."""
        await self._health_changed.wait()
        self._health_changed.clear()

    def _shard_state_changed(self, shard: CoordinatorShard) -> None:
        if shard.state is ShardState.ACTIVE and self._loaded:
            self.rebuild_catalog()  # back in service: its partitions are known again
        self._follow_leadership(shard)  # a new leader's purger goes on with a purge left half done
        self._health_changed.set()
        for listener in self.state_listeners:
            listener(shard)

    def rebuild_catalog(self) -> None:
        """Reads every loaded coordinator's partitions into the catalog, and those the node's other processes lead."""
        here = []
        for shard in self.shards:
            if shard.state is ShardState.ACTIVE:
                frozen = shard.frozen_partitions()  # a move's source: its target wins once it adopted (design §5a)
                here += [
                    PlacedPartition(
                        shard.coordinator_id, p.topic_id, p.topic_name, p.partition, (p.topic_id, p.partition) in frozen
                    )
                    for p in shard.partitions()
                ]
        self.catalog.rebuild([*here, *self.outside_partitions()])

    def _topic_records_applied(self, coordinator_id: int, records: Sequence[rec.MetadataRecord]) -> None:
        """A coordinator applied partition creations, topic deletions or batches set aside for the purge (a move's
        drop or an abandoned adoption): the catalog follows, the purge starts."""
        self.catalog.apply_records(coordinator_id, records)
        if any(_starts_purge(record) for record in records):
            self.workers.wake(TOPIC_PURGER.name, coordinator_id)
        for listener in self.catalog_listeners:
            listener(coordinator_id)

    async def start_workers(self) -> None:
        """Opens the node's worker supervisor and starts the workers of every coordinator led here (once the node
        answers calls); from then on each leadership won or lost starts or stops its coordinator's workers."""
        await self.workers.open()
        self.object_store = open_object_store(StoreConfig.from_settings(self.settings))
        self._worker_inputs = WorkerInputs(self.settings, self._clock, self.metrics, self.object_store, self.peers)
        for shard in self.shards:
            self._follow_leadership(shard)

    def _follow_leadership(self, shard: CoordinatorShard) -> None:
        """The coordinator's leader-only workers run while it serves and is led here, and only then."""
        inputs = self._worker_inputs
        if inputs is None:
            return  # not started yet (start_workers starts those of every coordinator led by then)
        leads = shard.state is ShardState.ACTIVE and shard.leads
        for spec, factory in COORDINATOR_WORKERS:
            if leads:
                self.workers.start(spec, partial(factory, shard, inputs), shard.coordinator_id)
            else:
                self.workers.stop(spec.name, shard.coordinator_id)

    def running_workers(self, name: str) -> dict[int, Worker]:
        """The supervised workers of one kind now running, by coordinator id (tests and gauges look at them)."""
        return self.workers.workers(name)

    async def add_coordinators(self, count: int, roles: Mapping[int, ReplicaRole] | None = None) -> bool:
        """Creates and loads coordinators len(shards)..count-1 (their directories, logs and states are made by the
        load), then routes calls to them and starts their workers; True when all the new ones are ACTIVE. In a
        cluster each starts in the role `roles` gives it (coordinator/node/cluster_growth.py).

        They are loaded before any call reaches them, so no partition is placed on a coordinator still loading;
        one that failed to load goes on trying by itself, as at start.
        """
        added = [self._make_shard(i, None if roles is None else roles[i]) for i in range(len(self.shards), count)]
        if not added:
            return True
        self.settings = dataclasses.replace(self.settings, coordinators=count)
        self.shards.extend(added)  # before the load: the catalog rebuilt on each one's ACTIVE includes it
        outcomes = await asyncio.gather(*(shard.load() for shard in added), return_exceptions=True)
        self.router.add_shards(added)
        self.rebuild_catalog()
        for shard in added:
            self._follow_leadership(shard)  # led here once loaded: their leader-only workers start
        return not any(isinstance(o, BaseException) for o in outcomes)

    async def close(self) -> None:
        self._worker_inputs = None  # coordinators closing start no worker again
        for shard in self.shards:
            for spec, _ in COORDINATOR_WORKERS:
                await self.workers.stop_waiting(spec.name, shard.coordinator_id)
        await self.peers.close()
        # Each coordinator stops its own workers (its life loop drains it first); the fetcher after them: their
        # followers have left it. What is left of the node's own ends with the supervisor.
        await asyncio.gather(*(shard.close() for shard in self.shards))
        await self.workers.stop_waiting(REPLICA_FETCHER.name)
        await self.workers.close()
        if self.object_store is not None:
            self.object_store.close()


def _starts_purge(record: rec.MetadataRecord) -> bool:
    found = kinds.find(record)
    if found is None:
        return False
    changes = found[0].partition_changes(found[1])
    return bool(changes.deleted_topics) or changes.purge_pending


def _hosted(shard: CoordinatorShard) -> bool:
    """Whether the node holds a replica of the shard's coordinator that has a leader."""
    return shard.role is None or shard.role.kind in (RoleKind.LEADER, RoleKind.FOLLOWER)
