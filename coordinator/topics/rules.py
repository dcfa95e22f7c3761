"""Topic-wide rules of CreatePartitions, DeleteTopics and AlterTopicConfigs (DESIGN §4, §4a), as pure plans and checks.

Each rule reads the node's topic catalog and the request and returns either
the item's error or a plan: which coordinator creates (or deletes) which
partitions. Running the plan is the router's; what reaches a coordinator is
its own share, checked again against its view (`coordinator.topics.partition_checks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import final

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError
from coordinator.machine.catalog import TopicLookup
from coordinator.machine.topic_names import coordinator_for_new_partition, topic_id_problem, topic_name_problem
from coordinator.topics.partition_checks import missing_partitions
from coordinator.topics.topic_configs import ConfigDefaults, altered, configs_at_creation
from protos import coordinator_pb2 as pb


@final
@dataclass(frozen=True, slots=True)
class TopicLimits:
    coordinators: int  # coordinators of the node: new partitions are spread over them
    partitions_max: int  # diskless.coordinator.topic.partitions.max
    partitions_max_setting: str  # its name, for the message
    config_defaults: ConfigDefaults = ConfigDefaults()  # the node's: a new topic's configuration is checked whole


@final
@dataclass(frozen=True, slots=True)
class CreatePlan:
    """The topic's missing partitions by coordinator, in partition order; empty when nothing is missing."""

    topic_id: bytes
    topic_name: str
    partitions_by_coordinator: Mapping[int, tuple[int, ...]]
    # A new topic's configurations (set on it, canonical), from the request.
    configs: tuple[tuple[str, str], ...] = ()
    # An existing topic's coordinators: they hold its configurations, which its new partitions' coordinators take.
    holders: tuple[int, ...] = ()


@final
@dataclass(frozen=True, slots=True)
class DeletePlan:
    topic_id: bytes
    coordinator_ids: tuple[int, ...]  # every coordinator, ascending: each deletes what it holds of the topic


def plan_create_partitions(
    catalog: TopicLookup,
    topic: pb.CreatePartitionsRequest.Topic,
    limits: TopicLimits,
    unavailable: ItemError | None,
) -> ItemError | CreatePlan:
    """CreatePartitions' rules for one topic; `unavailable`: why not every coordinator can be read now."""
    problem = topic_id_problem(topic.topic_id)
    if problem:
        return ItemError(ErrorCode.INVALID_REQUEST, problem)
    problem = topic_name_problem(topic.name)
    if problem:
        return ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if unavailable is not None:  # the rules below need every coordinator's partitions
        return unavailable
    # Identity before counts, as Kafka's controller: a clash is reported whatever the count asked for.
    entry = catalog.topic(topic.topic_id)
    if entry is not None and entry.name != topic.name:
        return ItemError(
            ErrorCode.INCONSISTENT_TOPIC_ID, f"topic id belongs to topic {entry.name!r}, not {topic.name!r}"
        )
    owner_of_name = catalog.topic_id_of(topic.name)
    if owner_of_name is not None and owner_of_name != topic.topic_id:
        return ItemError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} exists with id {owner_of_name.hex()}")
    wanted = topic.num_partitions
    if wanted <= 0 or wanted > limits.partitions_max:
        return ItemError(
            ErrorCode.INVALID_PARTITIONS,
            f"num_partitions must be 1..{limits.partitions_max} ({limits.partitions_max_setting}), got {wanted}",
        )
    existing = entry.partitions if entry is not None else {}
    current = max(existing) + 1 if existing else 0
    if wanted < current:
        return ItemError(
            ErrorCode.INVALID_PARTITIONS, f"topic {topic.name!r} has {current} partitions; cannot go down to {wanted}"
        )
    # A new topic takes the configurations asked for; one that exists keeps its own (the request's are ignored).
    configs = (
        configs_at_creation([(c.name, c.value) for c in topic.configs], limits.config_defaults) if entry is None else {}
    )
    if isinstance(configs, ItemError):
        return configs
    by_coordinator: dict[int, list[int]] = {}
    for partition in missing_partitions(list(existing), wanted):
        coordinator_id = coordinator_for_new_partition(topic.topic_id, partition, limits.coordinators)
        by_coordinator.setdefault(coordinator_id, []).append(partition)
    return CreatePlan(
        topic.topic_id,
        topic.name,
        {c: tuple(p) for c, p in by_coordinator.items()},
        tuple(sorted(configs.items())),
        tuple(sorted(set(existing.values()))),
    )


def plan_delete_topic(topic_id: bytes, unavailable: ItemError | None, coordinators: int) -> ItemError | DeletePlan:
    """DeleteTopics' rules for one topic id; `unavailable`: why not every coordinator can be read now.

    Every coordinator is asked, not the ones this node's catalog names: the catalog may trail a creation another node
    acknowledged (a topic it does not know yet, or partitions of it on coordinators it has not heard of). Each
    coordinator's leader deletes what it holds; the topic is unknown only when none held it (read your writes, and
    never a false unknown, DESIGN §6a).
    """
    problem = topic_id_problem(topic_id)
    if problem:
        return ItemError(ErrorCode.INVALID_REQUEST, problem)
    if unavailable is not None:
        return unavailable
    return DeletePlan(topic_id, tuple(range(coordinators)))


def check_configs_change(topic: pb.AlterTopicConfigsRequest.Topic, unavailable: ItemError | None) -> ItemError | None:
    """AlterTopicConfigs' rules for one topic (given once in its request) that the node checks before any coordinator:
    a well-formed id, every coordinator able to take the change (each one holding the topic makes it), names and values
    Kafka accepts. What depends on the topic's configuration (KIP-950) each coordinator holding the topic decides on
    its own view (`coordinator.topics.config_checks`): the node's catalog may trail their leaders."""
    problem = topic_id_problem(topic.topic_id)
    if problem:
        return ItemError(ErrorCode.INVALID_REQUEST, problem)
    if unavailable is not None:
        return unavailable
    result = altered({}, [(c.name, c.value) for c in topic.set], topic.delete)
    return result if isinstance(result, ItemError) else None
