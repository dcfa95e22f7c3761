"""A real cluster on a real network: tests/cluster_harness.py's cluster (etcd members and `diskless serve` nodes)
with each process in a network namespace of its own (tests/netns.py), so a test can cut, heal and degrade the links
between any two of them while the test runner still reaches every node through the bridge.

Namespaces are named `node0`…, `etcd0`…; `cut_node_from_nodes`, `cut_node_from_etcd` and friends name the Jepsen
partitions the scenarios use (tests/test_network_partitions.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.cluster_harness import Cluster
from tests.netns import Network

# No reader processes: they would add a process per node on a 2-core machine, and the workload only commits.
NETNS_SETTINGS = {"diskless.server.read.processes": "0"}
ETCD_ELECTION = re.compile(r"elected leader \S+ at term (\d+)")


class NetnsCluster(Cluster):
    """`size` nodes and `etcd_members` etcd members, one namespace each; `stop()` also removes the network."""

    def __init__(
        self,
        directory: Path,
        size: int = 3,
        coordinators: int = 2,
        settings: dict[str, str] | None = None,
        etcd_members: int = 3,
    ) -> None:
        # Off loopback a node serves only under an ACL: every caller (all are anonymous in plaintext) may do all.
        acl = directory / "acl"
        directory.mkdir(parents=True, exist_ok=True)
        acl.write_text("User:ANONYMOUS CLUSTER_ACTION,DESCRIBE,ALTER,INTERNAL\n")
        settings = {**NETNS_SETTINGS, "diskless.acl.file": str(acl), **(settings or {})}
        super().__init__(directory, size=size, coordinators=coordinators, settings=settings, etcd_members=etcd_members)
        self.network = Network.make()
        try:
            for index, member in enumerate(self.etcd.members):
                namespace = self.network.add(f"etcd{index}")
                member.host, member.command_prefix = namespace.address, namespace.exec_prefix()
            for index, node in enumerate(self.nodes):
                namespace = self.network.add(f"node{index}")
                node.host, node.command_prefix = namespace.address, namespace.exec_prefix()
                # The network is the test's own bridge, reached by nothing else: plaintext as on loopback.
                node.arguments = (*node.arguments, "--allow-plaintext")
        except BaseException:
            self.network.close()
            raise

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(len(self.nodes))]

    @property
    def etcd_names(self) -> list[str]:
        return [f"etcd{i}" for i in range(len(self.etcd.members))]

    def etcd_term(self) -> int:
        """The highest raft term any etcd member logged an election in (etcd's own log: a count of elections)."""
        terms = [
            int(match.group(1))
            for member in self.etcd.members
            if (log := member.data_dir.parent / f"{member.name}.log").exists()
            for match in ETCD_ELECTION.finditer(log.read_text(errors="replace"))
        ]
        return max(terms, default=0)

    def node_id_at(self, address: str) -> int:
        """The node listening at HOST:PORT (-1 for none)."""
        return next((i for i, node in enumerate(self.nodes) if node.address == address), -1)

    # ------------------------------------------------------------------ partitions

    def cut_node_from_nodes(self, node_id: int) -> None:
        """The node reaches etcd and the runner, no other node (nor they it)."""
        name = f"node{node_id}"
        self.network.cut(name, [n for n in self.node_names if n != name])

    def cut_node_from_etcd(self, node_id: int) -> None:
        """The node reaches the other nodes and the runner, no etcd member."""
        self.network.cut(f"node{node_id}", self.etcd_names)

    def isolate_node(self, node_id: int) -> None:
        """The node reaches nothing but the runner (which may still ask it what it thinks)."""
        name = f"node{node_id}"
        self.network.cut(name, [n for n in [*self.node_names, *self.etcd_names] if n != name])

    def heal(self) -> None:
        self.network.heal()

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.network.close()
            for index, node in enumerate(self.nodes):  # whole, for a failure's post-mortem (the test prints the tail)
                (node.data_dir.parent / f"node{index}.log").write_text("".join(node.output))
