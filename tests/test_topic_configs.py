"""Topic configurations through the real socket (DESIGN §4a): CreatePartitions' `configs`, AlterTopicConfigs,
DescribeTopicConfigs; kept across restarts, log replay and snapshots; what CommitRemoteLogSegments refuses by policy;
FindBatches' local log start; the routing client's calls and `diskless configs`."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import grpc
import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.cli.main import main
from coordinator.client.routing_client import RoutingClient
from coordinator.machine.view import CoordinatorView
from coordinator.topics import config_admin
from coordinator.topics.config_checks import ConfigsOutcome, TopicConfigsChange, check_topic_configs
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc as admin_grpc
from protos import coordinator_pb2 as pb
from tests.harness import Broker, assert_state_equals_log_rebuild, coordinator_state_files, new_topic_id, topic_name
from tests.in_process import InProcessNode
from tests.snapshot_helpers import MANUAL_SNAPSHOTS, create_snapshots

Topic = pb.CreatePartitionsRequest.Topic
Alter = pb.AlterTopicConfigsRequest.Topic
DEFAULTS = {
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "-1",
}


def configs(**values: str) -> list[pb.TopicConfig]:
    return [pb.TopicConfig(name=name.replace("_", "."), value=value) for name, value in values.items()]


def create(broker: Broker, topic_id: bytes, partitions: int, given: list[pb.TopicConfig], name: str = "") -> int:
    request = pb.CreatePartitionsRequest(
        topics=[Topic(topic_id=topic_id, name=name or topic_name("cfg"), num_partitions=partitions, configs=given)]
    )
    return broker.stub.CreatePartitions(request).topics[0].error_code


def described(broker: Broker, topic_id: bytes) -> pb.DescribeTopicConfigsResponse.TopicResult:
    (result,) = broker.stub.DescribeTopicConfigs(pb.DescribeTopicConfigsRequest(topic_ids=[topic_id])).topics
    return result


def values(entries: Iterable[pb.ConfigEntry]) -> dict[str, str]:
    return {e.name: e.value for e in entries}


def set_names(entries: Iterable[pb.ConfigEntry]) -> set[str]:
    return {e.name for e in entries if not e.is_default}


def alter(
    broker: Broker,
    topic_id: bytes,
    set_: Mapping[str, str] = {},
    delete: tuple[str, ...] = (),
    validate_only: bool = False,
) -> pb.AlterTopicConfigsResponse.TopicResult:
    topic = Alter(topic_id=topic_id, set=[pb.TopicConfig(name=n, value=v) for n, v in set_.items()], delete=delete)
    request = pb.AlterTopicConfigsRequest(topics=[topic], validate_only=validate_only)
    (result,) = broker.stub.AlterTopicConfigs(request).topics
    return result


def held_by_coordinators(server: InProcessNode, topic_id: bytes) -> dict[int, dict[str, str]]:
    """What each coordinator holding a partition of the topic holds for it, read on the node's loop."""

    def read() -> dict[int, dict[str, str]]:
        holding = {c for c in server.node.catalog.topic(topic_id).partitions.values()}  # type: ignore[union-attr]
        return {c: server.node.shards[c].topic_configs(topic_id) for c in sorted(holding)}

    return server.loop.call(read)


# ---------------------------------------------------------------- CreatePartitions and DescribeTopicConfigs


def test_configs_given_at_creation_are_described_with_every_other_one_at_its_default(
    server: InProcessNode, broker: Broker
) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 8, configs(retention_ms="60000", remote_storage_enable="TRUE")) == pb.NONE
    result = described(broker, topic_id)
    assert result.error_code == pb.NONE
    assert [e.name for e in result.configs] == sorted(DEFAULTS)
    assert values(result.configs) == {**DEFAULTS, "retention.ms": "60000", "remote.storage.enable": "true"}
    assert set_names(result.configs) == {"retention.ms", "remote.storage.enable"}
    held = held_by_coordinators(server, topic_id)
    assert len(held) == 4 and all(
        h == {"retention.ms": "60000", "remote.storage.enable": "true"} for h in held.values()
    )


