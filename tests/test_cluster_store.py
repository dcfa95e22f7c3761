"""The cluster's metadata in a real etcd: node sessions, the configuration formed once, CAS on assignments."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from bench.local_etcd import EtcdCluster
from coordinator.cluster.assignment import CoordinatorAssignment, after_nodes_lost
from coordinator.cluster.etcd_store import (
    ClusterConfig,
    ClusterStore,
    NodeEndpoint,
    etcd_client,
    parse_etcd_endpoints,
)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    cluster.start()
    yield cluster
    cluster.stop()


def _store(etcd: EtcdCluster, prefix: str) -> ClusterStore:
    return ClusterStore(etcd_client(parse_etcd_endpoints(etcd.endpoints), timeout_s=5), prefix)


def test_the_first_nodes_configuration_is_the_clusters(etcd: EtcdCluster) -> None:
    async def run() -> tuple[ClusterConfig, ClusterConfig]:
        store = _store(etcd, "/config-test")
        try:
            first = await store.form(ClusterConfig(8, 3))
            second = await store.form(ClusterConfig(4, 1))  # a later node with other settings
            return first, second
        finally:
            await store.close()

    assert asyncio.run(run()) == (ClusterConfig(8, 3), ClusterConfig(8, 3))


def test_a_stale_writer_loses_the_compare_and_set(etcd: EtcdCluster) -> None:
    initial = CoordinatorAssignment((1, 2, 3), 1, 0, 0, (1, 2, 3))

    async def run() -> tuple[bool, bool, bool, CoordinatorAssignment | None]:
        store = _store(etcd, "/cas-test")
        try:
            created = await store.compare_and_set(0, 0, initial)
            created_again = await store.compare_and_set(0, 0, initial)  # exists already
            read = await store.assignment(0)
            assert read is not None
            moved = after_nodes_lost(read.assignment, {2, 3})
            assert moved is not None
            assert await store.compare_and_set(0, read.revision, moved)
            # Another node read the same revision and now writes its own change: it must lose.
            stale = await store.compare_and_set(0, read.revision, after_nodes_lost(read.assignment, {3}) or initial)
            final = await store.assignment(0)
            return created, created_again, stale, final.assignment if final else None
        finally:
            await store.close()

    created, created_again, stale, final = asyncio.run(run())
    assert (created, created_again, stale) == (True, False, False)
    assert final == CoordinatorAssignment((1, 2, 3), 2, 1, 1, (2, 3))


def test_a_node_vanishes_when_its_session_lease_expires(etcd: EtcdCluster) -> None:
    async def run() -> tuple[set[int], set[int], float]:
        store = _store(etcd, "/session-test")
        try:
            session = await store.register_node(NodeEndpoint(7, "127.0.0.1", 9092), ttl_s=1)
            with pytest.raises(RuntimeError, match="registered by a live node"):
                await store.register_node(NodeEndpoint(7, "127.0.0.1", 9093), ttl_s=1)
            registered = set(await store.live_nodes())
            valid_for = session.valid_for_s()
            await asyncio.sleep(2.5)  # a 1 s lease, not renewed; etcd expires it within about a second more
            return registered, set(await store.live_nodes()), valid_for
        finally:
            await store.close()

    registered, after_expiry, valid_for = asyncio.run(run())
    assert registered == {7}
    assert after_expiry == set()
    assert 0 < valid_for <= 1


@pytest.mark.parametrize("text", ["", "host", "host:", ":2379", "host:0", "host:70000", "a:1,b"])
def test_etcd_endpoints_that_are_not_host_port_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_etcd_endpoints(text)


def test_etcd_endpoints_parse() -> None:
    assert parse_etcd_endpoints("127.0.0.1:2379,[::1]:2380") == [("127.0.0.1", 2379), ("[::1]", 2380)]


def test_a_cluster_forms_on_its_first_registered_nodes_whoever_asks(etcd: EtcdCluster) -> None:
    async def scenario() -> list[int]:
        store = _store(etcd, f"/first-{uuid.uuid4().hex}")
        try:
            for node_id in (5, 2, 9, 1):  # registered in this order
                await store.register_node(NodeEndpoint(node_id, "127.0.0.1", 9000 + node_id), ttl_s=30)
            return await store.first_registered(3)
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [5, 2, 9]
