"""The cluster store in this process, with etcd's semantics, so that a whole cluster runs on one clock.

`MemoryEtcd` is etcd's data model: one revision counter for the whole key space (a write moves it; a key
remembers the revision that created it and the one that last changed it), transactions that compare a key's
revisions and then put, leases with a time to live that expire on the `Clock` (their keys deleted with them,
in one revision, as etcd's lessor does), and watches on a key prefix. Its faults are the ones a cluster meets:
etcd unreachable for everyone (`unavailable`), a leader election during which every request waits
(`elect_leader`), and a node cut off from etcd (`MemoryClusterStore.reachable`).

`MemoryClusterStore` is one node's client: the controller's `store.ClusterStore`, with the same keys and JSON
values as `etcd_store.EtcdClusterStore`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, final

from coordinator.base.clock import Clock
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

DEFAULT_PREFIX = "/diskless"
WATCH_QUEUE_EVENTS_MAX = 1024  # a watcher that falls this far behind is cancelled, as etcd cancels a slow watcher


class EtcdUnavailable(ConnectionError):
    """The request did not reach etcd (etcd down, or this node cut off from it)."""


class WatchCancelled(Exception):
    """The watcher fell WATCH_QUEUE_EVENTS_MAX events behind: it must read again and watch anew."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease_id: int  # 0: none


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    key: str
    value: bytes  # empty for a delete
    revision: int


@dataclass(frozen=True, slots=True)
class Compare:
    """`key`'s create or mod revision equals `revision` (a create revision of 0: the key is absent)."""

    key: str
    target: Literal["create", "mod"]
    revision: int


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease_id: int = 0


@dataclass(slots=True)
class _Lease:
    ttl_ms: int
    expires_at_ms: int
    keys: set[str] = field(default_factory=set)


@final
class Watch:
    """Events under a prefix from the revision after the watch began, in revision order."""

    def __init__(self, etcd: MemoryEtcd, prefix: str) -> None:
        self._etcd = etcd
        self.prefix = prefix
        self._events: asyncio.Queue[WatchEvent] = asyncio.Queue(WATCH_QUEUE_EVENTS_MAX)
        self.cancelled = False

    def offer(self, event: WatchEvent) -> None:
        if self.cancelled:
            return
        try:
            self._events.put_nowait(event)
        except asyncio.QueueFull:
            self.cancelled = True

    async def next(self) -> WatchEvent:
        """The next event; WatchCancelled once the watcher fell behind (after the events it did hold)."""
        if self._events.empty() and self.cancelled:
            raise WatchCancelled(f"watch on {self.prefix!r} fell {WATCH_QUEUE_EVENTS_MAX} events behind")
        return await self._events.get()

    def close(self) -> None:
        self._etcd.unwatch(self)