def test_a_bad_config_at_creation_is_invalid_config_and_creates_nothing(broker: Broker) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 2, configs(retention_ms="soon")) == pb.INVALID_CONFIG
    assert create(broker, topic_id, 2, configs(cleanup_policy="compact")) == pb.INVALID_CONFIG
    assert described(broker, topic_id).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert create(broker, topic_id, 2, []) == pb.NONE  # nothing was created: the id is free


def test_an_existing_topic_ignores_configs_and_its_new_partitions_take_its_own(
    server: InProcessNode, broker: Broker
) -> None:
    topic_id, name = new_topic_id(), topic_name("grow")
    assert create(broker, topic_id, 1, configs(retention_bytes="1000"), name) == pb.NONE
    assert create(broker, topic_id, 8, configs(retention_bytes="5", retention_ms="oops"), name) == pb.NONE
    assert set_names(described(broker, topic_id).configs) == {"retention.bytes"}
    held = held_by_coordinators(server, topic_id)
    assert len(held) == 4 and all(h == {"retention.bytes": "1000"} for h in held.values())


def test_describe_answers_each_id_in_order_unknown_and_malformed_ones_with_their_error(broker: Broker) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 1, []) == pb.NONE
    asked = [topic_id, new_topic_id(), b"\x00" * 16, topic_id]
    results = broker.stub.DescribeTopicConfigs(pb.DescribeTopicConfigsRequest(topic_ids=asked)).topics
    assert [r.topic_id for r in results] == asked
    assert [r.error_code for r in results] == [pb.NONE, pb.UNKNOWN_TOPIC_OR_PARTITION, pb.INVALID_REQUEST, pb.NONE]
    assert values(results[0].configs) == DEFAULTS and not results[1].configs


# ---------------------------------------------------------------- AlterTopicConfigs


def test_alter_sets_and_deletes_back_to_the_default_and_answers_the_result(
    server: InProcessNode, broker: Broker
) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 8, configs(retention_ms="1000")) == pb.NONE
    result = alter(broker, topic_id, {"retention.bytes": "2048", "remote.storage.enable": "true"}, ("retention.ms",))
    assert result.error_code == pb.NONE, result
    expected = {**DEFAULTS, "retention.bytes": "2048", "remote.storage.enable": "true"}
    assert values(result.configs) == expected and values(described(broker, topic_id).configs) == expected
    assert set_names(result.configs) == {"retention.bytes", "remote.storage.enable"}
    held = held_by_coordinators(server, topic_id)
    assert all(h == {"retention.bytes": "2048", "remote.storage.enable": "true"} for h in held.values())


def test_validate_only_answers_the_result_and_changes_nothing(broker: Broker) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 2, []) == pb.NONE
    result = alter(broker, topic_id, {"retention.ms": "5000"}, validate_only=True)
    assert result.error_code == pb.NONE and values(result.configs)["retention.ms"] == "5000"
    assert values(described(broker, topic_id).configs) == DEFAULTS
    refused = alter(broker, topic_id, {"retention.ms": "-7"}, validate_only=True)
    assert refused.error_code == pb.INVALID_CONFIG and "at least -1" in refused.error_message


def test_a_bad_value_fails_the_topic_and_changes_none_of_its_configs(broker: Broker) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 4, configs(retention_ms="1000")) == pb.NONE
    for set_, delete in (
        ({"retention.bytes": "10", "remote.storage.enable": "maybe"}, ()),
        ({"retention.bytes": "10", "log.segment.bytes": "1"}, ()),
        ({"retention.bytes": "10"}, ("retention.hours",)),
    ):
        result = alter(broker, topic_id, set_, delete)
        assert result.error_code == pb.INVALID_CONFIG and result.error_message and not result.configs
    assert set_names(described(broker, topic_id).configs) == {"retention.ms"}


