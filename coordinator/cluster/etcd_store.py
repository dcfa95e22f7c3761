"""The cluster store (`store.ClusterStore`) in a real etcd: node sessions as leases, the configuration, and one
key per coordinator holding its assignment as JSON, changed only by transactions that compare the key's revision.

Keys under a prefix (default `/diskless`): `nodes/<id>`, `config`, `placement`, `coordinators/<id>` (see `store`).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from typing import Any

import aetcd

from coordinator.cluster.assignment import CoordinatorAssignment
from coordinator.cluster.store import (
    ClusterConfig,
    NodeEndpoint,
    NodeIdTaken,
    NodeRegistration,
    VersionedAssignment,
    config_of,
    config_value,
    counted,
    node_endpoint,
    node_value,
)
from coordinator.config.settings import Settings

log = logging.getLogger(__name__)
DEFAULT_PREFIX = "/diskless"


def parse_etcd_endpoints(text: str) -> list[tuple[str, int]]:
    """`HOST:PORT[,HOST:PORT…]` → [(host, port)], with a clear error for anything else. A host is a name, an IPv4
    literal or a bracketed IPv6 literal (`[::1]:2379`, kept bracketed)."""
    endpoints = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
        if not host.strip("[]") or bare_ipv6 or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--etcd wants HOST:PORT[,HOST:PORT...] ([ADDRESS]:PORT for IPv6), got {item.strip()!r}")
        endpoints.append((host, int(port)))
    return endpoints


Resolver = Callable[[str, int], list[tuple[socket.AddressFamily, str]]]


def resolve(host: str, port: int) -> list[tuple[socket.AddressFamily, str]]:
    """The addresses a host name (or literal) stands for, as (family, address); ValueError if it names none."""
    try:
        found = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ValueError(f"--etcd host {host!r} does not resolve: {error}") from None
    return list(dict.fromkeys((family, str(address[0])) for family, _, _, _, address in found))


def grpc_target(endpoints: list[tuple[str, int]], resolver: Resolver = resolve) -> str:
    """The gRPC target reaching every member. One endpoint: `HOST:PORT` (gRPC's DNS resolver takes names and
    literals, and resolves again on reconnection). Several: gRPC's `ipv4:` or `ipv6:` list, which takes literals
    only, so names are resolved here, once, when the node starts (every address of each name, one family for all
    of them: the first that every endpoint has)."""
    if len(endpoints) == 1:
        host, port = endpoints[0]
        return f"{host}:{port}"
    resolved = [(resolver(host, port), port) for host, port in endpoints]
    for family, scheme in ((socket.AF_INET, "ipv4"), (socket.AF_INET6, "ipv6")):
        if all(any(f == family for f, _ in addresses) for addresses, _ in resolved):
            listed = [
                f"[{address}]:{port}" if family == socket.AF_INET6 else f"{address}:{port}"
                for addresses, port in resolved
                for f, address in addresses
                if f == family
            ]
            return f"{scheme}:" + ",".join(dict.fromkeys(listed))
    named = ", ".join(f"{h}:{p}" for h, p in endpoints)
    raise ValueError(f"--etcd endpoints {named} share no address family (each needs an IPv4, or each an IPv6 address)")


def etcd_client(endpoints: list[tuple[str, int]], timeout_s: float) -> aetcd.Client:
    """One client reaching every member (see `grpc_target`)."""
    target = grpc_target(endpoints)
    # aetcd dials f"{host}:{port}" (an `_url` it never reads did nothing, and port 0 made the target invalid):
    # the last endpoint's port goes in `port`, everything before it in `host`, and the two join into the target.
    before_last_port, _, last_port = target.rpartition(":")
    return aetcd.Client(host=before_last_port, port=int(last_port), timeout=timeout_s)


class EtcdLease:
    """A lease in etcd, kept alive by `refresh`."""

    def __init__(self, lease: Any) -> None:
        self._lease = lease

    @property
    def lease_id(self) -> int:
        return int(self._lease.id)

    async def refresh(self) -> int:
        reply = await self._lease.refresh()
        return 0 if reply is None else int(reply.TTL)


class EtcdClusterStore:
    """The cluster store (`store.ClusterStore`) in etcd, through aetcd."""

    def __init__(self, client: aetcd.Client, prefix: str = DEFAULT_PREFIX) -> None:
        self._client = client
        self._prefix = prefix.rstrip("/")

    def _key(self, *parts: object) -> bytes:
        return "/".join([self._prefix, *map(str, parts)]).encode()

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ nodes

    async def register_node(self, endpoint: NodeEndpoint, ttl_s: int) -> EtcdLease:
        lease = await self._client.lease(ttl_s)
        key = self._key("nodes", endpoint.node_id)
        value = node_value(endpoint)
        transactions = self._client.transactions
        created, _ = await self._client.transaction(
            compare=[transactions.create(key) == 0], success=[transactions.put(key, value, lease=lease)], failure=[]
        )
        if not created:
            await self._client.revoke_lease(lease.id)
            raise NodeIdTaken(f"node id {endpoint.node_id} is registered by a live node already")
        return EtcdLease(lease)

    async def update_node(self, endpoint: NodeEndpoint, lease_id: int) -> None:
        await self._client.put(self._key("nodes", endpoint.node_id), node_value(endpoint), lease=lease_id)

    async def revoke(self, lease_id: int) -> None:
        await self._client.revoke_lease(lease_id)

    async def live_nodes(self) -> dict[int, NodeEndpoint]:
        nodes = {}
        for kv in await self._client.get_prefix(self._key("nodes") + b"/"):
            node_id = int(kv.key.rsplit(b"/", 1)[1])
            nodes[node_id] = node_endpoint(node_id, kv.value)
        return nodes

    async def node_registration(self, node_id: int) -> NodeRegistration | None:
        kv = await self._client.get(self._key("nodes", node_id))
        if kv is None:
            return None
        return NodeRegistration(node_endpoint(node_id, kv.value), int(kv.lease))

    async def directory_mark(self, node_id: int) -> str:
        kv = await self._client.get(self._key("directories", node_id))
        return "" if kv is None else bytes(kv.value).decode()

    async def record_directory_mark(self, node_id: int, mark: str) -> None:
        await self._client.put(self._key("directories", node_id), mark.encode())

    async def first_registered(self, count: int) -> list[int]:
        kvs = await self._client.get_prefix(self._key("nodes") + b"/")
        ordered = sorted(kvs, key=lambda kv: (int(kv.create_revision), kv.key))
        return [int(kv.key.rsplit(b"/", 1)[1]) for kv in ordered[:count]]

    # ------------------------------------------------------------------ the cluster's configuration

    async def formation_nodes(self, nodes: list[int]) -> list[int]:
        key = self._key("placement")
        transactions = self._client.transactions
        await self._client.transaction(
            compare=[transactions.create(key) == 0],
            success=[transactions.put(key, json.dumps({"nodes": nodes}).encode())],
            failure=[],
        )
        stored = await self._client.get(key)
        return [int(n) for n in json.loads(stored.value)["nodes"]]

    async def form(self, wanted: ClusterConfig) -> ClusterConfig:
        key = self._key("config")
        value = config_value(wanted)
        transactions = self._client.transactions
        await self._client.transaction(
            compare=[transactions.create(key) == 0], success=[transactions.put(key, value)], failure=[]
        )
        stored = await self._client.get(key)
        return config_of(stored.value)

    async def cluster_config(self) -> ClusterConfig | None:
        stored = await self._client.get(self._key("config"))
        return None if stored is None else config_of(stored.value)

    async def change_coordinator_count(self, expected: int, count: int) -> ClusterConfig:
        key = self._key("config")
        stored = await self._client.get(key)
        config = config_of(stored.value)
        if config.coordinators == expected:
            value = config_value(counted(config, count))
            transactions = self._client.transactions
            await self._client.transaction(
                compare=[transactions.mod(key) == int(stored.mod_revision)],
                success=[transactions.put(key, value)],
                failure=[],
            )
        return config_of((await self._client.get(key)).value)

    # ------------------------------------------------------------------ coordinators

    async def assignments(self) -> dict[int, VersionedAssignment]:
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
        key = self._key("coordinators", coordinator_id)
        transactions = self._client.transactions
        compare = (
            transactions.create(key) == 0 if expected_revision == 0 else transactions.mod(key) == expected_revision
        )
        succeeded, _ = await self._client.transaction(
            compare=[compare], success=[transactions.put(key, assignment.to_json())], failure=[]
        )
        return bool(succeeded)


def etcd_cluster_store(settings: Settings) -> EtcdClusterStore:
    """The store a node's settings name (`--etcd`, its prefix and request timeout)."""
    client = etcd_client(parse_etcd_endpoints(settings.etcd_endpoints), settings.etcd_request_timeout_ms / 1000)
    return EtcdClusterStore(client, settings.etcd_prefix)
