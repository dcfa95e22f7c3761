"""The partition move's admin calls (docs/design.md §5a) as the routing client sends them: MovePartition to the
leader of the partition's coordinator, DescribePartitionMove to the leader of the move's source, each retried while
that leader moves. The first process of a node spread over commit processes (`diskless serve --processes N`) leads
no coordinator and passes both on with these (Front.LEADING_PROCESS in coordinator/edge/rpcs.py)."""

from __future__ import annotations

from typing import Any

from coordinator.base.backoff import Backoff
from coordinator.client.node_calls import NodeCalls, RoutingError
from coordinator.client.routes import RETRIABLE_CODES
from coordinator.edge.rpcs import ServedBy
from protos import admin_pb2 as admin


class MoveCalls(NodeCalls):
    async def move_partition(self, request: admin.MovePartitionRequest) -> admin.MovePartitionResponse:
        """The move started by the leader of the partition's coordinator (the source)."""
        key = (request.topic_id, request.partition)
        return await self._at_partitions_leader("MovePartition", key, request)  # type: ignore[no-any-return]

    async def describe_partition_move(
        self, request: admin.DescribePartitionMoveRequest
    ) -> admin.DescribePartitionMoveResponse:
        """Where the move is, from the leader of its source coordinator (its move worker drives it)."""
        return await self._at_coordinators_leader(  # type: ignore[no-any-return]
            "DescribePartitionMove", request.from_coordinator_id, request
        )

    def forget_route(self, topic_id: bytes, partition: int) -> None:
        """A move of the partition ended: its calls find its coordinator again (the old one may refuse them for
        another reason first, such as a file's owners, and never answer NOT_COORDINATOR)."""
        self._table.forget_coordinator_of((topic_id, partition))

    def forget_partitions(self) -> None:
        """The catalog changed where this client cannot see it (a commit process cut a move over, or created
        partitions): every partition's coordinator is found again on its next call. Forgetting one partition's
        route is not enough: the catalog does not say which partitions changed, and a stale one is refused by its old
        coordinator as a file not naming it (INVALID_REQUEST), never retried."""
        self._table.partitions.clear()

    async def _at_partitions_leader(self, method: str, key: tuple[bytes, int], request: Any) -> Any:
        deadline = self._deadline()
        backoff = Backoff(self.backoff_initial_ms, self.backoff_max_ms)
        while True:
            problem = await self._refresh([key], deadline, everything=False)
            address = self._table.address_of(key, ServedBy.LEADER)
            answer: Any = await self._send(address, method, request, deadline) if address else None
            if answer is None or isinstance(answer, str):
                answer = answer or problem or f"no leader known for partition {key[1]} of {key[0].hex()}"
                if address:
                    self._table.forget_address(address)
            elif answer.error_code not in RETRIABLE_CODES:
                return answer
            self._table.forget_coordinator_of(key)  # moved, or its leader changed: asked again before the next try
            if not await self._wait_to_retry(backoff, deadline):
                if isinstance(answer, str):
                    raise RoutingError(f"{method}: {answer}")
                return answer

    async def _at_coordinators_leader(self, method: str, coordinator_id: int, request: Any) -> Any:
        deadline = self._deadline()
        backoff = Backoff(self.backoff_initial_ms, self.backoff_max_ms)
        while True:
            route = self._table.routes.get(coordinator_id)
            address = None if route is None else route.address_for(ServedBy.LEADER)
            problem = None
            if address is None:
                self._table.coordinators_known = False
                problem = await self._refresh([], deadline, everything=True)
                route = self._table.routes.get(coordinator_id)
                address = None if route is None else route.address_for(ServedBy.LEADER)
            answer: Any = await self._send(address, method, request, deadline) if address else None
            if answer is None or isinstance(answer, str):
                answer = answer or problem or f"no leader known for coordinator {coordinator_id}"
                if address:
                    self._table.forget_address(address)
            elif answer.error_code not in RETRIABLE_CODES:
                return answer
            self._table.routes.pop(coordinator_id, None)
            if not await self._wait_to_retry(backoff, deadline):
                if isinstance(answer, str):
                    raise RoutingError(f"{method}: {answer}")
                return answer