def test_kip_950_turning_remote_storage_off_needs_delete_on_disable(broker: Broker) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 4, configs(remote_storage_enable="true")) == pb.NONE
    refused = alter(broker, topic_id, {"remote.storage.enable": "false"})
    assert refused.error_code == pb.INVALID_CONFIG and "remote.log.delete.on.disable" in refused.error_message
    assert values(described(broker, topic_id).configs)["remote.storage.enable"] == "true"
    done = alter(broker, topic_id, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    assert done.error_code == pb.NONE and values(done.configs)["remote.storage.enable"] == "false"


def test_kip_950_a_copy_disabled_topic_keeps_its_local_retention_as_its_retention(broker: Broker) -> None:
    topic_id = new_topic_id()
    given = configs(remote_storage_enable="true", retention_ms="1000", local_retention_ms="500")
    assert create(broker, topic_id, 4, given) == pb.NONE
    refused = alter(broker, topic_id, {"remote.log.copy.disable": "true"})
    assert refused.error_code == pb.INVALID_CONFIG and "must be set to the identical value" in refused.error_message
    assert values(described(broker, topic_id).configs)["remote.log.copy.disable"] == "false"  # nothing changed
    done = alter(broker, topic_id, {"remote.log.copy.disable": "true"}, delete=("local.retention.ms",))
    assert done.error_code == pb.NONE and values(done.configs)["local.retention.ms"] == "-2"
    # A new topic's configuration is checked whole, as Kafka's CreateTopics does.
    bad = configs(
        remote_storage_enable="true", remote_log_copy_disable="true", retention_ms="1000", local_retention_ms="5"
    )
    assert create(broker, new_topic_id(), 1, bad) == pb.INVALID_CONFIG


def held_per_coordinator(server: InProcessNode, topic_id: bytes) -> dict[int, dict[str, str]]:
    """What each coordinator holding the topic holds for it (its view: records not yet applied included)."""

    def read() -> dict[int, dict[str, str]]:
        shards = server.node.shards
        holding = [s for s in shards if any(p.topic_id == topic_id for p in s.partitions())]
        return {s.coordinator_id: s.topic_configs(topic_id) for s in holding}

    return server.loop.call(read)


def test_a_change_a_later_coordinator_refuses_changes_no_coordinator(
    server: InProcessNode, broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 8, configs(retention_ms="1000")) == pb.NONE
    before = held_per_coordinator(server, topic_id)
    assert len(before) >= 2 and all(held == {"retention.ms": "1000"} for held in before.values())
    refusing = max(before)  # the last one asked: every other part is made before it refuses

    def check(view: CoordinatorView, change: TopicConfigsChange, now_ms: int) -> Result[ConfigsOutcome]:
        if view.coordinator_id == refusing and (change.set_pairs or change.delete) and not change.validate_only:
            return Result([], ConfigsOutcome(ErrorCode.KAFKA_STORAGE_ERROR, "injected", {}))
        return check_topic_configs(view, change, now_ms)

    monkeypatch.setattr(config_admin, "check_topic_configs", check)
    failed = alter(broker, topic_id, {"retention.ms": "5", "retention.bytes": "10"})
    assert (failed.error_code, list(failed.configs)) == (pb.KAFKA_STORAGE_ERROR, [])
    assert held_per_coordinator(server, topic_id) == before  # the parts made were put back
    assert f"coordinator {refusing}: injected" in failed.error_message
    assert values(described(broker, topic_id).configs)["retention.ms"] == "1000"

    monkeypatch.undo()
    done = alter(broker, topic_id, {"retention.ms": "5"})
    assert done.error_code == pb.NONE
    assert all(held == {"retention.ms": "5"} for held in held_per_coordinator(server, topic_id).values())


def test_unknown_malformed_and_repeated_topics_get_their_errors_and_the_others_go_on(broker: Broker) -> None:
    topic_id, twice = new_topic_id(), new_topic_id()
    assert create(broker, topic_id, 1, []) == pb.NONE
    assert create(broker, twice, 1, []) == pb.NONE
    change = [pb.TopicConfig(name="retention.ms", value="77")]
    request = pb.AlterTopicConfigsRequest(
        topics=[Alter(topic_id=twice, set=change), Alter(topic_id=new_topic_id(), set=change),
                Alter(topic_id=b"short", set=change), Alter(topic_id=topic_id, set=change), Alter(topic_id=twice)]
    )  # fmt: skip
    results = broker.stub.AlterTopicConfigs(request).topics
    assert [r.error_code for r in results] == [
        pb.INVALID_REQUEST, pb.UNKNOWN_TOPIC_OR_PARTITION, pb.INVALID_REQUEST, pb.NONE, pb.INVALID_REQUEST
    ]  # fmt: skip
    assert values(described(broker, topic_id).configs)["retention.ms"] == "77"
    assert values(described(broker, twice).configs) == DEFAULTS


def test_a_deleted_topic_forgets_its_configs_and_comes_back_with_defaults(
    server: InProcessNode, broker: Broker
) -> None:
    topic_id, name = new_topic_id(), topic_name("gone")
    assert create(broker, topic_id, 4, configs(retention_ms="1"), name) == pb.NONE
    assert broker.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[topic_id])).topics[0].error_code == pb.NONE
    assert described(broker, topic_id).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(broker, topic_id, {"retention.ms": "2"}).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert create(broker, topic_id, 4, [], name) == pb.NONE
    assert values(described(broker, topic_id).configs) == DEFAULTS
    assert all(h == {} for h in held_by_coordinators(server, topic_id).values())


