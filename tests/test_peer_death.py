"""Peer-observed death (coordinator/cluster/peer_death.py): which lease is revoked, when, and when not; the probe."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from coordinator.base.clock import LoopClock
from coordinator.cluster.memory_store import MemoryClusterStore, MemoryEtcd
from coordinator.cluster.peer_death import PeerDeathWatch, probe_target
from coordinator.cluster.store import NodeEndpoint
from coordinator.cluster.transport import GrpcTransport
from coordinator.config.settings import Settings

TTL_S = 60  # no lease expires during a test: only revocations end them
INTERVAL_MS = 5


class Probes:
    """Answers each probe from a script (True: refused) and records the targets; `between` runs after the first."""

    def __init__(self, answers: list[bool], between: Callable[[], None] = lambda: None) -> None:
        self.answers = answers
        self.targets: list[str] = []
        self._between = between

    async def __call__(self, target: str, timeout_ms: int) -> bool:
        self.targets.append(target)
        if len(self.targets) == 1:
            self._between()
        return self.answers[len(self.targets) - 1]


def _watch(store: MemoryClusterStore, probes: Probes, deaths: list[int]) -> PeerDeathWatch:
    clock = LoopClock(asyncio.get_running_loop(), 0)

    async def died(node_id: int) -> None:
        deaths.append(node_id)

    return PeerDeathWatch(0, store, clock, probes, died, INTERVAL_MS, 100)


async def _registered(store: MemoryClusterStore, node_id: int, port: int) -> int:
    return (await store.register_node(NodeEndpoint(node_id, "127.0.0.1", port), TTL_S)).lease_id


def test_a_node_refusing_two_connects_has_the_lease_read_before_them_revoked() -> None:
    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(LoopClock(asyncio.get_running_loop(), 0)))
        await _registered(store, 0, 9000)
        lease = await _registered(store, 1, 9001)
        probes, deaths = Probes([True, True]), []
        watch = _watch(store, probes, deaths)
        assert await watch.check(1)
        assert probes.targets == ["127.0.0.1:9001", "127.0.0.1:9001"]
        assert lease not in store.etcd.leases()
        assert sorted(await store.live_nodes()) == [0]
        assert deaths == [1] and watch.revoked == 1

    asyncio.run(run())


def test_a_connect_accepted_or_not_refused_revokes_nothing() -> None:
    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(LoopClock(asyncio.get_running_loop(), 0)))
        lease = await _registered(store, 1, 9001)
        for answers in ([False], [True, False]):
            probes, deaths = Probes(answers), []
            assert not await _watch(store, probes, deaths).check(1)
            assert len(probes.targets) == len(answers), "a connect that is not refused ends the check"
            assert deaths == [] and lease in store.etcd.leases()

    asyncio.run(run())


def test_a_node_that_registered_again_meanwhile_keeps_its_new_session() -> None:
    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(LoopClock(asyncio.get_running_loop(), 0)))
        old = await _registered(store, 1, 9001)
        new: list[int] = []

        def restarted() -> None:  # between the two probes: the old session ends, the node registers again
            store.etcd.revoke(old)
            new.append(store.etcd.grant(TTL_S))
            store.etcd.put("/diskless/nodes/1", b'{"host": "127.0.0.1", "port": 9001}', new[0])

        # Even with both probes refused (the new process died too), only the lease read before them is revoked.
        assert await _watch(store, Probes([True, True], between=restarted), []).check(1)
        registration = await store.node_registration(1)
        assert registration is not None and registration.lease_id == new[0]
        assert new[0] in store.etcd.leases()

    asyncio.run(run())


def test_an_unregistered_node_is_not_probed_and_the_node_never_suspects_itself() -> None:
    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(LoopClock(asyncio.get_running_loop(), 0)))
        await _registered(store, 0, 9000)
        probes = Probes([True, True])
        watch = _watch(store, probes, [])
        assert not await watch.check(2)
        assert probes.targets == []
        watch.suspect(0)  # its own id
        watch.suspect(-1)  # no leader known
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.05)
        task.cancel()
        assert probes.targets == [] and await store.node_registration(0) is not None

    asyncio.run(run())


def test_suspects_named_many_times_are_probed_once_per_round() -> None:
    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(LoopClock(asyncio.get_running_loop(), 0)))
        await _registered(store, 1, 9001)
        probes = Probes([False] * 10)
        watch = _watch(store, probes, [])
        for _ in range(8):  # eight coordinators' followers fail their fetches from node 1 at once
            watch.suspect(1)
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(INTERVAL_MS / 1000 / 2)
        task.cancel()
        assert probes.targets == ["127.0.0.1:9001"]

    asyncio.run(run())


def test_a_wildcard_address_is_probed_on_loopback() -> None:
    assert probe_target("0.0.0.0", 9000) == "127.0.0.1:9000"
    assert probe_target("::1", 9000) == "[::1]:9000"


def test_the_grpc_transport_tells_a_closed_port_from_a_listening_one() -> None:
    async def run() -> None:
        transport = GrpcTransport(Settings())
        listening = socket.create_server(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        try:
            assert not await transport.refuses_connections(f"127.0.0.1:{port}", 1000)
        finally:
            listening.close()
        assert await transport.refuses_connections(f"127.0.0.1:{port}", 1000)
        assert not await transport.refuses_connections("not-an-address", 1000)

    asyncio.run(run())


def test_a_lease_another_peer_revoked_first_is_no_failure_and_still_starts_an_election() -> None:
    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(LoopClock(asyncio.get_running_loop(), 0)))
        await _registered(store, 1, 9001)

        async def revoked_first(lease_id: int) -> None:  # etcd answers the second revocation "lease not found"
            store.etcd.revoke(lease_id)
            raise RuntimeError("etcdserver: requested lease not found")

        store.revoke = revoked_first  # type: ignore[method-assign]
        deaths: list[int] = []
        watch = _watch(store, Probes([True, True]), deaths)
        assert not await watch.check(1)
        assert deaths == [1] and watch.revoked == 0
        assert await store.node_registration(1) is None

    asyncio.run(run())


def test_node_0_is_a_peer_like_any_other() -> None:
    """Node ids start at 0 (`diskless serve --node-id 0`): another node suspecting node 0 probes it. Kills `node_id >=
    0` made `node_id >= 1` in `PeerDeathWatch.suspect` (a survivor of the mutation run, docs/testing.md)."""

    async def run() -> None:
        clock = LoopClock(asyncio.get_running_loop(), 0)
        store = MemoryClusterStore(MemoryEtcd(clock))
        await _registered(store, 0, 9000)
        probes = Probes([False] * 10)

        async def died(node_id: int) -> None:
            raise AssertionError(f"node {node_id} answered: nothing dies")

        watch = PeerDeathWatch(1, store, clock, probes, died, INTERVAL_MS, 100)
        watch.suspect(0)
        task = asyncio.create_task(watch.run())
        for _ in range(500):  # the first round starts at once; the bound only ends a test whose rule broke
            if probes.targets:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        assert probes.targets[:1] == ["127.0.0.1:9000"]

    asyncio.run(run())
