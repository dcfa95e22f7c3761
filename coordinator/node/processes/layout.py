"""A node spread over commit processes: which process leads which coordinator, and where each listens (pure).

With `diskless.node.processes` = N > 1, coordinator c is led by commit process c mod N. The node's first
process (the one `diskless serve` started, on the listen address) leads none: it holds the catalog, answers
FindCoordinator with each commit process's address, routes the calls of clients that send everything to the
listen address, and runs the reader processes. In each process, a coordinator led by another one has the role
NOT_REPLICA, naming where it is led, as a node of a cluster names a coordinator it holds no replica of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from coordinator.client.routes import target
from coordinator.runtime.replication.role import ReplicaRole, RoleKind

PORT_MAX = 65535


@final
@dataclass(frozen=True, slots=True)
class ProcessLayout:
    node_id: int
    host: str  # where every process of the node is reached (the advertised host)
    front_port: int  # the node's first process: the listen address
    ports: tuple[int, ...]  # commit process i listens on ports[i]

    def __post_init__(self) -> None:
        if not self.ports or any(not 0 < p <= PORT_MAX for p in (self.front_port, *self.ports)):
            raise ValueError(f"a process layout needs ports 1..{PORT_MAX}, got {self.front_port} and {self.ports}")

    @property
    def count(self) -> int:
        return len(self.ports)

    @property
    def front_address(self) -> str:
        return target(self.host, self.front_port)

    def owner(self, coordinator_id: int) -> int:
        """The commit process leading the coordinator."""
        return coordinator_id % len(self.ports)

    def address(self, index: int) -> str:
        return target(self.host, self.ports[index])

    def led_by(self, index: int, coordinators: int) -> list[int]:
        return [c for c in range(coordinators) if self.owner(c) == index]

    def roles(self, coordinators: int, index: int | None) -> dict[int, ReplicaRole | None]:
        """Each coordinator's role in commit process `index` (None: the first process, which leads none).

        None where the process leads it (a lone node's rules: no epochs from etcd, no followers); else
        NOT_REPLICA with the address of the process that leads it.
        """
        roles: dict[int, ReplicaRole | None] = {}
        for coordinator_id in range(coordinators):
            owner = self.owner(coordinator_id)
            if owner == index:
                roles[coordinator_id] = None
                continue
            address = self.address(owner)
            roles[coordinator_id] = ReplicaRole(
                kind=RoleKind.NOT_REPLICA,
                node_id=self.node_id,
                leader_node_id=self.node_id,
                leader_epoch=0,
                leader_address=address,
                replicas=(self.node_id,),
                isr=(self.node_id,),
                replica_addresses=((self.node_id, address),),
            )
        return roles


def fixed_ports(listen_port: int, count: int) -> tuple[int, ...] | None:
    """The commit processes' ports after a fixed listen port (listen + 1 + index); None for port 0 or past 65535."""
    if listen_port == 0:
        return None
    ports = tuple(listen_port + 1 + index for index in range(count))
    return ports if ports[-1] <= PORT_MAX else None