def test_the_node_settings_are_the_defaults_of_retention(tmp_path: Path) -> None:
    settings = {"diskless.log.retention.ms": "604800000", "diskless.log.retention.bytes": "1073741824"}
    node = InProcessNode(tmp_path / "data", coordinators=2, settings=settings).start()
    try:
        broker = Broker(node.stub, 2)
        topic_id = new_topic_id()
        assert create(broker, topic_id, 2, configs(retention_bytes="-1")) == pb.NONE
        entries = {e.name: (e.value, e.is_default) for e in described(broker, topic_id).configs}
        assert entries["retention.ms"] == ("604800000", True) and entries["retention.bytes"] == ("-1", False)
    finally:
        node.stop()


# ---------------------------------------------------------------- kept: restart, replay, snapshots


def test_configs_survive_a_restart_a_replay_of_the_log_and_a_snapshot_restore(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=2, settings=MANUAL_SNAPSHOTS).start()
    try:
        broker = Broker(node.stub, 2)
        first, second = new_topic_id(), new_topic_id()
        assert create(broker, first, 4, configs(retention_ms="1000", remote_storage_enable="true")) == pb.NONE
        assert alter(broker, first, {"retention.bytes": "99"}, ("retention.ms",)).error_code == pb.NONE
        assert create(broker, second, 2, configs(retention_ms="5")) == pb.NONE
        expected = {t: values(described(broker, t).configs) for t in (first, second)}

        node.restart()
        assert {t: values(described(Broker(node.stub, 2), t).configs) for t in expected} == expected
        node.stop()
        assert_state_equals_log_rebuild(node.data_dir, 2, tmp_path / "rebuilt")  # I1, the configurations included
        for coordinator_id in range(2):
            for path in coordinator_state_files(node.data_dir, coordinator_id):
                path.unlink(missing_ok=True)
        node.start()  # every state replayed from the log
        broker = Broker(node.stub, 2)
        assert {t: values(described(broker, t).configs) for t in expected} == expected

        create_snapshots(node)  # and the log below it pruned
        assert alter(broker, second, {"remote.log.copy.disable": "true"}).error_code == pb.NONE  # the tail
        expected[second]["remote.log.copy.disable"] = "true"
        node.stop()
        for coordinator_id in range(2):
            for path in coordinator_state_files(node.data_dir, coordinator_id):
                path.unlink(missing_ok=True)
        node.start()
        assert "restored snapshot" in "".join(node.output)
        broker = Broker(node.stub, 2)
        assert {t: values(described(broker, t).configs) for t in expected} == expected
    finally:
        if node.is_running():
            node.stop()


# ---------------------------------------------------------------- CommitRemoteLogSegments, FindBatches


def offload(broker: Broker, topic_id: bytes, partition: int) -> pb.CommitRemoteLogSegmentsResponse.PartitionResult:
    part = pb.CommitRemoteLogSegmentsRequest.Partition(partition=partition, start_offset=0, end_offset=1)
    request = pb.CommitRemoteLogSegmentsRequest(
        topics=[pb.CommitRemoteLogSegmentsRequest.Topic(topic_id=topic_id, partitions=[part])]
    )
    return broker.stub.CommitRemoteLogSegments(request).topics[0].partitions[0]


