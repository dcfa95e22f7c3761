"""CreateCoordinators on a node of a cluster: coordinators added online (`diskless coordinators add`, DESIGN §6a).

The count lives in etcd's `config` key, not in any node's data directory. An add goes in steps, each of them safe to
crash after, each done by whichever node gets there first:

1. the count is raised by a compare-and-set on the key's revision: the decision. The call may reach any node; etcd
   decides between two adds that read the same count (one wins, the other decides again on the new count);
2. each added coordinator's replicas are placed over the live nodes (`placement.place_added`: the nodes holding the
   fewest replicas, the one leading the fewest first), by compare-and-set on its absent key, the others staying
   where they are (coordinator/cluster/joining.py);
3. every node reads the count at its next refresh (this one at once), makes and loads the replicas it holds in the
   role etcd gives them: the first replica leads, the others fetch from it and stay in its ISR.

A node killed after step 1 leaves steps 2 and 3 to the other nodes' refreshes, or to the call retried: the same
total (or the same expected count) again answers NONE and completes what is missing, never adding twice. A node
restarting with an older `--coordinators` takes the stored count when it joins (`store.form` returns it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import final

from coordinator.base.errors import ErrorCode
from coordinator.cluster.controller import ClusterController
from coordinator.cluster.preferred_leaders import ElectionRefused
from coordinator.cluster.roles import RoleHolder
from coordinator.node.coordinator_count import CountChange, plan_count_change
from coordinator.node.node import Node
from coordinator.reads.readers.supervisor import ReadProcesses
from coordinator.runtime.node_coordinators import wire_code
from coordinator.runtime.shard import CoordinatorShard
from protos import admin_pb2 as admin

log = logging.getLogger(__name__)
COUNT_DECISIONS_MAX = 5  # adds racing on other nodes move the count: decide again on the new one, this many times


@final
class ClusterCoordinatorGrowth:
    """Answers CreateCoordinators in a cluster, and makes here the coordinators any add raised the count to."""

    def __init__(
        self,
        node: Node,
        controller: ClusterController,
        holder: Callable[[CoordinatorShard], RoleHolder],
        readers: Callable[[], ReadProcesses | None],
    ) -> None:
        self._node = node
        self._controller = controller
        self._holder = holder
        self._readers = readers
        self._growing = asyncio.Lock()  # the refresh loop and a call may both find the count raised: one grows

    async def create_coordinators(self, request: admin.CreateCoordinatorsRequest) -> admin.CreateCoordinatorsResponse:
        change = CountChange(ErrorCode.NONE, "", len(self._node.shards), len(self._node.shards))
        for _ in range(COUNT_DECISIONS_MAX):
            current = await self._controller.stored_count()
            change = plan_count_change(current, request.count, request.expected_count)
            if change.error_code is not ErrorCode.NONE or request.validate_only:
                return _answer(change)
            try:
                config = await self._controller.raise_count(change.previous, change.count)
            except ElectionRefused as error:
                return _answer(change, ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{error}: try again")
            if config.coordinators != change.count:
                continue  # another add changed the count between the read and the compare-and-set
            if not self._controller.placed():
                return _answer(
                    change, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{change.count} coordinators recorded, but fewer live nodes than the replication factor "
                    f"{config.replication_factor} to place the added ones: they are placed once enough nodes are live "
                    "(the same call again waits for that)",
                )  # fmt: skip
            if change.adds:
                log.info("coordinators %d..%d added to the cluster", change.previous, change.count - 1)
            return _answer(change)
        return _answer(
            change, ErrorCode.INVALID_REQUEST, "the cluster's coordinator count kept changing (other adds): try again"
        )

    async def grow(self, count: int) -> None:
        """Makes and loads this node's replicas of coordinators len(shards)..count-1 in the roles etcd gives them,
        then the controller sets their roles from now on and the reader processes start again over all of them."""
        async with self._growing:
            first = len(self._node.shards)
            if count <= first:
                return
            log.info("node makes coordinators %d..%d (the cluster's count is %d)", first, count - 1, count)
            if not await self._node.add_coordinators(count, self._controller.initial_roles()):
                log.error("some added coordinators failed to load: they go on trying (see above)")
            await self._controller.hold([self._holder(shard) for shard in self._node.shards[first:]])
            readers = self._readers()
            if readers is not None:
                await readers.grow(self._node.shards)


def follow_cluster_count(
    node: Node,
    controller: ClusterController,
    holder: Callable[[CoordinatorShard], RoleHolder],
    readers: Callable[[], ReadProcesses | None],
) -> ClusterCoordinatorGrowth:
    """The node answers CreateCoordinators and makes the coordinators every add raised the cluster's count to."""
    growth = ClusterCoordinatorGrowth(node, controller, holder, readers)
    node.router.growth = growth
    controller.on_count_raised = growth.grow
    return growth


def _answer(
    change: CountChange, error_code: ErrorCode | None = None, message: str = ""
) -> admin.CreateCoordinatorsResponse:
    code = change.error_code if error_code is None else error_code
    return admin.CreateCoordinatorsResponse(
        error_code=wire_code(code),
        error_message=message or change.message,
        previous_count=change.previous,
        count=change.count,
    )
