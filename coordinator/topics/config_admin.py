"""AlterTopicConfigs and DescribeTopicConfigs (DESIGN §4a): asked of the coordinators' leaders, never of the catalog.

A topic's configurations live on every coordinator holding one of its partitions (each records them in its own
log, `coordinator.machine.kinds.topic_configs`, and its retention and offload checks read its own copy). A node's
catalog follows its own replicas and may trail their leaders, or not know a topic another node just created: so
every coordinator is asked, and those not holding the topic say so. The first coordinator holding the topic (the
lowest id) owns its configuration: a description answers from it.

A change is made on every coordinator holding the topic or on none, and changes made at once through different
nodes are serialized, without a lock across nodes, by compare-and-set:
1. every coordinator's leader says what it holds (a read through its pipeline: every change acknowledged before is
   in it); the change is computed and checked on the owner's configuration, with the node's defaults;
2. each holder, in ascending id order (the owner first), is asked to go from what it held to the result, only if
   it still holds what it held (`TopicConfigsChange.expected`): one record each;
3. a part that fails (refused, unreachable, or changed meanwhile by another call) ends the change: the parts
   already made are put back, in reverse order and by compare-and-set again, and the caller gets the failure.
Two changes at once meet first at the owner; the one behind fails there, having changed nothing (a retriable
COORDINATOR_NOT_AVAILABLE), and the one ahead goes on. A node that stops between two parts (or a put-back that
fails) leaves holders disagreeing until the next change of the topic, which starts from the owner's configuration
and makes them all hold its result.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import final

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, Overloaded
from coordinator.base.result import ItemError
from coordinator.cluster.peers import PeerClient, change_topic_at
from coordinator.machine.topic_names import topic_id_problem
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from coordinator.runtime.shard import Operation
from coordinator.topics.config_checks import ConfigsOutcome, TopicConfigsChange, check_topic_configs, not_here
from coordinator.topics.rules import check_configs_change
from coordinator.topics.topic_configs import ConfigDefaults, StoredConfigs, altered, config_entries
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal


def wire_entries(stored: Mapping[str, str], defaults: ConfigDefaults) -> list[pb.ConfigEntry]:
    """Every known configuration, sorted by name, as the contract's ConfigEntry."""
    return [
        pb.ConfigEntry(name=e.name, value=e.value, is_default=e.is_default) for e in config_entries(stored, defaults)
    ]