def test_offloads_are_refused_while_the_topics_configuration_does_not_allow_them(broker: Broker) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 2, []) == pb.NONE
    refused = offload(broker, topic_id, 0)
    assert refused.error_code == pb.POLICY_VIOLATION and "remote.storage.enable" in refused.error_message
    assert (refused.log_start_offset, refused.local_log_start_offset, refused.remote_log_end_offset) == (-1, -1, -1)
    assert alter(broker, topic_id, {"remote.storage.enable": "true", "remote.log.copy.disable": "true"}).error_code == 0
    assert offload(broker, topic_id, 1).error_code == pb.POLICY_VIOLATION
    assert alter(broker, topic_id, {}, ("remote.log.copy.disable",)).error_code == pb.NONE
    allowed = offload(broker, topic_id, 1)  # allowed now: the empty partition has no offset 0 to offload
    assert allowed.error_code == pb.OFFSET_OUT_OF_RANGE
    assert offload(broker, topic_id, 2).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert offload(broker, b"\x01", 0).error_code == pb.INVALID_REQUEST


def test_find_batches_says_the_local_log_start_is_the_log_start(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name("lls"), 1)
    for _ in range(3):
        assert broker.commit([pb.CommitFileRequest.Batch(
            topic_id=topic_id, partition=0, byte_offset=0, size=10, base_offset=0, last_offset=0, magic=2,
            timestamp_type=pb.CREATE_TIME, producer_id=-1)]).batches[0].error_code == pb.NONE  # fmt: skip
    moved = broker.stub.DeleteRecords(pb.DeleteRecordsRequest(topics=[pb.DeleteRecordsRequest.Topic(
        topic_id=topic_id, partitions=[pb.DeleteRecordsRequest.Partition(partition=0, offset=2)])]))  # fmt: skip
    assert moved.topics[0].partitions[0].low_watermark == 2
    fetch = pb.FindBatchesRequest.Partition
    request = pb.FindBatchesRequest(
        topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
            fetch(partition=0, offset=2, max_partition_fetch_bytes=1 << 20),
            fetch(partition=0, offset=0, max_partition_fetch_bytes=1 << 20),
            fetch(partition=5, offset=0, max_partition_fetch_bytes=1 << 20)])],
        fetch_max_bytes=1 << 20,
    )  # fmt: skip
    found, below, unknown = broker.stub.FindBatches(request).topics[0].partitions
    assert (found.error_code, found.log_start_offset, found.local_log_start_offset) == (pb.NONE, 2, 2)
    assert (below.error_code, below.local_log_start_offset) == (pb.OFFSET_OUT_OF_RANGE, 2)
    assert (unknown.error_code, unknown.local_log_start_offset) == (pb.UNKNOWN_TOPIC_OR_PARTITION, -1)


# ---------------------------------------------------------------- the routing client and `diskless configs`


def test_the_routing_client_alters_and_describes_from_any_node(server: InProcessNode, broker: Broker) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 2, []) == pb.NONE

    async def calls() -> tuple[pb.AlterTopicConfigsResponse, pb.DescribeTopicConfigsResponse, int]:
        async with RoutingClient(["127.0.0.1:1", server.address], deadline_ms=10_000) as client:
            topic = Alter(topic_id=topic_id, set=configs(retention_ms="123"))
            altered = await client.alter_topic_configs(pb.AlterTopicConfigsRequest(topics=[topic]))
            read = await client.describe_topic_configs(pb.DescribeTopicConfigsRequest(topic_ids=[topic_id]))
            part = pb.CommitRemoteLogSegmentsRequest.Partition(partition=1, start_offset=0, end_offset=1)
            offloaded = await client.commit_remote_log_segments(pb.CommitRemoteLogSegmentsRequest(
                topics=[pb.CommitRemoteLogSegmentsRequest.Topic(topic_id=topic_id, partitions=[part])]))  # fmt: skip
            return altered, read, offloaded.topics[0].partitions[0].error_code

    altered, read, offloaded = asyncio.run(calls())
    assert altered.topics[0].error_code == pb.NONE
    assert values(read.topics[0].configs)["retention.ms"] == "123" and offloaded == pb.POLICY_VIOLATION


