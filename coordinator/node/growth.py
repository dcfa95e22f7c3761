"""CreateCoordinators on a lone node: coordinators added online (`diskless coordinators add`).

The new total is recorded first (coordinator/node/coordinator_count.py), then the coordinators are created and
loaded, then calls reach them, then the reader processes start again over every coordinator. A crash anywhere in
between leaves the recorded count, which the next start completes; the same call again answers NONE and changes
nothing. Existing partitions stay where they are: each partition's coordinator is stored in that coordinator's
state when the partition is created (coordinator/topics/rules.py places only new partitions over the count).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import final

from coordinator.node.coordinator_count import plan_count_change, record_count
from coordinator.node.node import Node
from coordinator.reads.readers.supervisor import ReadProcesses
from coordinator.runtime.node_coordinators import wire_code
from protos import admin_pb2 as admin

log = logging.getLogger(__name__)


@final
class CoordinatorGrowth:
    def __init__(self, node: Node, readers: Callable[[], ReadProcesses | None]) -> None:
        self._node = node
        self._readers = readers
        self._lock = asyncio.Lock()  # one add at a time: the second sees the first's count

    async def create_coordinators(self, request: admin.CreateCoordinatorsRequest) -> admin.CreateCoordinatorsResponse:
        async with self._lock:
            change = plan_count_change(len(self._node.shards), request.count, request.expected_count)
            answer = admin.CreateCoordinatorsResponse(
                error_code=wire_code(change.error_code),
                error_message=change.message,
                previous_count=change.previous,
                count=change.count,
            )
            if not change.adds or request.validate_only:
                return answer
            log.info("adding coordinators %d..%d", change.previous, change.count - 1)
            await asyncio.to_thread(record_count, self._node.settings.data_dir, change.count)
            if not await self._node.add_coordinators(change.count):
                log.error("some added coordinators failed to load: they go on trying (see above)")
            readers = self._readers()
            if readers is not None:
                await readers.grow(self._node.shards)
            log.info("%d coordinators now", change.count)
            return answer
