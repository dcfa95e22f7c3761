"""The cluster's metadata as the controller sees it (DESIGN §6a): a Protocol with two implementations.

`etcd_store.EtcdClusterStore` keeps it in a real etcd; `memory_store.MemoryClusterStore` keeps it in this
process with etcd's semantics (revisions, compare-and-put, leases that expire on a `Clock`, watches), so that
a whole cluster runs in one process on one clock. What the controller asks of either:

- `nodes/<id>`: a live node's endpoint, under its session lease: it vanishes when the lease expires;
- `config`: the cluster's coordinator count and replication factor, written by the first node; the count rises
  afterwards only by a compare-and-set on the key's revision (`diskless coordinators add`);
- `placement`: the nodes the cluster formed over, written once by the first node to see enough of them;
- `coordinators/<id>`: a `CoordinatorAssignment`, changed only by a compare-and-set on the key's revision.

A node's session (`NodeSession`) is the same for both: how long it is surely still valid is counted on the
node's clock from before each renewal was sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from coordinator.base.clock import Clock
from coordinator.cluster.assignment import CoordinatorAssignment


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    incarnation: str = ""  # the node's data directory's identity and start count (`incarnation.py`)
    read_addresses: tuple[str, ...] = ()  # HOST:PORT of its reader processes (FindBatches), once they listen


def node_value(endpoint: NodeEndpoint) -> bytes:
    """A node's key's value in the store (JSON; a field added later is read with its default from older values)."""
    value: dict[str, Any] = {"host": endpoint.host, "port": endpoint.port, "incarnation": endpoint.incarnation}
    if endpoint.read_addresses:
        value["read_addresses"] = list(endpoint.read_addresses)
    return json.dumps(value).encode()


def node_endpoint(node_id: int, raw: bytes | str) -> NodeEndpoint:
    value = json.loads(raw)
    readers = tuple(str(address) for address in value.get("read_addresses", ()))
    return NodeEndpoint(node_id, value["host"], int(value["port"]), str(value.get("incarnation", "")), readers)


@dataclass(frozen=True, slots=True)
class NodeRegistration:
    """A live node's key as read: its endpoint and the lease it is under (its session; a restart gets another)."""

    endpoint: NodeEndpoint
    lease_id: int


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    coordinators: int
    replication_factor: int
    # The count the cluster formed with, once an add raised it (-1: never raised): coordinators below it are placed
    # as at formation, those above as added (`joining.place_missing`).
    formed: int = -1

    @property
    def formed_count(self) -> int:
        return self.coordinators if self.formed < 0 else self.formed


def config_value(config: ClusterConfig) -> bytes:
    """The `config` key's value (JSON; `formed` only once an add wrote it)."""
    value = {"coordinators": config.coordinators, "replication_factor": config.replication_factor}
    if config.formed >= 0:
        value["formed"] = config.formed
    return json.dumps(value).encode()


def config_of(raw: bytes | str) -> ClusterConfig:
    data = json.loads(raw)
    return ClusterConfig(int(data["coordinators"]), int(data["replication_factor"]), int(data.get("formed", -1)))


def counted(config: ClusterConfig, count: int) -> ClusterConfig:
    """The configuration with another coordinator count, remembering the count it formed with."""
    return ClusterConfig(count, config.replication_factor, config.formed_count)


@dataclass(frozen=True, slots=True)
class VersionedAssignment:
    """An assignment with the revision it was read at: the compare of the next change."""

    assignment: CoordinatorAssignment
    revision: int


class SessionExpired(Exception):
    """The store let the node's lease expire: the node is gone from the cluster until it registers again."""


class NodeIdTaken(Exception):
    """Another live node holds the id (or this node's previous lease has not expired yet)."""


class Lease(Protocol):
    @property
    def lease_id(self) -> int: ...

    async def refresh(self) -> int:
        """Keeps the lease alive; the seconds it has left as the store says, 0 or less once it expired."""
        ...


