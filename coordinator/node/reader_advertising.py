"""A clustered node's reader processes, named in its registration in etcd so every node's FindCoordinator names them.

The readers listen only after the node joined (their ports are theirs to pick), and one restarted may listen
on another port: each change of addresses is written to the node's key under its session lease, again after a
failure (etcd unreachable) until it is written; a newer change supersedes one not yet written. Re-registration
after a lost session carries the last addresses (the controller keeps them in its endpoint).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, final

from coordinator.base.clock import Clock

log = logging.getLogger(__name__)


class Advertiser(Protocol):
    async def advertise_readers(self, addresses: tuple[str, ...]) -> None: ...


@final
class ReaderAdvertising:
    def __init__(self, cluster: Advertiser, clock: Clock, retry_ms: int) -> None:
        self._cluster = cluster
        self._clock = clock
        self._retry_ms = retry_ms
        self._wanted: tuple[str, ...] = ()
        self._changed = asyncio.Event()

    def set(self, addresses: tuple[str, ...]) -> None:
        """The readers' addresses now (called as readers come and go)."""
        self._wanted = addresses
        self._changed.set()

    async def run(self) -> None:
        """The loop the node's worker supervisor runs (coordinator/node/worker_registry.py: reader-advertising)."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            wanted = self._wanted
            try:
                await self._cluster.advertise_readers(wanted)
                log.info("reader processes %s named in this node's registration", ", ".join(wanted) or "(none)")
            except Exception as error:  # etcd unreachable, the session lapsed: written again after a wait
                log.warning("reader addresses not written to etcd (%s); again in %d ms", error, self._retry_ms)
                await self._clock.sleep_ms(self._retry_ms)
                self._changed.set()
