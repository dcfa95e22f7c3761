"""One node: the coordinators it hosts, loaded together and closed together."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from coordinator.clock import Clock, SystemClock
from coordinator.file_workers import FileWorker
from coordinator.metrics import Metrics
from coordinator.object_store import ObjectStore, StoreConfig, open_object_store
from coordinator.peers import PeerAddress, PeerClient
from coordinator.router import Router
from coordinator.settings import Settings
from coordinator.shard import CoordinatorShard

log = logging.getLogger(__name__)


def coordinator_directory(data_dir: Path, coordinator_id: int) -> Path:
    return data_dir / f"coordinator-{coordinator_id}"


class Node:
    def __init__(self, settings: Settings, clock: Clock | None = None, metrics: Metrics | None = None) -> None:
        self.settings = settings
        clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        self.shards = [
            CoordinatorShard(i, coordinator_directory(settings.data_dir, i), settings, clock, self.metrics)
            for i in range(settings.coordinators)
        ]
        self.router = Router(self.shards, settings, clock, self.metrics)
        self._clock = clock
        self.object_store: ObjectStore | None = None
        self.peers = PeerClient(settings, self._peer_address)
        self.file_workers: list[FileWorker] = []

    def _peer_address(self, coordinator_id: int) -> PeerAddress:
        """Every coordinator is hosted here (one node): peers are reached at this node's own address."""
        return PeerAddress(self.router.endpoint.host, self.router.endpoint.port)

    async def load(self) -> bool:
        """Loads every coordinator; True when all are ACTIVE (a failed one is logged and stays FAILED)."""
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        outcomes = await asyncio.gather(*(shard.load() for shard in self.shards), return_exceptions=True)
        for shard, outcome in zip(self.shards, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.error("coordinator %d failed to load: %s", shard.coordinator_id, outcome)
        self.router.rebuild_catalog()
        return not any(isinstance(o, BaseException) for o in outcomes)

    def start_file_workers(self) -> None:
        """Starts each coordinator's hand-over and deletion worker (once the node answers calls)."""
        self.object_store = open_object_store(StoreConfig.from_settings(self.settings))
        self.file_workers = [
            FileWorker(shard, self.settings, self._clock, self.object_store, self.peers, self.metrics)
            for shard in self.shards
        ]
        for worker in self.file_workers:
            worker.start()

    async def close(self) -> None:
        await asyncio.gather(*(worker.stop() for worker in self.file_workers))
        await self.peers.close()
        await asyncio.gather(*(shard.close() for shard in self.shards))
        if self.object_store is not None:
            self.object_store.close()
