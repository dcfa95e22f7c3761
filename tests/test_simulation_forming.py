"""A cluster forming in the simulated cluster: nodes that wait for the others longer than their session keep it
alive, and the cluster forms once the last one arrives (a node that failed to start at first, then restarted)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.simulation.cluster import SimCluster
from tests.test_simulation import _assignment, _until, simulate


def test_nodes_waiting_longer_than_their_session_for_the_last_one_still_form_the_cluster(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        early = [asyncio.ensure_future(sim.start(n)) for n in (0, 1)]
        session_s = sim.nodes[0].settings.node_session_timeout_ms / 1000
        await asyncio.sleep(5 * session_s)  # the last node is late: five sessions' time
        assert not any(n.up for n in sim.nodes), "formed before the last node arrived"
        await sim.start(2)
        await asyncio.gather(*early)
        assert all(n.up for n in sim.nodes)

        async def formed() -> bool:
            return all([len((await _assignment(sim, c)).isr) == 3 for c in range(sim.coordinators)])

        await _until("every coordinator has its three replicas in sync", formed)

    simulate(tmp_path, 33, work)
