"""Topic-wide rules as pure plans (coordinator.topics.rules), and the catalog derived from records: no I/O."""

from __future__ import annotations

import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError
from coordinator.machine import records
from coordinator.machine.catalog import PlacedPartition, TopicCatalog
from coordinator.machine.topic_names import coordinator_for_new_partition
from coordinator.topics.rules import (
    CreatePlan,
    DeletePlan,
    TopicLimits,
    check_configs_change,
    plan_create_partitions,
    plan_delete_topic,
)
from protos import coordinator_pb2 as pb

TOPIC = bytes(range(1, 17))
OTHER = bytes(range(2, 18))
LIMITS = TopicLimits(
    coordinators=3, partitions_max=10, partitions_max_setting="diskless.coordinator.topic.partitions.max"
)
DOWN = ItemError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "topic changes wait for every coordinator: loading")


def catalog_with(topic_id: bytes, name: str, partitions: range) -> TopicCatalog:
    catalog = TopicCatalog()
    for partition in partitions:
        coordinator_id = coordinator_for_new_partition(topic_id, partition, LIMITS.coordinators)
        catalog.apply_records(coordinator_id, [records.partition_created(partition, topic_id, name, partition)])
    return catalog


def create(catalog: TopicCatalog, topic_id: bytes, name: str, count: int, unavailable: ItemError | None = None):
    topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=count)
    return plan_create_partitions(catalog, topic, LIMITS, unavailable)


def planned(plan: ItemError | CreatePlan) -> dict[int, tuple[int, ...]]:
    assert isinstance(plan, CreatePlan), plan
    return dict(plan.partitions_by_coordinator)


def code(outcome: object) -> ErrorCode:
    assert isinstance(outcome, ItemError), outcome
    return outcome.error_code


# ---------------------------------------------------------------- CreatePartitions


def test_an_unknown_topic_plans_partitions_0_to_n_minus_1_spread_over_the_coordinators() -> None:
    plan = planned(create(TopicCatalog(), TOPIC, "orders", 5))
    assert sorted(p for partitions in plan.values() for p in partitions) == [0, 1, 2, 3, 4]
    for coordinator_id, partitions in plan.items():
        assert all(coordinator_for_new_partition(TOPIC, p, 3) == coordinator_id for p in partitions)
        assert list(partitions) == sorted(partitions)


def test_a_known_topic_plans_only_the_missing_partitions() -> None:
    plan = planned(create(catalog_with(TOPIC, "orders", range(3)), TOPIC, "orders", 5))
    assert sorted(p for partitions in plan.values() for p in partitions) == [3, 4]


def test_the_same_count_is_an_empty_plan() -> None:
    assert planned(create(catalog_with(TOPIC, "orders", range(3)), TOPIC, "orders", 3)) == {}


@pytest.mark.parametrize("count", [0, -1, 11])
def test_a_count_outside_1_to_the_maximum_is_invalid_partitions(count: int) -> None:
    outcome = create(TopicCatalog(), TOPIC, "orders", count)
    assert code(outcome) == ErrorCode.INVALID_PARTITIONS
    assert "diskless.coordinator.topic.partitions.max" in outcome.message  # type: ignore[union-attr]


def test_fewer_partitions_than_now_is_invalid_partitions() -> None:
    assert code(create(catalog_with(TOPIC, "orders", range(4)), TOPIC, "orders", 2)) == ErrorCode.INVALID_PARTITIONS


def test_identity_clashes_come_before_the_count() -> None:
    catalog = catalog_with(TOPIC, "orders", range(2))
    assert code(create(catalog, TOPIC, "payments", 0)) == ErrorCode.INCONSISTENT_TOPIC_ID
    assert code(create(catalog, OTHER, "orders", 0)) == ErrorCode.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 250])
def test_a_bad_name_is_invalid_topic_exception(name: str) -> None:
    assert code(create(TopicCatalog(), TOPIC, name, 1)) == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("topic_id", [b"", b"\x01" * 15, b"\x00" * 16])
def test_a_bad_id_is_invalid_request(topic_id: bytes) -> None:
    assert code(create(TopicCatalog(), topic_id, "orders", 1)) == ErrorCode.INVALID_REQUEST


def test_a_coordinator_out_of_service_stops_the_rules_but_not_the_form_checks() -> None:
    assert create(TopicCatalog(), TOPIC, "orders", 1, DOWN) == DOWN
    assert code(create(TopicCatalog(), b"", "orders", 1, DOWN)) == ErrorCode.INVALID_REQUEST
    assert code(create(TopicCatalog(), TOPIC, "..", 1, DOWN)) == ErrorCode.INVALID_TOPIC_EXCEPTION


# ---------------------------------------------------------------- DeleteTopics


def test_delete_asks_every_coordinator_in_ascending_order_whatever_the_catalog_knows() -> None:
    """The catalog may trail another node's creation: each coordinator deletes what it holds; none holding the topic
    makes it unknown (coordinator/topics/admin.py), never the catalog alone."""
    assert plan_delete_topic(TOPIC, None, 3) == DeletePlan(TOPIC, (0, 1, 2))


