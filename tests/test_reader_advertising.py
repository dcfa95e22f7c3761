"""A clustered node's readers: named in its registration (etcd), kept named after failures, and told of roles.

The real-process behaviour (readers serving leaders and followers, never past the high watermark) is in
tests/test_cluster_readers.py; these are the pieces, fast.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from coordinator.base.clock import ManualClock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.cluster.memory_store import MemoryClusterStore, MemoryEtcd
from coordinator.cluster.store import NodeEndpoint, node_endpoint, node_value
from coordinator.config.settings import Settings
from coordinator.node.reader_advertising import ReaderAdvertising
from coordinator.reads.readers.board import READABLE, Status
from coordinator.reads.readers.supervisor import ReadProcesses
from coordinator.runtime.shard import ShardState


def test_a_nodes_registration_carries_its_readers_and_an_older_value_reads_without() -> None:
    endpoint = NodeEndpoint(3, "10.0.0.3", 9092, "inc-1", ("10.0.0.3:40001", "10.0.0.3:40002"))
    assert node_endpoint(3, node_value(endpoint)) == endpoint
    older = b'{"host": "h", "port": 1, "incarnation": "i"}'  # written by a node before readers were named
    assert node_endpoint(1, older) == NodeEndpoint(1, "h", 1, "i", ())


def test_update_node_renames_the_readers_under_the_session_lease_and_fails_once_the_lease_is_gone() -> None:
    async def run() -> None:
        store = MemoryClusterStore(MemoryEtcd(ManualClock(start_ms=1_000_000)), "/readers")
        lease = await store.register_node(NodeEndpoint(1, "127.0.0.1", 9001), ttl_s=5)
        await store.update_node(NodeEndpoint(1, "127.0.0.1", 9001, read_addresses=("127.0.0.1:9101",)), lease.lease_id)
        assert (await store.live_nodes())[1].read_addresses == ("127.0.0.1:9101",)
        await store.revoke(lease.lease_id)
        assert await store.live_nodes() == {}
        with pytest.raises(KeyError):  # never a key outliving the session it was registered under
            await store.update_node(NodeEndpoint(1, "127.0.0.1", 9001), lease.lease_id)

    asyncio.run(run())


@dataclass
class FlakyCluster:
    failures: int
    written: list[tuple[str, ...]] = field(default_factory=list)

    async def advertise_readers(self, addresses: tuple[str, ...]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("etcd unreachable")
        self.written.append(addresses)


def test_reader_addresses_are_written_again_after_a_failure_and_the_latest_wins() -> None:
    async def run() -> None:
        clock = ManualClock(start_ms=0)
        cluster = FlakyCluster(failures=1)
        advertising = ReaderAdvertising(cluster, clock, retry_ms=200)
        task = asyncio.create_task(advertising.run())
        advertising.set(("h:1",))
        for _ in range(5):
            await asyncio.sleep(0)
        assert cluster.written == []  # failed; waiting 200 ms of the clock
        advertising.set(("h:2",))  # a reader restarted on another port meanwhile
        clock.advance(200)
        for _ in range(5):
            await asyncio.sleep(0)
        assert cluster.written == [("h:2",)]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())


@dataclass
class FakeShard:
    coordinator_id: int
    state: ShardState = ShardState.ACTIVE
    refusal: CoordinatorUnavailable | None = None

    def require_active(self) -> None:
        if self.refusal is not None:
            raise self.refusal


def test_a_role_etcd_sets_reaches_the_board_at_once_keeping_the_generation() -> None:
    shard = FakeShard(0)
    readers = ReadProcesses(Settings(), [shard], "127.0.0.1", lambda addresses: None)  # type: ignore[list-item]
    loaded = readers.board.status(0)
    assert loaded.readable and loaded.generation == 1
    # etcd removed the replica here: refused before the coordinator steps aside and its files close or go.
    shard.refusal = CoordinatorUnavailable(ErrorCode.NOT_LEADER_OR_FOLLOWER, "no replica here")
    readers.role_set(shard)  # type: ignore[arg-type]
    assert readers.board.status(0) == Status(int(ErrorCode.NOT_LEADER_OR_FOLLOWER), 1)
    shard.refusal = None  # a replica again, the same file (no reload yet): readable in the same generation
    readers.role_set(shard)  # type: ignore[arg-type]
    assert readers.board.status(0) == Status(READABLE, 1)