class ClusterStore(Protocol):
    async def register_node(self, endpoint: NodeEndpoint, ttl_s: int) -> Lease:
        """Grants a lease and puts the node's key under it; NodeIdTaken if another live node holds the id."""
        ...

    async def update_node(self, endpoint: NodeEndpoint, lease_id: int) -> None:
        """Rewrites the node's key under its lease (its reader addresses changed); raises if the lease is gone."""
        ...

    async def revoke(self, lease_id: int) -> None:
        """Ends a session at once (a clean stop): the node's key goes, other nodes elect without waiting."""
        ...

    async def live_nodes(self) -> dict[int, NodeEndpoint]: ...

    async def node_registration(self, node_id: int) -> NodeRegistration | None:
        """The node's key with its lease (None when it is not registered): what a peer revokes once it saw the
        node's process gone (`peer_death.py`), that registration's lease and no later one's."""
        ...

    async def directory_mark(self, node_id: int) -> str:
        """The mark of its data directory the node last recorded ("" if none): kept when its session ends, so that
        a directory restored from an earlier copy is found out at the next start (coordinator/cluster/incarnation.py).
        """
        ...

    async def record_directory_mark(self, node_id: int, mark: str) -> None:
        """Records the mark the node's data directory holds now (written there durably first)."""
        ...

    async def first_registered(self, count: int) -> list[int]:
        """The `count` live nodes registered first (their keys' creation revision): the nodes a cluster forms on."""
        ...

    async def formation_nodes(self, nodes: list[int]) -> list[int]:
        """Stores the nodes the cluster forms over if none are stored yet (one compare-and-set on `placement`);
        returns the stored ones, so that every node computing the first placement computes it over the same nodes."""
        ...

    async def form(self, wanted: ClusterConfig) -> ClusterConfig:
        """Stores the configuration if none is stored yet; returns the stored one (the first node's)."""
        ...

    async def cluster_config(self) -> ClusterConfig | None:
        """The stored configuration (None before the cluster formed): every node reads the count from it."""
        ...

    async def change_coordinator_count(self, expected: int, count: int) -> ClusterConfig:
        """Sets the coordinator count to `count` if it is `expected` now (a compare-and-set on the key's revision, so
        that of two adds reading the same count one wins); returns the stored configuration afterwards."""
        ...

    async def assignments(self) -> dict[int, VersionedAssignment]:
        """Every coordinator's assignment, read at one revision."""
        ...

    async def assignment(self, coordinator_id: int) -> VersionedAssignment | None: ...

    async def compare_and_set(
        self, coordinator_id: int, expected_revision: int, assignment: CoordinatorAssignment
    ) -> bool:
        """Writes the assignment only if the key is still at `expected_revision` (0: only if absent)."""
        ...

    async def close(self) -> None: ...


class NodeSession:
    """A node's membership: its lease, kept alive, and how long it is surely still valid.

    `valid_for_ms()` is what the node's leadership hangs on: once it reaches zero the node must
    act as if its lease had expired (it may have), so it stops leading before any other node
    can be elected in its place.
    """

    def __init__(self, lease: Lease, ttl_s: int, clock: Clock) -> None:
        self._lease = lease
        self._ttl_ms = ttl_s * 1000
        self._clock = clock
        self._renewed_at_ms = clock.monotonic_ms()

    @property
    def lease_id(self) -> int:
        return self._lease.lease_id

    def valid_for_ms(self) -> int:
        return max(0, self._renewed_at_ms + self._ttl_ms - self._clock.monotonic_ms())

    async def renew(self) -> None:
        """Refreshes the lease; the validity counts from before the request (the lease may have been renewed later).

        Raises SessionExpired when the store no longer knows the lease: the node's key is gone with it.
        """
        sent_at_ms = self._clock.monotonic_ms()
        if await self._lease.refresh() <= 0:
            self.lapse()
            raise SessionExpired(f"lease {self.lease_id} expired")
        self._renewed_at_ms = sent_at_ms

    def lapse(self) -> None:
        """Treats the session as lapsed from now (a node stepping down of its own accord)."""
        self._renewed_at_ms = self._clock.monotonic_ms() - self._ttl_ms