def test_delete_of_a_bad_id_or_while_a_coordinator_is_unavailable() -> None:
    assert code(plan_delete_topic(b"\x00" * 16, DOWN, 3)) == ErrorCode.INVALID_REQUEST
    assert plan_delete_topic(TOPIC, DOWN, 3) == DOWN


# ---------------------------------------------------------------- the catalog follows records


def test_the_catalog_follows_created_and_deleted_records_per_coordinator() -> None:
    catalog = TopicCatalog()
    catalog.apply_records(0, [records.partition_created(0, TOPIC, "orders", 0), records.leader_change(2, 0)])
    catalog.apply_records(1, [records.partition_created(0, TOPIC, "orders", 1)])
    assert (catalog.coordinator_of(TOPIC, 0), catalog.coordinator_of(TOPIC, 1)) == (0, 1)
    assert catalog.topic_id_of("orders") == TOPIC
    catalog.apply_records(0, [records.topic_deleted(TOPIC)])
    assert catalog.coordinator_of(TOPIC, 0) is None
    assert catalog.coordinator_of(TOPIC, 1) == 1, "coordinator 1 has not applied its deletion yet"
    catalog.apply_records(1, [records.topic_deleted(TOPIC)])
    assert catalog.topic(TOPIC) is None and catalog.topic_id_of("orders") is None


def test_a_rebuild_replaces_everything() -> None:
    catalog = catalog_with(TOPIC, "orders", range(3))
    catalog.rebuild([PlacedPartition(2, OTHER, "payments", 0)])
    assert catalog.topic(TOPIC) is None
    assert catalog.coordinator_of(OTHER, 0) == 2


# ---------------------------------------------------------------- rules a mutation run found unpinned (issue #40)


@pytest.mark.parametrize("now", [2, 3, 4])
def test_one_partition_fewer_than_now_is_invalid_partitions(now: int) -> None:
    # Partitions 0..now-1 are a count of `now`: asking for one fewer is going down, not "nothing missing".
    outcome = create(catalog_with(TOPIC, "orders", range(now)), TOPIC, "orders", now - 1)
    assert code(outcome) == ErrorCode.INVALID_PARTITIONS
    assert f"has {now} partitions" in outcome.message  # type: ignore[union-attr]


def test_one_partition_and_exactly_the_maximum_are_allowed() -> None:
    assert planned(create(TopicCatalog(), TOPIC, "orders", 1)) != {}
    assert sum(len(p) for p in planned(create(TopicCatalog(), TOPIC, "orders", LIMITS.partitions_max)).values()) == (
        LIMITS.partitions_max
    )


def test_an_id_held_under_another_name_is_inconsistent_whichever_name_sorts_first() -> None:
    for held, asked in (("orders", "payments"), ("payments", "orders")):
        outcome = create(catalog_with(TOPIC, held, range(1)), TOPIC, asked, 1)
        assert code(outcome) == ErrorCode.INCONSISTENT_TOPIC_ID


def test_a_new_topic_takes_the_configs_asked_for_and_a_known_one_keeps_its_own() -> None:
    configs = [pb.TopicConfig(name="retention.ms", value="1000")]
    new = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC, name="orders", num_partitions=1, configs=configs)
    plan = plan_create_partitions(TopicCatalog(), new, LIMITS, None)
    assert isinstance(plan, CreatePlan) and ("retention.ms", "1000") in plan.configs
    known = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC, name="orders", num_partitions=3, configs=configs)
    plan = plan_create_partitions(catalog_with(TOPIC, "orders", range(1)), known, LIMITS, None)
    assert isinstance(plan, CreatePlan) and plan.configs == () and plan.holders


def test_a_config_change_waits_for_every_coordinator_and_checks_names_and_values() -> None:
    change = pb.AlterTopicConfigsRequest.Topic(topic_id=TOPIC, set=[pb.TopicConfig(name="retention.ms", value="1000")])
    assert check_configs_change(change, DOWN) == DOWN
    assert check_configs_change(change, None) is None
    unknown = pb.AlterTopicConfigsRequest.Topic(topic_id=TOPIC, set=[pb.TopicConfig(name="no.such.config", value="1")])
    assert isinstance(check_configs_change(unknown, None), ItemError)
    assert code(check_configs_change(pb.AlterTopicConfigsRequest.Topic(topic_id=b"short"), None)) == (
        ErrorCode.INVALID_REQUEST
    )


def test_a_name_held_by_another_id_is_topic_already_exists_whichever_id_sorts_first() -> None:
    for held, asked in ((TOPIC, OTHER), (OTHER, TOPIC)):
        outcome = create(catalog_with(held, "orders", range(1)), asked, "orders", 1)
        assert code(outcome) == ErrorCode.TOPIC_ALREADY_EXISTS
