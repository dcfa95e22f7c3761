"""CreatePartitions and DeleteTopics: run the plans of `coordinator.topic_rules`, one topic at a time.

The catalog is not touched here: it follows the coordinators' applied records,
which are reported before the parts' futures resolve, so an answer never runs
ahead of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TypeVar, final

from coordinator import partitions
from coordinator.errors import CoordinatorUnavailable, ErrorCode, Overloaded
from coordinator.operations.routing import NodeCoordinators, wire_code
from coordinator.result import ItemError
from coordinator.settings import property_name
from coordinator.shard import Operation
from coordinator.topic_rules import CreatePlan, DeletePlan, TopicLimits, plan_create_partitions, plan_delete_topic
from protos import coordinator_pb2 as pb

_DONE = ItemError(ErrorCode.NONE, "")
RequestT = TypeVar("RequestT")


@final
class TopicAdmin:
    def __init__(self, coordinators: NodeCoordinators) -> None:
        self._coordinators = coordinators
        self._lock = asyncio.Lock()  # topic creation and deletion are serialised node-wide
        settings = coordinators.settings
        self._limits = TopicLimits(
            len(coordinators.shards), settings.topic_partitions_max, property_name("topic_partitions_max")
        )

    async def create_partitions(self, request: pb.CreatePartitionsRequest) -> pb.CreatePartitionsResponse:
        self._coordinators.limit_items(len(request.topics), "topics")
        response = pb.CreatePartitionsResponse()
        async with self._lock:
            for topic in request.topics:
                unavailable = self._coordinators.unavailable_for_topic_changes()
                plan = plan_create_partitions(self._coordinators.catalog, topic, self._limits, unavailable)
                outcome = plan if isinstance(plan, ItemError) else await self._create(plan, request.timeout_ms)
                response.topics.add(
                    topic_id=topic.topic_id, error_code=wire_code(outcome.error_code), error_message=outcome.message
                )
        return response

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        self._coordinators.limit_items(len(request.topic_ids), "topics")
        response = pb.DeleteTopicsResponse()
        async with self._lock:
            for topic_id in request.topic_ids:
                unavailable = self._coordinators.unavailable_for_topic_changes()
                plan = plan_delete_topic(self._coordinators.catalog, topic_id, unavailable)
                outcome = plan if isinstance(plan, ItemError) else await self._delete(plan, request.timeout_ms)
                response.topics.add(
                    topic_id=topic_id, error_code=wire_code(outcome.error_code), error_message=outcome.message
                )
        return response

    async def _create(self, plan: CreatePlan, timeout_ms: int) -> ItemError:
        operations = {
            coordinator_id: Operation(
                partitions.check_create_partitions,
                partitions.CreatePartitions(plan.topic_id, plan.topic_name, wanted_here),
            )
            for coordinator_id, wanted_here in plan.partitions_by_coordinator.items()
        }
        return await self._run(operations, timeout_ms)

    async def _delete(self, plan: DeletePlan, timeout_ms: int) -> ItemError:
        request = partitions.DeleteTopic(plan.topic_id)
        operations = {c: Operation(partitions.check_delete_topic, request) for c in plan.coordinator_ids}
        return await self._run(operations, timeout_ms)

    async def _run(self, operations: Mapping[int, Operation[RequestT, None]], timeout_ms: int) -> ItemError:
        """Runs one topic's parts; the first coordinator's failure is the topic's answer."""
        if not operations:
            return _DONE
        try:
            self._coordinators.require_room(operations)
        except Overloaded as error:
            return ItemError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(error))
        for outcome in (await self._coordinators.run_parts(operations, timeout_ms)).values():
            if isinstance(outcome, CoordinatorUnavailable):
                return ItemError(outcome.error_code, outcome.message)
        return _DONE
