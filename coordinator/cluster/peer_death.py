"""Peer-observed death (DESIGN §6a): a node whose process is gone loses its session at once, not after its TTL.

A follower whose fetch from its leader's node failed as unreachable (UNAVAILABLE) names that node here. The
watch reads the node's registration (its endpoint and the lease it is under), then connects to the endpoint's
port twice, `peer.death.probe.interval.ms` apart. Both refused: nothing listens there, so the process that
registered is gone (a node binds its port before it registers and holds it until it exits; kill -9 closes it at
once, while a partition, a stall or a full backlog make a connect time out, never refuse). Then it revokes that
lease: the node's key goes, and every node's next refresh elects new leaders without waiting out the session.

What the revocation may not break:

- **A node that restarted meanwhile.** Only the lease read before the refused connects is revoked. A new
  registration has a lease of its own, and it exists only once the old key is gone; a registration read before
  the probes whose process listens makes a probe connect, and nothing is revoked.
- **Safety.** Leadership never hangs on this: a node whose lease was revoked while it ran learns it at its next
  renewal (etcd knows the lease no more) and steps down exactly as when the lease expires
  (`controller._keep_alive`), then registers again. Until then it acknowledges nothing the new leader lacks: its
  high watermark waits for every ISR member, and the new leader is one (elected from the ISR etcd holds, which
  the old leader's own ISR changes wrote). A revocation of a live node would be a needless failover, no more;
  and a live node does not refuse connections on the port it registered.

It costs a bare TCP connect to a suspected node at most every probe interval while its fetches fail, and one etcd
read (and one revocation) per confirmed death.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import final

from coordinator.base.clock import Clock
from coordinator.cluster.store import ClusterStore

log = logging.getLogger(__name__)

Refuses = Callable[[str, int], Awaitable[bool]]  # (HOST:PORT, timeout ms) -> whether the connect was refused


def probe_target(host: str, port: int) -> str:
    """HOST:PORT to connect to (a wildcard address is reached on loopback, as the peers' calls reach it)."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@final
class PeerDeathWatch:
    """The suspected nodes, probed one round at a time; `revoked` counts the sessions ended (a metric, and tests')."""

    def __init__(
        self,
        own_node_id: int,
        store: ClusterStore,
        clock: Clock,
        refuses: Refuses,
        on_death: Callable[[int], Awaitable[None]],
        interval_ms: int,
        timeout_ms: int,
    ) -> None:
        self._own_node_id = own_node_id
        self._store = store
        self._clock = clock
        self._refuses = refuses
        self._on_death = on_death  # awaited after a revocation: the node's refresh, run at once
        self._interval_ms = interval_ms
        self._timeout_ms = timeout_ms
        self._suspects: set[int] = set()
        self._named = asyncio.Event()
        self.revoked = 0

    def suspect(self, node_id: int) -> None:
        """A call to `node_id` found it unreachable; the next round probes it."""
        if node_id != self._own_node_id and node_id >= 0:
            self._suspects.add(node_id)
            self._named.set()

    async def run(self) -> None:
        """Rounds until cancelled: one probe of every suspect, then at least one interval before the next round, so
        a node whose fetches keep failing is probed at most once per interval whatever the number of coordinators."""
        while True:
            await self._named.wait()
            self._named.clear()
            suspects, self._suspects = sorted(self._suspects), set()
            for node_id in suspects:
                try:
                    await self.check(node_id)
                except Exception as error:  # etcd unreachable: the session's TTL ends it anyway
                    log.warning("probe of node %d failed: %s", node_id, error)
            await self._clock.sleep_ms(self._interval_ms)

    async def check(self, node_id: int) -> bool:
        """Probes one node; True when its process is gone and its session was ended here."""
        registration = await self._store.node_registration(node_id)
        if registration is None:
            return False  # its session ended already
        target = probe_target(registration.endpoint.host, registration.endpoint.port)
        if not await self._refuses(target, self._timeout_ms):
            return False
        await self._clock.sleep_ms(self._interval_ms)
        if not await self._refuses(target, self._timeout_ms):
            return False
        try:
            await self._store.revoke(registration.lease_id)
        except Exception:
            again = await self._store.node_registration(node_id)
            if again is not None and again.lease_id == registration.lease_id:
                raise  # the lease still holds the node's key: etcd failed
            log.info("node %d: its session (lease %d) ended already", node_id, registration.lease_id)
            await self._on_death(node_id)  # another peer revoked it first (etcd: lease not found): elect here too
            return False
        self.revoked += 1
        log.warning(
            "node %d at %s refuses connections (its process is gone): revoked its session (lease %d) so that "
            "its coordinators elect now",
            node_id, target, registration.lease_id,
        )  # fmt: skip
        await self._on_death(node_id)
        return True
