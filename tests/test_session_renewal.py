"""A node whose session lapsed renews it again on a slow link (found by tests/test_network_partitions.py: with 20% loss
and 50 ms of delay on every link, the nodes' sessions lapsed, and every renewal after that was given 50 ms,
`RENEWAL_WAIT_MIN_MS`, to be answered: never enough over a 100 ms round trip, so the nodes stayed stepped down, with
every coordinator unavailable, until etcd let their leases expire (29 s of a 30 s run).

While the session holds, a renewal still waits at most what is left of it (so that the node steps down on time);
once it lapsed there is nothing left to protect, and a renewal waits a whole heartbeat, as while it held."""

from __future__ import annotations

from pathlib import Path

from coordinator.base.clock import Clock, LoopClock
from coordinator.cluster.controller import ClusterController
from coordinator.cluster.memory_store import MemoryClusterStore, MemoryEtcd
from coordinator.cluster.store import NodeEndpoint, NodeSession
from coordinator.config.loading import load_settings
from tests.simulation.loop import SimulatedLoop

HEARTBEAT_MS = 250
ROUND_TRIP_MS = 120  # etcd's answer: more than RENEWAL_WAIT_MIN_MS, well within a heartbeat


class SlowLease:
    """A lease whose every renewal is answered after ROUND_TRIP_MS (a delayed link), successfully."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.renewed = 0

    @property
    def lease_id(self) -> int:
        return 1

    async def refresh(self) -> int:
        await self._clock.sleep_ms(ROUND_TRIP_MS)
        self.renewed += 1
        return 2


def _valid_after_a_lapse(tmp_path: Path) -> tuple[bool, int]:
    loop = SimulatedLoop()
    clock = LoopClock(loop, 0)
    settings = load_settings(
        None,
        {"diskless.data.dir": tmp_path, "diskless.node.heartbeat.interval.ms": HEARTBEAT_MS,
         "diskless.node.session.timeout.ms": 2000},
        environ={},
    )  # fmt: skip
    controller = ClusterController(
        settings, NodeEndpoint(0, "127.0.0.1", 9000), MemoryClusterStore(MemoryEtcd(clock)), clock, lambda c: False
    )
    lease = SlowLease(clock)

    async def work() -> bool:
        session = NodeSession(lease, 2, clock)  # type: ignore[arg-type]  # a Lease in all but name
        session.lapse()  # renewals failed for a whole session (etcd without a leader, a lossy link)
        controller._session = session
        keeping = loop.create_task(controller._keep_alive())
        await clock.sleep_ms(10 * HEARTBEAT_MS)
        keeping.cancel()
        return controller.session_valid()

    try:
        return loop.run_until_complete(work()), lease.renewed
    finally:
        loop.close()


def test_a_lapsed_session_is_renewed_over_a_link_slower_than_the_renewal_floor(tmp_path: Path) -> None:
    valid, renewed = _valid_after_a_lapse(tmp_path)
    assert renewed > 0, "no renewal was let wait for its answer"
    assert valid