@final
class MemoryEtcd:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.revision = 1  # etcd's first revision; every write moves it by one
        self._data: dict[str, KeyValue] = {}
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(1)
        self._watches: list[Watch] = []
        self.unavailable = False
        self._paused_until_ms = 0

    # ------------------------------------------------------------------ faults

    def elect_leader(self, pause_ms: int) -> None:
        """etcd loses its leader: requests wait `pause_ms` of the clock's time for the next one (leases are kept)."""
        self._paused_until_ms = max(self._paused_until_ms, self._clock.monotonic_ms() + pause_ms)

    async def reach(self) -> None:
        """What every request does first: fails while etcd is down, waits out an election, expires leases."""
        if self.unavailable:
            raise EtcdUnavailable("etcd is unavailable")
        wait_ms = self._paused_until_ms - self._clock.monotonic_ms()
        if wait_ms > 0:
            await self._clock.sleep_ms(wait_ms)
            if self.unavailable:
                raise EtcdUnavailable("etcd is unavailable")
        self.expire_leases()

    # ------------------------------------------------------------------ keys (synchronous: one request is atomic)

    def get(self, key: str) -> KeyValue | None:
        return self._data.get(key)

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        return [self._data[key] for key in sorted(self._data) if key.startswith(prefix)]

    def transaction(self, compares: list[Compare], puts: list[Put]) -> bool:
        """Applies every put, in one revision, if every compare holds; else changes nothing."""
        for compare in compares:
            current = self._data.get(compare.key)
            found = (
                0
                if current is None
                else current.create_revision
                if compare.target == "create"
                else current.mod_revision
            )
            if found != compare.revision:
                return False
        for put in puts:
            if put.lease_id and put.lease_id not in self._leases:
                raise KeyError(f"lease {put.lease_id} not found")
        if not puts:
            return True
        self.revision += 1
        for put in puts:
            self._put(put)
        return True

    def put(self, key: str, value: bytes, lease_id: int = 0) -> None:
        self.transaction([], [Put(key, value, lease_id)])

    def _put(self, put: Put) -> None:
        previous = self._data.get(put.key)
        if previous is not None and previous.lease_id and previous.lease_id in self._leases:
            self._leases[previous.lease_id].keys.discard(put.key)
        create = previous.create_revision if previous is not None else self.revision
        self._data[put.key] = KeyValue(put.key, put.value, create, self.revision, put.lease_id)
        if put.lease_id:
            self._leases[put.lease_id].keys.add(put.key)
        self._notify(WatchEvent("put", put.key, put.value, self.revision))

    def _delete_keys(self, keys: Iterator[str]) -> None:
        """Deletes the keys (those still there) in one revision."""
        present = sorted(key for key in keys if key in self._data)
        if not present:
            return
        self.revision += 1
        for key in present:
            del self._data[key]
            self._notify(WatchEvent("delete", key, b"", self.revision))

    # ------------------------------------------------------------------ leases

    def grant(self, ttl_s: int) -> int:
        if ttl_s <= 0:
            raise ValueError(f"a lease's TTL must be positive, got {ttl_s}")
        lease_id = next(self._lease_ids)
        self._leases[lease_id] = _Lease(ttl_s * 1000, self._clock.monotonic_ms() + ttl_s * 1000)
        return lease_id

    def keep_alive(self, lease_id: int) -> int:
        """Restarts the lease's time to live; the seconds it now has, 0 for a lease that expired or never was."""
        lease = self._leases.get(lease_id)
        if lease is None:
            return 0
        lease.expires_at_ms = self._clock.monotonic_ms() + lease.ttl_ms
        return lease.ttl_ms // 1000

    def revoke(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is not None:
            self._delete_keys(iter(lease.keys))

    def expire_leases(self) -> None:
        now_ms = self._clock.monotonic_ms()
        for lease_id in sorted(i for i, lease in self._leases.items() if lease.expires_at_ms <= now_ms):
            self.revoke(lease_id)

    def leases(self) -> list[int]:
        return sorted(self._leases)

    # ------------------------------------------------------------------ watches

    def watch(self, prefix: str) -> Watch:
        watch = Watch(self, prefix)
        self._watches.append(watch)
        return watch

    def unwatch(self, watch: Watch) -> None:
        if watch in self._watches:
            self._watches.remove(watch)

    def _notify(self, event: WatchEvent) -> None:
        for watch in self._watches:
            if event.key.startswith(watch.prefix):
                watch.offer(event)


@final
class MemoryLease:
    def __init__(self, store: MemoryClusterStore, lease_id: int) -> None:
        self._store = store
        self._lease_id = lease_id

    @property
    def lease_id(self) -> int:
        return self._lease_id

    async def refresh(self) -> int:
        await self._store.reach()
        return self._store.etcd.keep_alive(self._lease_id)


@final
class MemoryClusterStore:
    """One node's client of a `MemoryEtcd`: the controller's cluster store."""

    def __init__(self, etcd: MemoryEtcd, prefix: str = DEFAULT_PREFIX) -> None:
        self.etcd = etcd
        self._prefix = prefix.rstrip("/")
        self.reachable = True  # False: this node is cut off from etcd (a network partition)

    def _key(self, *parts: object) -> str:
        return "/".join([self._prefix, *map(str, parts)])

    async def reach(self) -> None:
        if not self.reachable:
            raise EtcdUnavailable("etcd is unreachable from this node")
        await self.etcd.reach()

    async def register_node(self, endpoint: NodeEndpoint, ttl_s: int) -> MemoryLease:
        await self.reach()
        lease_id = self.etcd.grant(ttl_s)
        key = self._key("nodes", endpoint.node_id)
        value = node_value(endpoint)
        if not self.etcd.transaction([Compare(key, "create", 0)], [Put(key, value, lease_id)]):
            self.etcd.revoke(lease_id)
            raise NodeIdTaken(f"node id {endpoint.node_id} is registered by a live node already")
        return MemoryLease(self, lease_id)

    async def update_node(self, endpoint: NodeEndpoint, lease_id: int) -> None:
        await self.reach()
        self.etcd.put(self._key("nodes", endpoint.node_id), node_value(endpoint), lease_id)

    async def revoke(self, lease_id: int) -> None:
        await self.reach()
        self.etcd.revoke(lease_id)

    async def live_nodes(self) -> dict[int, NodeEndpoint]:
        await self.reach()
        nodes = {}
        for kv in self.etcd.get_prefix(self._key("nodes") + "/"):
            node_id = int(kv.key.rsplit("/", 1)[1])
            nodes[node_id] = node_endpoint(node_id, kv.value)
        return nodes

    async def node_registration(self, node_id: int) -> NodeRegistration | None:
        await self.reach()
        kv = self.etcd.get(self._key("nodes", node_id))
        return None if kv is None else NodeRegistration(node_endpoint(node_id, kv.value), kv.lease_id)

    async def directory_mark(self, node_id: int) -> str:
        await self.reach()
        kv = self.etcd.get(self._key("directories", node_id))
        return "" if kv is None else kv.value.decode()

    async def record_directory_mark(self, node_id: int, mark: str) -> None:
        await self.reach()
        self.etcd.put(self._key("directories", node_id), mark.encode())

    async def first_registered(self, count: int) -> list[int]:
        await self.reach()
        kvs = sorted(self.etcd.get_prefix(self._key("nodes") + "/"), key=lambda kv: (kv.create_revision, kv.key))
        return [int(kv.key.rsplit("/", 1)[1]) for kv in kvs[:count]]

    async def formation_nodes(self, nodes: list[int]) -> list[int]:
        await self.reach()
        key = self._key("placement")
        self.etcd.transaction([Compare(key, "create", 0)], [Put(key, json.dumps({"nodes": nodes}).encode())])
        stored = self.etcd.get(key)
        assert stored is not None, "the formation's nodes were just stored"
        return [int(n) for n in json.loads(stored.value)["nodes"]]

    async def form(self, wanted: ClusterConfig) -> ClusterConfig:
        await self.reach()
        key = self._key("config")
        value = config_value(wanted)
        self.etcd.transaction([Compare(key, "create", 0)], [Put(key, value)])
        stored = self.etcd.get(key)
        assert stored is not None, "the configuration was just stored"
        return config_of(stored.value)

    async def cluster_config(self) -> ClusterConfig | None:
        await self.reach()
        stored = self.etcd.get(self._key("config"))
        return None if stored is None else config_of(stored.value)

    async def change_coordinator_count(self, expected: int, count: int) -> ClusterConfig:
        await self.reach()
        key = self._key("config")
        stored = self.etcd.get(key)
        assert stored is not None, "the cluster formed before its count changes"
        config = config_of(stored.value)
        if config.coordinators == expected:
            value = config_value(counted(config, count))
            self.etcd.transaction([Compare(key, "mod", stored.mod_revision)], [Put(key, value)])
        changed = self.etcd.get(key)
        assert changed is not None
        return config_of(changed.value)

    async def assignments(self) -> dict[int, VersionedAssignment]:
        await self.reach()
        return {
            int(kv.key.rsplit("/", 1)[1]): VersionedAssignment(
                CoordinatorAssignment.from_json(kv.value), kv.mod_revision
            )
            for kv in self.etcd.get_prefix(self._key("coordinators") + "/")
        }

    async def assignment(self, coordinator_id: int) -> VersionedAssignment | None:
        await self.reach()
        kv = self.etcd.get(self._key("coordinators", coordinator_id))
        return None if kv is None else _versioned(kv)

    async def compare_and_set(
        self, coordinator_id: int, expected_revision: int, assignment: CoordinatorAssignment
    ) -> bool:
        await self.reach()
        key = self._key("coordinators", coordinator_id)
        compare = Compare(key, "create", 0) if expected_revision == 0 else Compare(key, "mod", expected_revision)
        return self.etcd.transaction([compare], [Put(key, assignment.to_json())])

    async def close(self) -> None:
        return None


def _versioned(kv: KeyValue) -> VersionedAssignment:
    return VersionedAssignment(CoordinatorAssignment.from_json(kv.value), kv.mod_revision)
