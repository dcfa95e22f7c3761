"""The cluster store's contract, run against both implementations: a real etcd (marked slow: it starts etcd) and
the in-memory store the simulated cluster runs on (its leases expire on a clock the test moves).

Node sessions, the configuration formed once, compare-and-set on assignments; then what only the in-memory
store has: revisions, watches and its faults, which the simulation relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import pytest

from bench.local_etcd import EtcdCluster
from coordinator.base.clock import Clock, ManualClock, SystemClock
from coordinator.cluster.assignment import CoordinatorAssignment, after_nodes_lost
from coordinator.cluster.etcd_store import EtcdClusterStore, etcd_client, grpc_target, parse_etcd_endpoints
from coordinator.cluster.memory_store import (
    Compare,
    EtcdUnavailable,
    MemoryClusterStore,
    MemoryEtcd,
    Put,
    WatchCancelled,
    WatchEvent,
)
from coordinator.cluster.store import (
    ClusterConfig,
    ClusterStore,
    NodeEndpoint,
    NodeIdTaken,
    NodeRegistration,
    NodeSession,
)


@dataclass
class Backend:
    """Makes stores of one implementation, and lets time pass as that implementation sees it."""

    store: Callable[[str], ClusterStore]
    clock: Clock
    pass_time: Callable[[int], Awaitable[None]]


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    cluster.start()
    yield cluster
    cluster.stop()


def _memory_backend() -> Backend:
    clock = ManualClock(start_ms=1_000_000)
    memory = MemoryEtcd(clock)

    async def pass_time(ms: int) -> None:
        clock.advance(ms)

    return Backend(lambda prefix: MemoryClusterStore(memory, prefix), clock, pass_time)


def _etcd_backend(etcd: EtcdCluster) -> Backend:
    def store(prefix: str) -> ClusterStore:
        return EtcdClusterStore(etcd_client(parse_etcd_endpoints(etcd.endpoints), timeout_s=5), prefix)

    async def pass_time(ms: int) -> None:
        await asyncio.sleep(ms / 1000)

    return Backend(store, SystemClock(), pass_time)


@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.slow)])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return _memory_backend()
    return _etcd_backend(request.getfixturevalue("etcd"))


def test_the_first_nodes_configuration_is_the_clusters(backend: Backend) -> None:
    async def run() -> tuple[ClusterConfig, ClusterConfig]:
        store = backend.store(f"/config-{uuid.uuid4().hex}")
        try:
            first = await store.form(ClusterConfig(8, 3))
            second = await store.form(ClusterConfig(4, 1))  # a later node with other settings
            return first, second
        finally:
            await store.close()

    assert asyncio.run(run()) == (ClusterConfig(8, 3), ClusterConfig(8, 3))


def test_the_coordinator_count_rises_only_from_the_count_expected_and_every_node_reads_it(backend: Backend) -> None:
    async def run() -> list[ClusterConfig | None]:
        store = backend.store(f"/count-{uuid.uuid4().hex}")
        try:
            before = await store.cluster_config()
            await store.form(ClusterConfig(8, 3))
            raised = await store.change_coordinator_count(8, 9)
            stale = await store.change_coordinator_count(8, 10)  # a second add computed from 8: it loses
            again = await store.change_coordinator_count(9, 11)
            restarted = await store.form(ClusterConfig(8, 3))  # a node starting with the formation's settings
            return [before, raised, stale, again, restarted, await store.cluster_config()]
        finally:
            await store.close()

    before, raised, stale, again, restarted, read = asyncio.run(run())
    assert before is None
    assert raised == stale == ClusterConfig(9, 3, formed=8)
    assert again == restarted == read == ClusterConfig(11, 3, formed=8)
    assert again is not None and again.formed_count == 8 and ClusterConfig(8, 3).formed_count == 8


def test_a_stale_writer_loses_the_compare_and_set(backend: Backend) -> None:
    initial = CoordinatorAssignment((1, 2, 3), 1, 0, 0, (1, 2, 3))

    async def run() -> tuple[bool, bool, bool, CoordinatorAssignment | None]:
        store = backend.store(f"/cas-{uuid.uuid4().hex}")
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


def test_a_node_vanishes_when_its_session_lease_expires(backend: Backend) -> None:
    async def run() -> tuple[set[int], set[int], int]:
        store = backend.store(f"/session-{uuid.uuid4().hex}")
        try:
            lease = await store.register_node(NodeEndpoint(7, "127.0.0.1", 9092), ttl_s=1)
            session = NodeSession(lease, 1, backend.clock)
            with pytest.raises(NodeIdTaken, match="registered by a live node"):
                await store.register_node(NodeEndpoint(7, "127.0.0.1", 9093), ttl_s=1)
            registered = set(await store.live_nodes())
            valid_for_ms = session.valid_for_ms()
            await backend.pass_time(2500)  # a 1 s lease, not renewed; etcd expires it within about a second more
            return registered, set(await store.live_nodes()), valid_for_ms
        finally:
            await store.close()

    registered, after_expiry, valid_for_ms = asyncio.run(run())
    assert registered == {7}
    assert after_expiry == set()
    assert 0 < valid_for_ms <= 1000


def test_a_registration_names_its_lease_and_revoking_that_lease_ends_it_alone(backend: Backend) -> None:
    async def run() -> None:
        store = backend.store(f"/registration-{uuid.uuid4().hex}")
        try:
            assert await store.node_registration(7) is None
            first = await store.register_node(NodeEndpoint(7, "127.0.0.1", 9092), ttl_s=30)
            read = await store.node_registration(7)
            assert read == NodeRegistration(NodeEndpoint(7, "127.0.0.1", 9092), first.lease_id)
            await store.revoke(first.lease_id)  # a peer saw its process gone
            assert await store.node_registration(7) is None and set(await store.live_nodes()) == set()
            second = await store.register_node(NodeEndpoint(7, "127.0.0.1", 9092), ttl_s=30)  # at once, no TTL
            with contextlib.suppress(Exception):  # etcd: the lease is not found any more; memory: nothing to do
                await store.revoke(first.lease_id)  # a late peer revokes what it read: the new session stays
            again = await store.node_registration(7)
            assert again is not None and again.lease_id == second.lease_id != first.lease_id
            await store.revoke(second.lease_id)
        finally:
            await store.close()

    asyncio.run(run())


def test_a_directory_mark_outlives_the_nodes_session(backend: Backend) -> None:
    async def run() -> tuple[str, str, set[int]]:
        store = backend.store(f"/marks-{uuid.uuid4().hex}")
        try:
            before = await store.directory_mark(7)
            await store.register_node(NodeEndpoint(7, "127.0.0.1", 9092), ttl_s=1)
            await store.record_directory_mark(7, "abc.1")
            await store.record_directory_mark(7, "abc.2")
            await backend.pass_time(2500)  # the session's lease expires: the registration goes, the mark stays
            return before, await store.directory_mark(7), set(await store.live_nodes())
        finally:
            await store.close()

    assert asyncio.run(run()) == ("", "abc.2", set())


@pytest.mark.parametrize("text", ["", "host", "host:", ":2379", "host:0", "host:70000", "a:1,b", "::1:2379", "[]:1"])
def test_etcd_endpoints_that_are_not_host_port_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_etcd_endpoints(text)


def test_etcd_endpoints_parse() -> None:
    assert parse_etcd_endpoints("127.0.0.1:2379,[::1]:2380,etcd-2.example:2381") == [
        ("127.0.0.1", 2379), ("[::1]", 2380), ("etcd-2.example", 2381)
    ]  # fmt: skip


def test_several_etcd_endpoints_become_one_grpc_target_of_one_address_family() -> None:
    v4, v6 = socket.AF_INET, socket.AF_INET6
    names = {
        "a": [(v4, "10.0.0.1"), (v6, "fd00::1")],
        "b": [(v6, "fd00::2"), (v4, "10.0.0.2")],
        "only6": [(v6, "fd00::3")],
        "only4": [(v4, "10.0.0.4")],
        "[::1]": [(v6, "::1")],
    }

    def resolver(host: str, port: int) -> list[tuple[socket.AddressFamily, str]]:
        return names[host]

    assert grpc_target([("a", 1), ("b", 2)], resolver) == "ipv4:10.0.0.1:1,10.0.0.2:2"
    assert grpc_target([("a", 1), ("only6", 3), ("[::1]", 4)], resolver) == "ipv6:[fd00::1]:1,[fd00::3]:3,[::1]:4"
    assert grpc_target([("only6", 1)], resolver) == "only6:1"  # one endpoint: gRPC resolves it, again on reconnection
    with pytest.raises(ValueError, match="share no address family"):
        grpc_target([("only4", 1), ("only6", 2)], resolver)
    with pytest.raises(ValueError, match="does not resolve"):
        grpc_target([("127.0.0.1", 1), ("no-such-host.invalid", 2)])


@pytest.mark.slow
def test_a_store_reaches_etcd_through_a_host_name_among_several_endpoints(etcd: EtcdCluster) -> None:
    _, port = parse_etcd_endpoints(etcd.endpoints)[0]

    async def run() -> list[int]:
        endpoints = parse_etcd_endpoints(f"localhost:{port},127.0.0.1:{port}")
        store = EtcdClusterStore(etcd_client(endpoints, timeout_s=5), f"/names-{uuid.uuid4().hex}")
        try:
            await store.register_node(NodeEndpoint(4, "127.0.0.1", 9004), ttl_s=30)
            return sorted(await store.live_nodes())
        finally:
            await store.close()

    assert asyncio.run(run()) == [4]


def test_a_cluster_forms_on_its_first_registered_nodes_whoever_asks(backend: Backend) -> None:
    async def scenario() -> list[int]:
        store = backend.store(f"/first-{uuid.uuid4().hex}")
        try:
            for node_id in (5, 2, 9, 1):  # registered in this order
                await store.register_node(NodeEndpoint(node_id, "127.0.0.1", 9000 + node_id), ttl_s=30)
            return await store.first_registered(3)
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [5, 2, 9]


def test_the_nodes_a_cluster_forms_over_are_stored_once_whoever_asks_first(backend: Backend) -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        store = backend.store(f"/formation-{uuid.uuid4().hex}")
        try:
            first = await store.formation_nodes([1, 2, 3])
            return first, await store.formation_nodes([1, 2, 3, 4])  # a later former saw a 4th node: the first wins
        finally:
            await store.close()

    assert asyncio.run(scenario()) == ([1, 2, 3], [1, 2, 3])


def test_a_renewed_session_stays_and_one_cut_off_from_etcd_lapses_then_its_key_expires() -> None:
    clock = ManualClock(start_ms=0)
    memory = MemoryEtcd(clock)
    store, other = MemoryClusterStore(memory), MemoryClusterStore(memory)

    async def run() -> None:
        session = NodeSession(await store.register_node(NodeEndpoint(1, "h", 1), ttl_s=3), 3, clock)
        for _ in range(10):  # renewed every second: 10 s on a 3 s lease, still there
            clock.advance(1000)
            await session.renew()
        assert set(await other.live_nodes()) == {1} and session.valid_for_ms() == 3000
        store.reachable = False  # cut off: renewals fail, the session counts down from the last one
        clock.advance(2000)
        with pytest.raises(EtcdUnavailable):
            await session.renew()
        assert session.valid_for_ms() == 1000 and set(await other.live_nodes()) == {1}
        clock.advance(1000)
        assert session.valid_for_ms() == 0  # the node stops leading now ...
        assert set(await other.live_nodes()) == set()  # ... and not later than etcd lets its key go
        store.reachable = True
        with pytest.raises(Exception, match="expired"):
            await session.renew()

    asyncio.run(run())


def test_revisions_move_once_per_write_and_a_lease_takes_its_keys_in_one_revision() -> None:
    clock = ManualClock(start_ms=0)
    memory = MemoryEtcd(clock)
    assert memory.revision == 1
    lease = memory.grant(2)
    assert memory.transaction([Compare("/a", "create", 0)], [Put("/a", b"1", lease), Put("/b", b"2", lease)])
    assert memory.revision == 2
    a = memory.get("/a")
    assert a is not None and (a.create_revision, a.mod_revision) == (2, 2)
    assert not memory.transaction([Compare("/a", "create", 0)], [Put("/a", b"x")])  # exists: nothing changes
    assert memory.transaction([Compare("/a", "mod", 2)], [Put("/a", b"3", lease)])
    a = memory.get("/a")
    assert memory.revision == 3 and a is not None and (a.value, a.create_revision, a.mod_revision) == (b"3", 2, 3)
    assert not memory.transaction([Compare("/a", "mod", 2)], [Put("/a", b"4")])  # a stale compare loses
    clock.advance(1999)
    memory.expire_leases()
    assert memory.leases() == [lease]
    clock.advance(1)
    memory.expire_leases()
    assert memory.leases() == [] and memory.get_prefix("/") == [] and memory.revision == 4


def test_a_watch_sees_every_change_under_its_prefix_in_order_and_a_slow_one_is_cancelled() -> None:
    clock = ManualClock(start_ms=0)
    memory = MemoryEtcd(clock)

    async def run() -> list[WatchEvent]:
        watch = memory.watch("/n/")
        lease = memory.grant(1)
        memory.put("/n/1", b"a", lease)
        memory.put("/other", b"b")
        memory.put("/n/1", b"c", lease)
        clock.advance(1000)
        memory.expire_leases()
        seen = [await watch.next() for _ in range(3)]
        watch.close()
        memory.put("/n/2", b"d")  # after close: not seen
        slow = memory.watch("/")
        for i in range(1100):
            memory.put(f"/x/{i}", b"")
        for _ in range(1024):
            await slow.next()
        with pytest.raises(WatchCancelled):
            await slow.next()
        return seen

    seen = asyncio.run(run())
    assert [(e.kind, e.key, e.value, e.revision) for e in seen] == [
        ("put", "/n/1", b"a", 2),
        ("put", "/n/1", b"c", 4),
        ("delete", "/n/1", b"", 5),
    ]


def test_requests_wait_out_an_etcd_leader_election_and_fail_while_etcd_is_down() -> None:
    clock = ManualClock(start_ms=0)
    memory = MemoryEtcd(clock)
    store = MemoryClusterStore(memory)

    async def run() -> None:
        memory.elect_leader(pause_ms=1500)
        waiting = asyncio.ensure_future(store.live_nodes())
        await asyncio.sleep(0.01)
        assert not waiting.done() and clock.sleepers() == 1
        clock.advance(1500)
        assert await waiting == {}
        memory.unavailable = True
        with pytest.raises(EtcdUnavailable):
            await store.form(ClusterConfig(4, 3))
        memory.unavailable = False
        assert await store.form(ClusterConfig(4, 3)) == ClusterConfig(4, 3)

    asyncio.run(run())
