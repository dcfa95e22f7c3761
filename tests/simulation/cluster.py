"""Nodes of a cluster in one process, on one simulated loop: real coordinators, logs and SQLite files, with etcd
and the network in memory (coordinator/cluster/memory_store.py, memory_transport.py).

Each node is what `diskless serve --etcd` assembles, less the gRPC server: its controller on a
`MemoryClusterStore`, its `Node` (shards, router, file workers) with inline executors and an in-memory transport,
registered on the network under its address. Faults are what a node meets in a data center:

- `crash`: the node stops answering and stops renewing its session at once (nothing is said to anyone: etcd lets
  its lease expire after the session timeout), then its files are closed without the clean-close mark, so its
  next load verifies every state as after kill -9 (what an in-process crash cannot do is lose the page cache:
  the real-process tests kill -9); `start` brings it back on the same data directory, once its old lease is gone;
- `pause`: cut off from every node and from etcd while it keeps running (a long GC pause, a partition), then
  `resume`: its session lapses meanwhile, so it must stop leading before another node is elected;
- partitions between two nodes, and the network's and etcd's faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
from collections.abc import Coroutine
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, final

from coordinator.base.clock import LoopClock
from coordinator.base.executors import inline_executor
from coordinator.base.metrics import Metrics
from coordinator.cluster.controller import ClusterController
from coordinator.cluster.memory_store import MemoryClusterStore, MemoryEtcd
from coordinator.cluster.memory_transport import MemoryNetwork
from coordinator.cluster.store import NodeEndpoint
from coordinator.config.loading import load_settings
from coordinator.config.settings import Settings
from coordinator.machine.state.integrity import take_clean_close_mark
from coordinator.node.cluster_growth import follow_cluster_count
from coordinator.node.node import Node, coordinator_directory, replica_on_disk
from coordinator.node.worker_registry import start_cluster_workers, stop_cluster_workers
from coordinator.reads.find_coordinator import Endpoint
from coordinator.runtime.shard import CoordinatorShard

EPOCH_MS = 1_700_000_000_000  # what the nodes' wall clocks read at the simulation's start
BASE_PORT = 9000
log = logging.getLogger(__name__)


def sim_settings(data_dir: Path, node_id: int, coordinators: int, extra: dict[str, str]) -> Settings:
    return load_settings(
        None,
        {
            "diskless.data.dir": data_dir,
            "diskless.node.id": node_id,
            "diskless.listen": f"127.0.0.1:{BASE_PORT + node_id}",
            "diskless.cluster.etcd.endpoints": "etcd.simulated:2379",
            "diskless.metadata.topic.num.partitions": coordinators,
            "diskless.coordinator.replication.factor": 3,
            "diskless.server.read.processes": 0,
            # SQLite checkpoints by itself: the state's own checkpoint thread would be a second thread.
            "diskless.coordinator.state.checkpoint.pages": 0,
            "diskless.storage.local.root": data_dir.parent / "objects",
            **extra,
        },
        environ={},
    )


@final
@dataclass(slots=True)
class SimNode:
    node_id: int
    data_dir: Path
    settings: Settings
    store: MemoryClusterStore
    node: Node | None = None
    controller: ClusterController | None = None
    paused: bool = False
    starting: bool = False  # joining or loading: not yet crashed or paused by the workload

    @property
    def address(self) -> str:
        return f"127.0.0.1:{BASE_PORT + self.node_id}"

    @property
    def running(self) -> bool:
        return self.node is not None

    @property
    def up(self) -> bool:
        """Started and serving its part (neither down nor still starting)."""
        return self.node is not None and not self.starting

    @property
    def down(self) -> bool:
        return self.node is None and not self.starting

    def shard(self, coordinator_id: int) -> CoordinatorShard:
        assert self.node is not None, f"node {self.node_id} is not running"
        return self.node.shards[coordinator_id]


@final
class SimCluster:
    def __init__(
        self,
        root: Path,
        loop: asyncio.AbstractEventLoop,
        seed: int,
        nodes: int = 3,
        coordinators: int = 4,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.clock = LoopClock(loop, EPOCH_MS)
        self.etcd = MemoryEtcd(self.clock)
        self.network = MemoryNetwork(self.clock, seed)
        self.coordinators = coordinators
        extra = settings or {}
        self.nodes = [
            SimNode(i, root / f"node-{i}", sim_settings(root / f"node-{i}", i, coordinators, extra), self._store())
            for i in range(nodes)
        ]

    def _store(self) -> MemoryClusterStore:
        return MemoryClusterStore(self.etcd)

    def etcd_store(self) -> MemoryClusterStore:
        """A client of the cluster's etcd for the test itself (no node's, so never cut off)."""
        return self._store()

    # ------------------------------------------------------------------ life of a node

    async def start_all(self) -> None:
        await asyncio.gather(*(self.start(n.node_id) for n in self.nodes))

    def start(self, node_id: int) -> Coroutine[Any, Any, None]:
        """What `diskless serve --etcd` does, in order: join (once the old lease is gone), assemble, load, serve.

        The node counts as starting from this call on, before the returned coroutine first runs.
        """
        sim = self.nodes[node_id]
        assert sim.down, f"node {node_id} runs or starts already"
        sim.starting = True
        return self._starting(sim)

    async def _starting(self, sim: SimNode) -> None:
        try:
            await self._start(sim)
        except BaseException:
            if sim.node is None:  # it never served: its port closes with it
                self.network.detach(sim.address)
            raise
        finally:
            sim.starting = False

    async def _start(self, sim: SimNode) -> None:
        node_id = sim.node_id
        sim.store = self._store()
        settings = sim.settings
        self.network.bind(sim.address)
        controller = ClusterController(settings, NodeEndpoint(node_id, "127.0.0.1", BASE_PORT + node_id), sim.store,
                                       self.clock, partial(replica_on_disk, sim.data_dir))  # fmt: skip
        config = await controller.join()
        # The count etcd holds wins over the node's settings (an add may have raised it: `diskless coordinators add`).
        assert config.coordinators >= self.coordinators
        self.coordinators = config.coordinators
        node = Node(
            dataclasses.replace(settings, coordinators=config.coordinators),
            clock=self.clock,
            metrics=Metrics(),
            roles=dict(controller.initial_roles()),
            link=controller,
            transport=self.network.transport(sim.address),
            executors=inline_executor,
        )
        node.router.endpoint = Endpoint("127.0.0.1", BASE_PORT + node_id)
        controller.attach(node.peers, node.shards)
        node.router.elector = controller
        follow_cluster_count(node, controller, lambda shard: shard, lambda: None)
        sim.node, sim.controller, sim.paused = node, controller, False
        self.network.attach(sim.address, node.router)
        await node.load()
        start_cluster_workers(node.workers, controller)
        await node.start_workers()

    async def crash(self, node_id: int) -> None:
        """Gone at once for everyone (no lease revoked: etcd lets it expire); then its files are closed."""
        sim = self.nodes[node_id]
        node, controller = sim.node, sim.controller
        assert sim.up and node is not None and controller is not None, f"node {node_id} is not up"
        self.network.detach(sim.address)
        sim.store.reachable = False
        sim.node, sim.controller, sim.paused = None, None, False
        await stop_cluster_workers(node.workers)
        await controller.close()  # its revoke cannot reach etcd
        await node.close()
        # A crash leaves no clean-close mark: the next load verifies each state as after kill -9.
        for coordinator_id in range(len(node.shards)):
            take_clean_close_mark(coordinator_directory(sim.data_dir, coordinator_id))

    def wipe(self, node_id: int) -> None:
        """A stopped node's disk lost: its data directory emptied (an operator replacing a failed disk)."""
        sim = self.nodes[node_id]
        assert sim.down, f"node {node_id} must be stopped before its disk is wiped"
        shutil.rmtree(sim.data_dir)
        sim.data_dir.mkdir(parents=True)

    def pause(self, node_id: int) -> None:
        """Cut off from every node and from etcd, still running."""
        sim = self.nodes[node_id]
        assert sim.up and not sim.paused
        sim.paused = True
        sim.store.reachable = False
        self._cut_off(sim)

    def _cut_off(self, sim: SimNode) -> None:
        for other in self.nodes:
            if other.node_id != sim.node_id:
                self.network.partition(sim.address, other.address)

    def heal_network(self) -> None:
        """Every partition between nodes healed and the network sound again; a paused node stays cut off."""
        self.network.heal()
        faults = self.network.faults
        faults.drop_request = faults.drop_answer = faults.duplicate = faults.delay = 0.0
        for sim in self.nodes:
            if sim.paused:
                self._cut_off(sim)

    def resume_all(self) -> None:
        for sim in self.nodes:
            if sim.paused:
                sim.paused = False
                sim.store.reachable = True
        self.network.heal()

    async def close(self) -> None:
        for sim in self.nodes:
            if sim.up:
                with contextlib.suppress(Exception):
                    await self.crash(sim.node_id)

    # ------------------------------------------------------------------ what the cluster looks like

    def running(self) -> list[SimNode]:
        return [n for n in self.nodes if n.node is not None]

    def leaders(self, coordinator_id: int) -> list[SimNode]:
        """Every running node whose replica of the coordinator acts as leader now (more than one: a split brain)."""
        return [n for n in self.running() if n.shard(coordinator_id).leads]
