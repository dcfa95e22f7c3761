"""`coordinator-replicated`: three `diskless serve` nodes of one cluster on a local etcd (DESIGN §6a).

Replication factor 3 and min.insync.replicas 2 (the defaults): every coordinator has a replica on each node,
and a commit is answered once the leader and at least one follower hold it. The nodes run with the product's
session, heartbeat and refresh settings unless the run sets others (`--set`).

One etcd member, not three: etcd is not on the commit path (it holds the nodes' leases, the elections and the ISR
changes), and two more etcd processes would take CPU from the nodes on a small machine. The harness installs
Debian's etcd-server if etcd is missing, as it installs PostgreSQL (unless `--no-install`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import final

from bench.coordinator_system import CoordinatorServer
from bench.local_etcd import EtcdCluster
from bench.systems import SystemUnavailable
from coordinator.config.settings import describe_settings

REPLICATED = "coordinator-replicated"
NODES = 3
ETCD_MEMBERS = 1
# The settings that decide replication and failover; the results state each one's value in the run.
CLUSTER_SETTINGS = (
    "diskless.coordinator.replication.factor",
    "diskless.coordinator.min.insync.replicas",
    "diskless.node.session.timeout.ms",
    "diskless.node.heartbeat.interval.ms",
    "diskless.cluster.refresh.interval.ms",
    "diskless.coordinator.replica.lag.time.max.ms",
    "diskless.coordinator.replica.fetch.wait.max.ms",
    "diskless.cluster.auto.leader.rebalance.enable",
    "diskless.cluster.leader.imbalance.check.interval.ms",
)
APT_TIMEOUT_S = 600
NODE_START_TIMEOUT_S = 120  # a node listens once the cluster formed; its data is small (no prebuilt state)
NODE_STOP_TIMEOUT_S = 15.0


def cluster_settings(settings: dict[str, str]) -> dict[str, str]:
    """The value of each of CLUSTER_SETTINGS in a node given `settings`: its own or the default."""
    defaults = {name: default for name, default, _ in describe_settings()}
    return {name: settings.get(name, defaults[name]) for name in CLUSTER_SETTINGS}


def ensure_etcd(install: bool) -> None:
    """Installs Debian's etcd-server if etcd is missing and installing is allowed; else the system is skipped."""
    if shutil.which("etcd") is not None:
        return
    if not install:
        raise SystemUnavailable("etcd is not installed (apt-get install -y etcd-server) and --no-install")
    if shutil.which("apt-get") is None:
        raise SystemUnavailable("etcd is not installed and apt-get is not available")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "etcd-server"]):
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=APT_TIMEOUT_S,
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemUnavailable(f"{' '.join(command)} failed: {done.stderr.strip()[-300:]}")
    if shutil.which("etcd") is None:
        raise SystemUnavailable("apt-get installed etcd-server but there is no etcd command")


@final
class ReplicatedCluster:
    """An etcd and `NODES` nodes (`--node-id I --etcd ENDPOINTS`), each with its data directory; node I is
    `nodes[I]`. A killed node restarts on its port and data directory, as an operator restarts a crashed one."""

    def __init__(self, directory: Path, coordinators: int, settings: dict[str, str], install: bool) -> None:
        self.directory = directory
        self.install = install
        self.settings = settings
        self.etcd: EtcdCluster | None = None
        self.nodes = [
            CoordinatorServer(directory / f"node{i}", coordinators, settings, arguments=("--node-id", str(i)))
            for i in range(NODES)
        ]

    def start(self) -> None:
        ensure_etcd(self.install)
        self.etcd = EtcdCluster(self.directory / "etcd", ETCD_MEMBERS)
        self.etcd.start()
        for node in self.nodes:
            node.arguments = (*node.arguments, "--etcd", self.etcd.endpoints)
        # A node listens once the cluster has formed, which takes every node: they start together.
        with ThreadPoolExecutor(len(self.nodes)) as starting:
            for started in [starting.submit(node.start, NODE_START_TIMEOUT_S) for node in self.nodes]:
                started.result()

    def add_node(self) -> CoordinatorServer:
        """Starts one more node (the next id) on the running cluster: it registers and holds nothing until a
        reassignment gives it replicas. Returns once it listens."""
        assert self.etcd is not None, "the cluster must be started first"
        node_id = len(self.nodes)
        node = CoordinatorServer(
            self.directory / f"node{node_id}", self.nodes[0].coordinators, self.settings,
            arguments=("--node-id", str(node_id), "--etcd", self.etcd.endpoints),
        )  # fmt: skip
        self.nodes.append(node)
        node.start(NODE_START_TIMEOUT_S)
        return node

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def restart(self, node_id: int) -> None:
        """Starts a killed node again; returns once it listens (it loads and catches up after)."""
        self.nodes[node_id].start(NODE_START_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM to every node at once, kill -9 to those still running after NODE_STOP_TIMEOUT_S, then etcd.

        At once and bounded: a cluster node whose peers have stopped drains for its whole drain timeout (10 s),
        though no call is in flight, and has been seen not to exit at all; the data is thrown away after.
        """
        for node in self.nodes:
            node.terminate()
        for node in self.nodes:
            node.wait_stopped(NODE_STOP_TIMEOUT_S)
        if self.etcd is not None:
            self.etcd.stop()
