"""The cluster's metadata in etcd: node sessions (leases), the cluster's fixed configuration, and one key per
coordinator holding its assignment, changed only by transactions that compare the key's revision.

Keys, under a prefix (default `/diskless`):

- `nodes/<id>`: a live node's endpoint, attached to its session lease: it vanishes when the lease expires;
- `config`: the cluster's coordinator count and replication factor, written once by the first node;
- `coordinators/<id>`: a `CoordinatorAssignment` as JSON.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import aetcd

from coordinator.cluster.assignment import CoordinatorAssignment

log = logging.getLogger(__name__)
DEFAULT_PREFIX = "/diskless"


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    coordinators: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class VersionedAssignment:
    """An assignment with the etcd revision it was read at: the compare of the next change."""

    assignment: CoordinatorAssignment
    revision: int


def parse_etcd_endpoints(text: str) -> list[tuple[str, int]]:
    """`HOST:PORT[,HOST:PORT…]` → [(host, port)], with a clear error for anything else."""
    endpoints = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--etcd wants HOST:PORT[,HOST:PORT...], got {item.strip()!r}")
        endpoints.append((host, int(port)))
    return endpoints


def etcd_client(endpoints: list[tuple[str, int]], timeout_s: float) -> aetcd.Client:
    """One client reaching every member: aetcd takes one host, gRPC's ipv4 multi-address target several."""
    if len(endpoints) == 1:
        host, port = endpoints[0]
        return aetcd.Client(host=host, port=port, timeout=timeout_s)
    target = "ipv4:" + ",".join(f"{host}:{port}" for host, port in endpoints)
    # aetcd dials f"{host}:{port}" (an `_url` it never reads did nothing, and port 0 made the target invalid):
    # the last endpoint's port goes in `port`, everything before it in `host`, and the two join into the target.
    before_last_port, _, last_port = target.rpartition(":")
    return aetcd.Client(host=before_last_port, port=int(last_port), timeout=timeout_s)


class NodeSession:
    """A node's membership: its key under a lease that is kept alive, and how long it is surely still valid.

    `valid_for_s()` is what the node's leadership hangs on: once it reaches zero the node must
    act as if its lease had expired (it may have), so it stops leading before any other node
    can be elected in its place.
    """

    def __init__(self, lease: Any, ttl_s: float) -> None:
        self._lease = lease
        self._ttl_s = ttl_s
        self._renewed_at = time.monotonic()

    @property
    def lease_id(self) -> int:
        return int(self._lease.id)

    def valid_for_s(self) -> float:
        return max(0.0, self._renewed_at + self._ttl_s - time.monotonic())

    async def renew(self) -> None:
        """Refreshes the lease; the validity counts from before the request (the lease may have been renewed later).

        Raises SessionExpired when etcd no longer knows the lease: the node's key is gone with it.
        """
        sent_at = time.monotonic()
        reply = await self._lease.refresh()
        if reply is None or int(reply.TTL) <= 0:
            self._renewed_at = -self._ttl_s
            raise SessionExpired(f"lease {self.lease_id} expired in etcd")
        self._renewed_at = sent_at

    def lapse(self) -> None:
        """Treats the session as lapsed from now (a node stepping down of its own accord)."""
        self._renewed_at = -self._ttl_s


class SessionExpired(Exception):
    """etcd let the node's lease expire: the node is gone from the cluster until it registers again."""


class ClusterStore:
    def __init__(self, client: aetcd.Client, prefix: str = DEFAULT_PREFIX) -> None:
        self._client = client
        self._prefix = prefix.rstrip("/")

    def _key(self, *parts: object) -> bytes:
        return "/".join([self._prefix, *map(str, parts)]).encode()

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ nodes

    async def register_node(self, endpoint: NodeEndpoint, ttl_s: int) -> NodeSession:
        """Grants a lease and puts the node's key under it; fails if another live node holds the id."""
        lease = await self._client.lease(ttl_s)
        key = self._key("nodes", endpoint.node_id)
        value = json.dumps({"host": endpoint.host, "port": endpoint.port}).encode()
        transactions = self._client.transactions
        created, _ = await self._client.transaction(
            compare=[transactions.create(key) == 0], success=[transactions.put(key, value, lease=lease)], failure=[]
        )
        if not created:
            await self._client.revoke_lease(lease.id)
            raise RuntimeError(f"node id {endpoint.node_id} is registered by a live node already")
        return NodeSession(lease, ttl_s)

    async def revoke(self, session: NodeSession) -> None:
        """Ends the session at once (a clean stop): the node's key goes, other nodes elect without waiting."""
        await self._client.revoke_lease(session.lease_id)

    async def live_nodes(self) -> dict[int, NodeEndpoint]:
        nodes = {}
        for kv in await self._client.get_prefix(self._key("nodes") + b"/"):
            node_id = int(kv.key.rsplit(b"/", 1)[1])
            value = json.loads(kv.value)
            nodes[node_id] = NodeEndpoint(node_id, value["host"], int(value["port"]))
        return nodes

    async def first_registered(self, count: int) -> list[int]:
        """The `count` live nodes registered first (by their keys' creation revision): the nodes a cluster forms on."""
        kvs = await self._client.get_prefix(self._key("nodes") + b"/")
        ordered = sorted(kvs, key=lambda kv: (int(kv.create_revision), kv.key))
        return [int(kv.key.rsplit(b"/", 1)[1]) for kv in ordered[:count]]

    # ------------------------------------------------------------------ the cluster's configuration

    async def form(self, wanted: ClusterConfig) -> ClusterConfig:
        """Stores the configuration if none is stored yet; returns the stored one (the first node's)."""
        key = self._key("config")
        value = json.dumps({"coordinators": wanted.coordinators, "replication_factor": wanted.replication_factor})
        transactions = self._client.transactions
        await self._client.transaction(
            compare=[transactions.create(key) == 0], success=[transactions.put(key, value.encode())], failure=[]
        )
        stored = await self._client.get(key)
        data = json.loads(stored.value)
        return ClusterConfig(int(data["coordinators"]), int(data["replication_factor"]))

    # ------------------------------------------------------------------ coordinators

    async def assignments(self) -> dict[int, VersionedAssignment]:
        """Every coordinator's assignment, read in one request."""
        found = {}
        for kv in await self._client.get_prefix(self._key("coordinators") + b"/"):
            coordinator_id = int(kv.key.rsplit(b"/", 1)[1])
            found[coordinator_id] = VersionedAssignment(CoordinatorAssignment.from_json(kv.value), int(kv.mod_revision))
        return found

    async def assignment(self, coordinator_id: int) -> VersionedAssignment | None:
        kv = await self._client.get(self._key("coordinators", coordinator_id))
        if kv is None:
            return None
        return VersionedAssignment(CoordinatorAssignment.from_json(kv.value), int(kv.mod_revision))

    async def compare_and_set(
        self, coordinator_id: int, expected_revision: int, assignment: CoordinatorAssignment
    ) -> bool:
        """Writes the assignment only if the key is still at `expected_revision` (0: only if absent)."""
        key = self._key("coordinators", coordinator_id)
        transactions = self._client.transactions
        compare = (
            transactions.create(key) == 0 if expected_revision == 0 else transactions.mod(key) == expected_revision
        )
        succeeded, _ = await self._client.transaction(
            compare=[compare], success=[transactions.put(key, assignment.to_json())], failure=[]
        )
        return bool(succeeded)