def merged(outcomes: Mapping[int, ConfigsOutcome], every_one_counts: bool) -> ConfigsOutcome:
    """One topic's answer from its coordinators' (by coordinator id): the configurations of the first holding it.

    `every_one_counts` (a change): any coordinator's failure is the answer, as each must take the change. Else (a
    read) a failure matters only when no coordinator answered for the topic: it may be the one holding it.
    """
    ordered = [outcomes[c] for c in sorted(outcomes)]
    holding = [o for o in ordered if o.error_code == ErrorCode.NONE]
    failed = [o for o in ordered if o.error_code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    if failed and (every_one_counts or not holding):
        return failed[0]
    return holding[0] if holding else ordered[0]


def _unavailable(error: CoordinatorUnavailable | ItemError) -> ConfigsOutcome:
    code = error.error_code
    return ConfigsOutcome(code, error.message, {})


@final
class TopicConfigAdmin:
    def __init__(self, coordinators: NodeCoordinators, peers: PeerClient | None, lock: asyncio.Lock) -> None:
        self._coordinators = coordinators
        self._peers = peers
        self._lock = lock  # the node's topic changes, one at a time (coordinator.topics.admin)
        self._defaults = ConfigDefaults.from_settings(coordinators.settings)

    async def alter_topic_configs(self, request: pb.AlterTopicConfigsRequest) -> pb.AlterTopicConfigsResponse:
        self._coordinators.limit_items(len(request.topics), "topics")
        given = Counter(topic.topic_id for topic in request.topics)
        response = pb.AlterTopicConfigsResponse()
        async with self._lock:
            for topic in request.topics:
                result = response.topics.add(topic_id=topic.topic_id)
                if given[topic.topic_id] > 1:  # Kafka's "duplicate resource": neither change is made
                    set_error(result, ItemError(ErrorCode.INVALID_REQUEST, "the topic id is given more than once"))
                    continue
                problem = check_configs_change(topic, self._coordinators.unavailable_for_topic_changes())
                if problem is not None:
                    set_error(result, problem)
                    continue
                set_pairs = tuple((config.name, config.value) for config in topic.set)
                change = TopicConfigsChange(
                    topic.topic_id, set_pairs, tuple(topic.delete), request.validate_only, self._defaults
                )
                self._answer(result, await self._change(change, request.timeout_ms))
        return response

    async def _change(self, change: TopicConfigsChange, timeout_ms: int) -> ConfigsOutcome:
        """The change on every coordinator holding the topic, or on none (the module's comment says how)."""
        read = TopicConfigsChange(change.topic_id, validate_only=True)
        held_by = await self._ask(range(len(self._coordinators.shards)), read, timeout_ms)
        outcome = merged(held_by, every_one_counts=True)  # any coordinator that could not say: nothing is changed
        if outcome.error_code != ErrorCode.NONE:
            return outcome
        held = {c: dict(o.configs) for c, o in sorted(held_by.items()) if o.error_code == ErrorCode.NONE}
        owned = held[min(held)]
        result = altered(owned, change.set_pairs, change.delete, self._defaults)
        if isinstance(result, ItemError):
            return ConfigsOutcome(result.error_code, result.message, owned)
        if change.validate_only:
            return ConfigsOutcome(ErrorCode.NONE, "", result)
        made: list[int] = []
        for coordinator_id, before in held.items():
            part = (await self._ask([coordinator_id], _moving(change.topic_id, before, result), timeout_ms))[
                coordinator_id
            ]
            if part.error_code != ErrorCode.NONE:
                left = await self._put_back(change.topic_id, made, held, result, timeout_ms)
                note = f" (coordinators {left} still hold the change: the next change makes them agree)" if left else ""
                return ConfigsOutcome(part.error_code, f"coordinator {coordinator_id}: {part.message}{note}", owned)
            if before != result:
                made.append(coordinator_id)
        return ConfigsOutcome(ErrorCode.NONE, "", result)

    async def _put_back(
        self,
        topic_id: bytes,
        made: list[int],
        held: Mapping[int, StoredConfigs],
        result: StoredConfigs,
        timeout_ms: int,
    ) -> list[int]:
        """Undoes the parts made, newest first, each only if it still holds the result; those that could not be."""
        left = []
        for coordinator_id in reversed(made):
            back = _moving(topic_id, result, held[coordinator_id])
            outcome = (await self._ask([coordinator_id], back, timeout_ms))[coordinator_id]
            if outcome.error_code != ErrorCode.NONE:
                left.append(coordinator_id)
        return sorted(left)

    async def describe_topic_configs(self, request: pb.DescribeTopicConfigsRequest) -> pb.DescribeTopicConfigsResponse:
        self._coordinators.limit_items(len(request.topic_ids), "topics")
        response = pb.DescribeTopicConfigsResponse()
        for topic_id in request.topic_ids:
            result = response.topics.add(topic_id=topic_id)
            problem = topic_id_problem(topic_id)
            if problem:
                set_error(result, ItemError(ErrorCode.INVALID_REQUEST, problem))
                continue
            held = self._coordinators.catalog.topic(topic_id)
            asked = sorted(set(held.partitions.values())) if held is not None else range(len(self._coordinators.shards))
            self._answer(result, await self.read(topic_id, asked, 0))
        return response

    async def read(self, topic_id: bytes, coordinator_ids: Iterable[int], timeout_ms: int) -> ConfigsOutcome:
        """The configurations set on a topic, from the first of these coordinators that holds it."""
        outcomes = await self._ask(coordinator_ids, TopicConfigsChange(topic_id, validate_only=True), timeout_ms)
        return merged(outcomes, every_one_counts=False)

    def _answer(
        self,
        result: pb.AlterTopicConfigsResponse.TopicResult | pb.DescribeTopicConfigsResponse.TopicResult,
        outcome: ConfigsOutcome,
    ) -> None:
        set_error(result, outcome)
        if outcome.error_code == ErrorCode.NONE:
            result.configs.extend(wire_entries(outcome.configs, self._defaults))

    async def change_here(self, request: internal.ChangeTopicRequest) -> internal.ChangeTopicResponse:
        """Another node's part of a configuration change (or read), for a coordinator this node leads."""
        expected = tuple((c.name, c.value) for c in request.expected_configs) if request.expect_configs else None
        change = TopicConfigsChange(
            request.topic_id,
            tuple((config.name, config.value) for config in request.configs),
            tuple(request.delete_configs),
            request.validate_only,
            self._defaults,
            expected,
        )
        outcome = (await self._run_here([request.coordinator_id], change, request.timeout_ms))[request.coordinator_id]
        return internal.ChangeTopicResponse(
            error_code=outcome.error_code,
            error_message=outcome.message,
            configs=[pb.TopicConfig(name=name, value=outcome.configs[name]) for name in sorted(outcome.configs)],
        )

    # ------------------------------------------------------------------ asking the coordinators' leaders

    async def _ask(
        self, coordinator_ids: Iterable[int], change: TopicConfigsChange, timeout_ms: int
    ) -> dict[int, ConfigsOutcome]:
        """Each coordinator's outcome of the change: run here where this node leads it, else at its leader."""
        wanted = list(coordinator_ids)
        here = [c for c in wanted if self._coordinators.shard(c).leads]
        elsewhere = [c for c in wanted if c not in here]
        remote = asyncio.gather(*(self._at_leader(c, change, timeout_ms) for c in elsewhere))
        local = await self._run_here(here, change, timeout_ms)
        return {**local, **dict(zip(elsewhere, await remote, strict=True))}

    async def _run_here(
        self, coordinator_ids: Sequence[int], change: TopicConfigsChange, timeout_ms: int
    ) -> dict[int, ConfigsOutcome]:
        operations = {c: Operation(check_topic_configs, change) for c in coordinator_ids}
        if not operations:
            return {}
        try:
            self._coordinators.require_room(operations)
        except Overloaded as error:
            refused = ItemError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(error))
            return {c: _unavailable(refused) for c in operations}
        return {
            c: _unavailable(outcome) if isinstance(outcome, CoordinatorUnavailable) else outcome
            for c, outcome in (await self._coordinators.run_parts(operations, timeout_ms)).items()
        }

    async def _at_leader(self, coordinator_id: int, change: TopicConfigsChange, timeout_ms: int) -> ConfigsOutcome:
        role = self._coordinators.shard(coordinator_id).role
        if self._peers is None or role is None or not role.leader_address:
            return ConfigsOutcome(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {coordinator_id} has no leader", {}
            )
        timeout_s = self._coordinators.timeout_s(timeout_ms)
        part = internal.ChangeTopicRequest(
            coordinator_id=coordinator_id, topic_id=change.topic_id, alter_configs=True,
            configs=[pb.TopicConfig(name=n, value=v) for n, v in change.set_pairs], delete_configs=change.delete,
            validate_only=change.validate_only, timeout_ms=int(timeout_s * 1000),
            expect_configs=change.expected is not None,
            expected_configs=[pb.TopicConfig(name=n, value=v) for n, v in change.expected or ()],
        )  # fmt: skip
        answer = await change_topic_at(self._peers, role.leader_address, part, timeout_s)
        configs = {config.name: config.value for config in answer.configs}
        outcome = ConfigsOutcome(ErrorCode(answer.error_code), answer.error_message, configs)
        return outcome if outcome.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else not_here(change.topic_id)


def _moving(topic_id: bytes, before: StoredConfigs, after: StoredConfigs) -> TopicConfigsChange:
    """A coordinator's part: from `before` (which it must still hold) to the whole configuration `after`."""
    return TopicConfigsChange(topic_id, tuple(sorted(after.items())), expected=tuple(sorted(before.items())))
