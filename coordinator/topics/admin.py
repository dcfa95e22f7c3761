"""CreatePartitions and DeleteTopics: run the plans of `coordinator.topics.rules`, one topic at a time.
(AlterTopicConfigs and DescribeTopicConfigs are `coordinator.topics.config_admin`'s, under the same lock.)

In a cluster a coordinator this node only follows gets its part from its
leader: the part is sent there (`ChangeTopic`), and applied there as here.

The catalog follows the coordinators' applied records; a creation this node
acknowledged is also put in it at once (`TopicCatalog.learn`), since the
replicas this node only follows apply it later: a node answers every call after
its acknowledgement with the topic in place (read your writes, DESIGN §6a).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import TypeVar, final

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, Overloaded
from coordinator.base.result import ItemError
from coordinator.cluster.peers import PeerClient, change_topic_at
from coordinator.config.settings import property_name
from coordinator.machine.topic_names import topic_name_problem
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error, wire_code
from coordinator.runtime.shard import Operation
from coordinator.topics import partition_checks
from coordinator.topics.absent import learn_from_absent_coordinators
from coordinator.topics.config_admin import TopicConfigAdmin
from coordinator.topics.rules import CreatePlan, DeletePlan, TopicLimits, plan_create_partitions, plan_delete_topic
from coordinator.topics.topic_configs import ConfigDefaults, configs_at_creation
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal

_DONE = ItemError(ErrorCode.NONE, "")
RequestT = TypeVar("RequestT")


@final
class TopicAdmin:
    def __init__(self, coordinators: NodeCoordinators, peers: PeerClient | None = None) -> None:
        self._coordinators = coordinators
        self._peers = peers
        self._lock = asyncio.Lock()  # topic creation, deletion and configuration changes are serialised node-wide
        settings = coordinators.settings
        self._limits = TopicLimits(
            len(coordinators.shards), settings.topic_partitions_max, property_name("topic_partitions_max"),
            ConfigDefaults.from_settings(settings),
        )  # fmt: skip
        self.configs = TopicConfigAdmin(coordinators, peers, self._lock)

    def _limits_now(self) -> TopicLimits:
        """New partitions spread over every coordinator there is now: coordinators may be added online."""
        count = len(self._coordinators.shards)
        return (
            self._limits
            if count == self._limits.coordinators
            else dataclasses.replace(self._limits, coordinators=count)
        )

    async def create_partitions(self, request: pb.CreatePartitionsRequest) -> pb.CreatePartitionsResponse:
        self._coordinators.limit_items(len(request.topics), "topics")
        response = pb.CreatePartitionsResponse()
        async with self._lock:
            for topic in request.topics:
                unavailable = (
                    await learn_from_absent_coordinators(
                        self._coordinators, self._peers, topic.topic_id, topic.name, request.timeout_ms
                    )
                    or self._coordinators.unavailable_for_topic_changes()
                )
                plan = plan_create_partitions(self._coordinators.catalog, topic, self._limits_now(), unavailable)
                outcome = plan if isinstance(plan, ItemError) else await self._create(plan, request.timeout_ms)
                if not isinstance(plan, ItemError) and outcome.error_code == ErrorCode.NONE:
                    self._coordinators.catalog.learn(plan.topic_id, plan.topic_name, {
                        p: c for c, partitions in plan.partitions_by_coordinator.items() for p in partitions
                    })  # fmt: skip
                response.topics.add(
                    topic_id=topic.topic_id, error_code=wire_code(outcome.error_code), error_message=outcome.message
                )
        return response

    async def describe_topics(self, request: admin.DescribeTopicsRequest) -> admin.DescribeTopicsResponse:
        """Topics by name (the admin service's DescribeTopics): from the catalog, after asking the leaders of the
        coordinators this node holds no replica of about the name, as a creation does."""
        self._coordinators.limit_items(len(request.names), "topics")
        response = admin.DescribeTopicsResponse()
        catalog = self._coordinators.catalog
        for name in request.names:
            result = response.topics.add(name=name)
            problem = topic_name_problem(name)
            if problem is not None:
                set_error(result, ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem))
                continue
            unavailable = await learn_from_absent_coordinators(
                self._coordinators, self._peers, b"", name, request.timeout_ms
            )
            if unavailable is not None:
                set_error(result, unavailable)
                continue
            topic_id = catalog.topic_id_of(name)
            entry = None if topic_id is None else catalog.topic(topic_id)
            if topic_id is None or entry is None:
                set_error(result, ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic is named {name!r}"))
                continue
            result.topic_id, result.partitions = topic_id, len(entry.partitions)
        return response

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        self._coordinators.limit_items(len(request.topic_ids), "topics")
        response = pb.DeleteTopicsResponse()
        async with self._lock:
            for topic_id in request.topic_ids:
                unavailable = self._coordinators.unavailable_for_topic_changes()
                plan = plan_delete_topic(topic_id, unavailable, len(self._coordinators.shards))
                outcome = plan if isinstance(plan, ItemError) else await self._delete(plan, request.timeout_ms)
                response.topics.add(
                    topic_id=topic_id, error_code=wire_code(outcome.error_code), error_message=outcome.message
                )
        return response

    async def _create(self, plan: CreatePlan, timeout_ms: int) -> ItemError:
        configs = plan.configs
        if plan.holders and set(plan.partitions_by_coordinator) - set(plan.holders):
            # Coordinators new to an existing topic take its configurations, as its coordinators hold them now.
            held = await self.configs.read(plan.topic_id, plan.holders, timeout_ms)
            if held.error_code != ErrorCode.NONE:
                return ItemError(held.error_code, held.message)
            configs = tuple(sorted(held.configs.items()))
        parts = {
            coordinator_id: partition_checks.CreatePartitions(plan.topic_id, plan.topic_name, wanted_here, configs)
            for coordinator_id, wanted_here in plan.partitions_by_coordinator.items()
        }
        remote = await self._forward(
            {
                c: internal.ChangeTopicRequest(
                    coordinator_id=c, topic_id=p.topic_id, topic_name=p.topic_name, partitions=p.partitions,
                    configs=[pb.TopicConfig(name=n, value=v) for n, v in p.configs],
                )
                for c, p in parts.items()
            },
            timeout_ms,
        )  # fmt: skip
        operations = {
            c: Operation(partition_checks.check_create_partitions, p) for c, p in parts.items() if self._leads(c)
        }
        return remote if remote is not _DONE else await self._run(operations, timeout_ms)

    async def _delete(self, plan: DeletePlan, timeout_ms: int) -> ItemError:
        """Deletes the topic from every coordinator holding it: unknown if none did. Once acknowledged, this node's
        catalog forgets it at once, whatever the replicas it only follows have applied (read your writes)."""
        remote = {
            c: internal.ChangeTopicRequest(coordinator_id=c, topic_id=plan.topic_id, delete=True)
            for c in plan.coordinator_ids
            if not self._leads(c)
        }
        held: set[int] = set()
        for coordinator_id, answer in (await self._send_parts(remote, timeout_ms)).items():
            if answer.error_code == ErrorCode.NONE:
                held.add(coordinator_id)
            elif answer.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # UNKNOWN: it held none of the topic
                return answer
        request = partition_checks.DeleteTopic(plan.topic_id)
        operations = {
            c: Operation(partition_checks.check_delete_topic, request) for c in plan.coordinator_ids if self._leads(c)
        }
        local = await self._run_deletions(operations, timeout_ms)
        if isinstance(local, ItemError):
            return local
        held |= local
        if not held:
            return ItemError(ErrorCode.UNKNOWN_TOPIC_ID, f"topic id {plan.topic_id.hex()} is unknown")
        # The coordinators led here applied the deletion before answering; the others' replicas here may lag.
        self._coordinators.catalog.forget(plan.topic_id, remote.keys())
        return _DONE

    async def _run_deletions(
        self, operations: Mapping[int, Operation[partition_checks.DeleteTopic, bool | ItemError]], timeout_ms: int
    ) -> ItemError | set[int]:
        """The coordinators (led here) that held the topic and deleted it; the first failure instead."""
        if not operations:
            return set()
        try:
            self._coordinators.require_room(operations)
        except Overloaded as error:
            return ItemError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(error))
        held: set[int] = set()
        for coordinator_id, outcome in (await self._coordinators.run_parts(operations, timeout_ms)).items():
            if isinstance(outcome, CoordinatorUnavailable):
                return ItemError(outcome.error_code, outcome.message)
            if isinstance(outcome, ItemError):  # a partition moving (design §5a): retriable
                return outcome
            if outcome:
                held.add(coordinator_id)
        return held

    def _leads(self, coordinator_id: int) -> bool:
        return self._coordinators.shard(coordinator_id).leads

    async def _forward(self, parts: Mapping[int, internal.ChangeTopicRequest], timeout_ms: int) -> ItemError:
        """Sends the parts of coordinators this node follows to their leaders; the first failure, or done."""
        remote = {c: part for c, part in parts.items() if not self._leads(c)}
        for answer in (await self._send_parts(remote, timeout_ms)).values():
            if answer.error_code != ErrorCode.NONE:
                return answer
        return _DONE

    async def _send_parts(
        self, parts: Mapping[int, internal.ChangeTopicRequest], timeout_ms: int
    ) -> dict[int, ItemError]:
        """Sends each part to its coordinator's leader; each one's answer (COORDINATOR_NOT_AVAILABLE without one)."""
        timeout_s = self._coordinators.timeout_s(timeout_ms)
        answers: dict[int, ItemError] = {}
        calls = {}
        for coordinator_id, part in parts.items():
            role = self._coordinators.shard(coordinator_id).role
            if self._peers is None or role is None or not role.leader_address:
                answers[coordinator_id] = ItemError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {coordinator_id} has no leader"
                )
                continue
            part.timeout_ms = int(timeout_s * 1000)
            calls[coordinator_id] = change_topic_at(self._peers, role.leader_address, part, timeout_s)
        replies = await asyncio.gather(*calls.values())
        for coordinator_id, reply in zip(calls, replies, strict=True):
            answers[coordinator_id] = ItemError(ErrorCode(reply.error_code), reply.error_message)
        return answers

    async def change_here(self, request: internal.ChangeTopicRequest) -> internal.ChangeTopicResponse:
        """Another node's part of a topic change, for a coordinator this node leads."""
        if not self._coordinators.hosts(request.coordinator_id):
            return internal.ChangeTopicResponse(
                error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, error_message=f"no coordinator {request.coordinator_id}"
            )
        if request.alter_configs:
            return await self.configs.change_here(request)
        if request.delete:
            deletion = Operation(partition_checks.check_delete_topic, partition_checks.DeleteTopic(request.topic_id))
            held = await self._run_deletions({request.coordinator_id: deletion}, request.timeout_ms)
            if isinstance(held, ItemError):
                return internal.ChangeTopicResponse(error_code=held.error_code, error_message=held.message)
            if not held:  # the sender merges: the topic is unknown only if no coordinator held it
                return internal.ChangeTopicResponse(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"coordinator {request.coordinator_id} holds no partition of the topic",
                )
            return internal.ChangeTopicResponse()
        configs = configs_at_creation([(c.name, c.value) for c in request.configs])  # canonical, as the sender's
        if isinstance(configs, ItemError):
            return internal.ChangeTopicResponse(error_code=configs.error_code, error_message=configs.message)
        wanted = partition_checks.CreatePartitions(
            request.topic_id, request.topic_name, tuple(request.partitions), tuple(sorted(configs.items()))
        )
        creation = Operation(partition_checks.check_create_partitions, wanted)
        outcome = await self._run({request.coordinator_id: creation}, request.timeout_ms)
        return internal.ChangeTopicResponse(error_code=outcome.error_code, error_message=outcome.message)

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