def test_the_cli_names_a_topic_by_its_name_as_kafka_configs_entity_name(
    server: InProcessNode, broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    topic_id, other_id = new_topic_id(), new_topic_id()
    name = topic_name("named")
    assert create(broker, topic_id, 2, configs(retention_ms="1000"), name=name) == pb.NONE
    assert create(broker, other_id, 1, configs(retention_ms="7")) == pb.NONE
    target = ["--bootstrap", server.address, "--topic", name]

    assert main(["configs", "alter", *target, "--set", "retention.bytes=10", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["topic_id"] == topic_id.hex()
    assert values(described(broker, topic_id).configs)["retention.bytes"] == "10"
    assert values(described(broker, other_id).configs)["retention.bytes"] == "-1"
    assert main(["configs", "describe", *target, "--json"]) == 0
    configs_read = {c["name"]: c["value"] for c in json.loads(capsys.readouterr().out)["configs"]}
    assert (configs_read["retention.ms"], configs_read["retention.bytes"]) == ("1000", "10")

    # The admin service's DescribeTopics: the id and partitions by name; an unknown or malformed name, its error.
    stub = admin_grpc.CoordinatorAdminStub(grpc.insecure_channel(server.address))
    found = stub.DescribeTopics(admin.DescribeTopicsRequest(names=[name, "no-such-topic", "bad/name"])).topics
    assert [(t.name, bytes(t.topic_id), t.partitions, t.error_code) for t in found] == [
        (name, topic_id, 2, pb.NONE),
        ("no-such-topic", b"", 0, pb.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad/name", b"", 0, pb.INVALID_TOPIC_EXCEPTION),
    ]


def test_the_cli_describes_and_alters_a_topic_by_its_id(
    server: InProcessNode, broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    topic_id = new_topic_id()
    assert create(broker, topic_id, 2, configs(retention_ms="1000")) == pb.NONE
    target = ["--bootstrap", server.address, "--topic"]

    assert main(["configs", "describe", *target, topic_id.hex()]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split() for line in table] == [
        ["name", "value", "is_default"],
        *([n, "1000", "False"] if n == "retention.ms" else [n, v, "True"] for n, v in DEFAULTS.items()),
    ]

    kafka_form = base64.urlsafe_b64encode(topic_id).decode().rstrip("=")
    kafka_target = [*target[:2], f"--topic={kafka_form}"]  # as an id starting with "-" must be given
    assert main(["configs", "alter", *kafka_target, "--set", "retention.bytes=10,remote.storage.enable=true",
                 "--delete", "retention.ms", "--json"]) == 0  # fmt: skip
    document = json.loads(capsys.readouterr().out)
    assert document["topic_id"] == topic_id.hex() and document["validate_only"] is False
    assert {c["name"]: (c["value"], c["is_default"]) for c in document["configs"]} == {
        **{name: (value, True) for name, value in DEFAULTS.items()},
        "retention.bytes": ("10", False),
        "remote.storage.enable": ("true", False),
    }

    assert main(["configs", "alter", *target, str(uuid.UUID(bytes=topic_id)), "--set", "retention.ms=1",
                 "--validate-only", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["validate_only"] is True
    assert values(described(broker, topic_id).configs)["retention.ms"] == "-1"

    for argv, reason in (
        (["alter", *target, topic_id.hex(), "--set", "remote.storage.enable=false"], "INVALID_CONFIG: It is invalid"),
        (["alter", *target, topic_id.hex()], "nothing to alter"),
        (["alter", *target, topic_id.hex(), "--set", "retention.ms"], "name=value"),
        (["describe", *target, new_topic_id().hex()], "UNKNOWN_TOPIC_OR_PARTITION"),
        (["describe", *target, "no-such-topic"], "no topic has that name, and it is not a topic id"),
    ):
        assert main(["configs", *argv]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("diskless configs: ") and reason in error[0], error
