"""CreatePartitions, DeleteTopics and FindCoordinator through the real socket (DESIGN §2, §4)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from coordinator.runtime.shard.log_replay import logical_dump
from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    batch,
    coordinator_of,
    delete_records,
    describe_coordinator,
    describe_file,
    fetch,
    laid_out,
    list_offset,
    new_topic_id,
    topic_name,
)
from tests.in_process import InProcessNode

Topic = pb.CreatePartitionsRequest.Topic
BAD_IDS = {"empty": b"", "15 bytes": b"\x07" * 15, "17 bytes": b"\x07" * 17, "all zeros": b"\x00" * 16}


# ---------------------------------------------------------------- helpers


def create(broker: Broker, *topics: Topic) -> list[pb.CreatePartitionsResponse.TopicResult]:
    return list(broker.stub.CreatePartitions(pb.CreatePartitionsRequest(topics=list(topics))).topics)


def create_one(broker: Broker, topic_id: bytes, name: str, partitions: int) -> int:
    (result,) = create(broker, Topic(topic_id=topic_id, name=name, num_partitions=partitions))
    assert result.topic_id == topic_id
    return result.error_code


def delete(broker: Broker, *topic_ids: bytes) -> list[pb.DeleteTopicsResponse.TopicResult]:
    return list(broker.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=list(topic_ids))).topics)


def find(broker: Broker, topic_id: bytes, partitions: list[int]) -> pb.FindCoordinatorResponse:
    return broker.stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=partitions)])
    )


def known_partitions(broker: Broker, topic_id: bytes, up_to: int) -> list[int]:
    """The partitions in 0..up_to-1 the node knows."""
    found = find(broker, topic_id, list(range(up_to)))
    return [p.partition for p in found.topics[0].partitions if p.error_code == pb.NONE]


def total_partitions(broker: Broker) -> int:
    described = broker.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest())
    return sum(c.partition_count for c in described.coordinators)


# ---------------------------------------------------------------- CreatePartitions


def test_unknown_topic_is_created_with_partitions_0_to_n_minus_1(broker: Broker) -> None:
    topic_id, before = new_topic_id(), total_partitions(broker)
    assert create_one(broker, topic_id, topic_name(), 3) == pb.NONE
    assert known_partitions(broker, topic_id, 10) == [0, 1, 2]
    assert total_partitions(broker) == before + 3
    for p in range(3):
        assert list_offset(broker.stub, topic_id, p, -1).offset == 0


def test_known_topic_grows_keeping_its_partitions_and_data(broker: Broker) -> None:
    name = topic_name()
    topic_id = broker.create_topic(name, 2)
    placement = {p: coordinator_of(broker.stub, topic_id, p) for p in range(2)}
    assert broker.commit([batch(topic_id, 0, 7)]).batches[0].error_code == pb.NONE
    before = total_partitions(broker)
    assert create_one(broker, topic_id, name, 5) == pb.NONE
    assert known_partitions(broker, topic_id, 10) == [0, 1, 2, 3, 4]
    assert total_partitions(broker) == before + 3
    assert {p: coordinator_of(broker.stub, topic_id, p) for p in range(2)} == placement
    assert list_offset(broker.stub, topic_id, 0, -1).offset == 7
    assert broker.commit([batch(topic_id, 4, 2)]).batches[0].assigned_base_offset == 0


def test_same_count_is_a_successful_no_op(broker: Broker) -> None:
    name = topic_name()
    topic_id = broker.create_topic(name, 3)
    assert broker.commit([batch(topic_id, 1, 4)]).batches[0].error_code == pb.NONE
    before = total_partitions(broker)
    log_ends = [describe_coordinator(broker.stub, c).log_end_offset for c in range(broker.coordinators)]
    assert create_one(broker, topic_id, name, 3) == pb.NONE
    assert total_partitions(broker) == before
    assert [describe_coordinator(broker.stub, c).log_end_offset for c in range(broker.coordinators)] == log_ends
    assert list_offset(broker.stub, topic_id, 1, -1).offset == 4


@pytest.mark.parametrize("count", [2, 0, -1, -(2**31)])
def test_fewer_partitions_than_now_is_invalid_partitions(broker: Broker, count: int) -> None:
    name = topic_name()
    topic_id = broker.create_topic(name, 3)
    assert create_one(broker, topic_id, name, count) == pb.INVALID_PARTITIONS
    assert known_partitions(broker, topic_id, 5) == [0, 1, 2]


@pytest.mark.parametrize("count", [0, -1, 100_001, 2**31 - 1])
def test_new_topic_with_a_bad_count_is_invalid_partitions_and_not_created(broker: Broker, count: int) -> None:
    topic_id, name, before = new_topic_id(), topic_name(), total_partitions(broker)
    assert create_one(broker, topic_id, name, count) == pb.INVALID_PARTITIONS
    assert total_partitions(broker) == before
    assert known_partitions(broker, topic_id, 3) == []
    # Neither the id nor the name was taken.
    assert create_one(broker, topic_id, name, 1) == pb.NONE


def test_growing_past_the_partition_maximum_is_invalid_partitions(fresh_node: InProcessNode) -> None:
    fresh_node.settings = {"diskless.coordinator.topic.partitions.max": "5"}
    broker = Broker(fresh_node.start().stub, fresh_node.coordinators)
    name, topic_id = topic_name(), new_topic_id()
    assert create_one(broker, topic_id, name, 6) == pb.INVALID_PARTITIONS
    assert create_one(broker, topic_id, name, 3) == pb.NONE
    assert create_one(broker, topic_id, name, 6) == pb.INVALID_PARTITIONS
    assert known_partitions(broker, topic_id, 8) == [0, 1, 2]
    assert create_one(broker, topic_id, name, 5) == pb.NONE
    assert known_partitions(broker, topic_id, 8) == [0, 1, 2, 3, 4]


def test_same_id_with_another_name_is_inconsistent_topic_id(broker: Broker) -> None:
    name = topic_name()
    topic_id = broker.create_topic(name, 1)
    other = topic_name()
    assert create_one(broker, topic_id, other, 2) == pb.INCONSISTENT_TOPIC_ID
    assert known_partitions(broker, topic_id, 3) == [0]
    # The other name was not taken by the failed call.
    assert create_one(broker, new_topic_id(), other, 1) == pb.NONE


def test_live_name_with_another_id_is_topic_already_exists(broker: Broker) -> None:
    name = topic_name()
    topic_id = broker.create_topic(name, 1)
    intruder = new_topic_id()
    assert create_one(broker, intruder, name, 1) == pb.TOPIC_ALREADY_EXISTS
    assert create_one(broker, intruder, name, 4) == pb.TOPIC_ALREADY_EXISTS
    assert known_partitions(broker, intruder, 4) == []
    assert known_partitions(broker, topic_id, 4) == [0]


@pytest.mark.parametrize("count", [0, -1, 1, 100_001])
def test_identity_clashes_are_reported_before_the_count(broker: Broker, count: int) -> None:
    # DESIGN is silent on the order; Kafka's controller checks names and existing topics before counts.
    name = topic_name()
    topic_id = broker.create_topic(name, 2)
    assert create_one(broker, new_topic_id(), name, count) == pb.TOPIC_ALREADY_EXISTS
    assert create_one(broker, topic_id, topic_name(), count) == pb.INCONSISTENT_TOPIC_ID


BAD_NAMES = {
    "empty": "",
    "250 characters": "a" * 250,
    "dot": ".",
    "dot dot": "..",
    "space": "my topic",
    "slash": "a/b",
    "colon": "a:b",
    "star": "a*",
    "non-ASCII letter": "tëst",
    "non-ASCII digit": "t٣",
    "newline at the end": "topic\n",
    "tab": "a\tb",
    "NUL": "a\x00b",
}


@pytest.mark.parametrize("name", list(BAD_NAMES))
def test_bad_name_is_invalid_topic_exception(broker: Broker, name: str) -> None:
    topic_id = new_topic_id()
    assert create_one(broker, topic_id, BAD_NAMES[name], 1) == pb.INVALID_TOPIC_EXCEPTION
    assert known_partitions(broker, topic_id, 1) == []


@pytest.mark.parametrize(
    "name",
    [
        "x" * 249,
        "...",
        ".a",
        "a..b",
        "_-.",
        "Az09._-",
        "-",
        "_",
    ],
)
def test_legal_names_are_accepted(broker: Broker, name: str) -> None:
    # Unique among the module's topics: each legal name is used by this test alone.
    topic_id = new_topic_id()
    assert create_one(broker, topic_id, name, 1) == pb.NONE
    assert known_partitions(broker, topic_id, 1) == [0]
    assert delete(broker, topic_id)[0].error_code == pb.NONE


@pytest.mark.parametrize("bad_id", list(BAD_IDS))
def test_bad_id_is_invalid_request(broker: Broker, bad_id: str) -> None:
    before = total_partitions(broker)
    assert create_one(broker, BAD_IDS[bad_id], topic_name(), 1) == pb.INVALID_REQUEST
    assert total_partitions(broker) == before


def test_repeated_items_are_processed_in_order(broker: Broker) -> None:
    name, topic_id, intruder = topic_name(), new_topic_id(), new_topic_id()
    results = create(
        broker,
        Topic(topic_id=topic_id, name=name, num_partitions=2),
        Topic(topic_id=topic_id, name=name, num_partitions=2),
        Topic(topic_id=topic_id, name=name, num_partitions=4),
        Topic(topic_id=topic_id, name=name, num_partitions=3),
        Topic(topic_id=intruder, name=name, num_partitions=1),
        Topic(topic_id=topic_id, name=topic_name(), num_partitions=4),
        Topic(topic_id=b"", name=name, num_partitions=5),
        Topic(topic_id=topic_id, name=name, num_partitions=5),
    )
    assert [r.error_code for r in results] == [
        pb.NONE,
        pb.NONE,
        pb.NONE,
        pb.INVALID_PARTITIONS,
        pb.TOPIC_ALREADY_EXISTS,
        pb.INCONSISTENT_TOPIC_ID,
        pb.INVALID_REQUEST,
        pb.NONE,
    ]
    assert [r.topic_id for r in results] == [topic_id] * 4 + [intruder, topic_id, b"", topic_id]
    assert all(r.error_message for r in results if r.error_code != pb.NONE)
    assert known_partitions(broker, topic_id, 8) == [0, 1, 2, 3, 4]


def test_empty_request_gets_an_empty_answer(broker: Broker) -> None:
    assert create(broker) == []
    assert delete(broker) == []


# ---------------------------------------------------------------- DeleteTopics


@pytest.mark.parametrize("bad_id", list(BAD_IDS))
def test_delete_with_a_malformed_id_is_invalid_request(broker: Broker, bad_id: str) -> None:
    (result,) = delete(broker, BAD_IDS[bad_id])
    assert (result.error_code, result.topic_id) == (pb.INVALID_REQUEST, BAD_IDS[bad_id])


def test_delete_of_an_unknown_id_is_unknown_topic_id(broker: Broker) -> None:
    unknown = new_topic_id()
    (result,) = delete(broker, unknown)
    assert (result.error_code, result.topic_id) == (pb.UNKNOWN_TOPIC_ID, unknown)
    assert result.error_message


def test_delete_removes_partitions_and_batches_and_unknowns_the_id_everywhere(
    broker: Broker, server: InProcessNode
) -> None:
    server.run_purge_passes()  # topics earlier tests deleted leave first: the counts below are this test's
    name = topic_name()
    topic_id = broker.create_topic(name, broker.coordinators)
    keep = broker.create_topic(topic_name(), 1)
    key = f"wal/{uuid.uuid4()}"
    shared = broker.commit(
        laid_out([batch(topic_id, p, 3) for p in range(broker.coordinators)] + [batch(keep, 0, 2)]),
        object_key=key,
    )
    assert all(b.error_code == pb.NONE for b in shared.batches)
    only_deleted = f"wal/{uuid.uuid4()}"
    assert broker.commit([batch(topic_id, 0)], object_key=only_deleted).batches[0].error_code == pb.NONE
    before = broker.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators
    described_before = describe_file(broker.stub, only_deleted)
    assert described_before.state == pb.FILE_STATE_LIVE

    (result,) = delete(broker, topic_id)
    assert (result.error_code, result.topic_id) == (pb.NONE, topic_id)

    after = broker.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators
    assert sum(c.partition_count for c in after) == sum(c.partition_count for c in before) - broker.coordinators
    # The batches leave in the purge's first pass (DESIGN §4a), on the node's clock.
    assert sum(c.live_batch_count for c in after) == sum(c.live_batch_count for c in before)
    # ... but the topic is gone for every caller at once: DescribeFiles counts none of its batches live.
    assert describe_file(broker.stub, only_deleted).state == pb.FILE_STATE_AWAITING_DELETION
    assert describe_file(broker.stub, key).state == pb.FILE_STATE_LIVE
    server.run_purge_passes()
    after = broker.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators
    assert sum(c.live_batch_count for c in after) == sum(c.live_batch_count for c in before) - broker.coordinators - 1
    # Files left without live batches go on to deletion; a file shared with a live topic stays live.
    gone = describe_file(broker.stub, only_deleted)
    assert not gone.has_live_batches
    assert gone.state == pb.FILE_STATE_AWAITING_DELETION
    assert describe_file(broker.stub, key).state == pb.FILE_STATE_LIVE
    # The id is unknown to every RPC.
    assert delete(broker, topic_id)[0].error_code == pb.UNKNOWN_TOPIC_ID
    assert find(broker, topic_id, [0]).topics[0].partitions[0].error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert find(broker, topic_id, [0]).topics[0].partitions[0].coordinator_id == -1
    assert broker.commit([batch(topic_id, 0)], owner_ids=[0, 1, 2, 3]).batches[0].error_code == (
        pb.UNKNOWN_TOPIC_OR_PARTITION
    )
    fetched = fetch(broker.stub, topic_id, 0, 0)
    assert (fetched.error_code, fetched.log_start_offset, fetched.high_watermark) == (
        pb.UNKNOWN_TOPIC_OR_PARTITION,
        -1,
        -1,
    )
    assert not fetched.batches
    listed = list_offset(broker.stub, topic_id, 0, -1)
    assert (listed.error_code, listed.offset) == (pb.UNKNOWN_TOPIC_OR_PARTITION, -1)
    deleted = delete_records(broker.stub, topic_id, 0, -1)
    assert (deleted.error_code, deleted.low_watermark) == (pb.UNKNOWN_TOPIC_OR_PARTITION, -1)
    # The other topic of the shared file is untouched.
    assert list_offset(broker.stub, keep, 0, -1).offset == 2
    assert len(fetch(broker.stub, keep, 0, 0).batches) == 1


def test_deleted_name_is_reusable_by_a_new_id(broker: Broker) -> None:
    name = topic_name()
    old = broker.create_topic(name, 2)
    assert broker.commit([batch(old, 1, 5)]).batches[0].error_code == pb.NONE
    assert delete(broker, old)[0].error_code == pb.NONE
    new = new_topic_id()
    assert create_one(broker, new, name, 1) == pb.NONE
    assert known_partitions(broker, new, 3) == [0]
    assert list_offset(broker.stub, new, 0, -1).offset == 0
    # The old id is still unknown, and its name now belongs to the new id.
    assert create_one(broker, old, name, 2) == pb.TOPIC_ALREADY_EXISTS


def test_deleted_id_created_again_starts_without_offsets_or_producer_state(broker: Broker) -> None:
    # A deleted id is unknown, so creating it again starts from nothing (DESIGN: unknown topic -> create).
    name = topic_name()
    topic_id = broker.create_topic(name, 1)
    first = batch(topic_id, 0, 3, producer_id=77, epoch=5, sequence=10)
    second = batch(topic_id, 0, 1, producer_id=79, epoch=5, sequence=0)
    assert [b.error_code for b in broker.commit(laid_out([first, second])).batches] == [pb.NONE, pb.NONE]
    assert delete(broker, topic_id)[0].error_code == pb.NONE
    assert create_one(broker, topic_id, name, 1) == pb.NONE
    # Under the old state the retry would be a duplicate at offset 0, and epoch 0 < 5 INVALID_PRODUCER_EPOCH.
    retry = broker.commit([batch(topic_id, 0, 3, producer_id=77, epoch=5, sequence=10)]).batches[0]
    assert (retry.error_code, retry.is_duplicate, retry.assigned_base_offset) == (pb.NONE, False, 0)
    lower = broker.commit([batch(topic_id, 0, 1, producer_id=79, epoch=0, sequence=4)]).batches[0]
    assert (lower.error_code, lower.is_duplicate, lower.assigned_base_offset) == (pb.NONE, False, 3)
    assert [b.base_offset for b in fetch(broker.stub, topic_id, 0, 0).batches] == [0, 3]


def test_delete_repeated_ids_in_one_request(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name(), 2)
    other = broker.create_topic(topic_name(), 1)
    unknown = new_topic_id()
    results = delete(broker, topic_id, unknown, topic_id, b"\x00" * 16, other)
    assert [r.error_code for r in results] == [
        pb.NONE,
        pb.UNKNOWN_TOPIC_ID,
        pb.UNKNOWN_TOPIC_ID,
        pb.INVALID_REQUEST,
        pb.NONE,
    ]
    assert [r.topic_id for r in results] == [topic_id, unknown, topic_id, b"\x00" * 16, other]
    assert known_partitions(broker, other, 1) == []


def test_create_then_delete_then_create_in_one_stream_of_requests(broker: Broker) -> None:
    name = topic_name()
    topic_id = broker.create_topic(name, 1)
    assert delete(broker, topic_id)[0].error_code == pb.NONE
    results = create(
        broker,
        Topic(topic_id=topic_id, name=name, num_partitions=2),
        Topic(topic_id=new_topic_id(), name=name, num_partitions=2),
    )
    assert [r.error_code for r in results] == [pb.NONE, pb.TOPIC_ALREADY_EXISTS]
    assert known_partitions(broker, topic_id, 3) == [0, 1]


# ---------------------------------------------------------------- FindCoordinator


def test_find_coordinator_names_each_partitions_coordinator_and_its_endpoint(
    broker: Broker, server: InProcessNode
) -> None:
    topic_id = broker.create_topic(topic_name(), 6)
    found = find(broker, topic_id, [5, 0, 3, 0])
    (topic_result,) = found.topics
    assert topic_result.topic_id == topic_id
    assert [p.partition for p in topic_result.partitions] == [5, 0, 3, 0]
    assert all(p.error_code == pb.NONE for p in topic_result.partitions)
    ids = [p.coordinator_id for p in topic_result.partitions]
    assert all(0 <= c < broker.coordinators for c in ids)
    assert ids[1] == ids[3]
    # Every coordinator named above, once each, with this node as its leader.
    assert sorted(e.coordinator_id for e in found.coordinators) == sorted(set(ids))
    for endpoint in found.coordinators:
        assert (endpoint.host, endpoint.port) == ("127.0.0.1", server.port)
        assert endpoint.leader_node_id == 0
        assert endpoint.leader_epoch >= 1
    # Stable: asked again, the same answer.
    assert find(broker, topic_id, [5, 0, 3, 0]) == found


def test_find_coordinator_spreads_a_topics_partitions_over_the_coordinators(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name(), broker.coordinators)
    found = find(broker, topic_id, list(range(broker.coordinators)))
    assert sorted(p.coordinator_id for p in found.topics[0].partitions) == list(range(broker.coordinators))


def test_find_coordinator_for_unknown_and_malformed_items(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name(), 2)
    response = broker.stub.FindCoordinator(
        pb.FindCoordinatorRequest(
            topics=[
                pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[2, -1, 1]),
                pb.FindCoordinatorRequest.Topic(topic_id=new_topic_id(), partitions=[0]),
                pb.FindCoordinatorRequest.Topic(topic_id=b"\x01" * 15, partitions=[0, 1]),
                pb.FindCoordinatorRequest.Topic(topic_id=b"\x00" * 16, partitions=[0]),
            ]
        )
    )
    got = [[(p.partition, p.error_code, p.coordinator_id) for p in t.partitions] for t in response.topics]
    known = coordinator_of(broker.stub, topic_id, 1)
    assert got == [
        [(2, pb.UNKNOWN_TOPIC_OR_PARTITION, -1), (-1, pb.UNKNOWN_TOPIC_OR_PARTITION, -1), (1, pb.NONE, known)],
        [(0, pb.UNKNOWN_TOPIC_OR_PARTITION, -1)],
        [(0, pb.INVALID_REQUEST, -1), (1, pb.INVALID_REQUEST, -1)],
        [(0, pb.INVALID_REQUEST, -1)],
    ]
    assert [e.coordinator_id for e in response.coordinators] == [known]


def test_find_coordinator_with_no_topics_names_no_coordinator(broker: Broker) -> None:
    response = broker.stub.FindCoordinator(pb.FindCoordinatorRequest())
    assert not response.topics and not response.coordinators


@pytest.mark.parametrize("timeout_ms", [-1, 0, 2**31 - 1])
def test_admin_calls_take_any_timeout(broker: Broker, timeout_ms: int) -> None:
    # DESIGN is silent: timeout_ms <= 0 means the server's default, a huge one is capped.
    topic_id, name = new_topic_id(), topic_name()
    created = broker.stub.CreatePartitions(
        pb.CreatePartitionsRequest(
            topics=[Topic(topic_id=topic_id, name=name, num_partitions=2)], timeout_ms=timeout_ms
        )
    )
    assert [t.error_code for t in created.topics] == [pb.NONE]
    deleted = broker.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[topic_id], timeout_ms=timeout_ms))
    assert [t.error_code for t in deleted.topics] == [pb.NONE]


def test_a_deleted_topics_producer_states_leave_the_committed_state(tmp_path: Path, fresh_node: InProcessNode) -> None:
    """A deleted partition's producer states go with it, from the view and from SQLite alike (partition keys are never
    given again, so a row left behind would be kept, counted and snapshotted forever). Kills `DELETE FROM producers
    WHERE partition_key = ?` removed from TopicDeleted's SQLite effect (machine/kinds/partitions.py; a survivor of the
    mutation run, docs/testing.md)."""
    node = fresh_node.start()
    broker = Broker(node.stub, node.coordinators)
    kept, deleted = broker.create_topic(topic_name(), 1), broker.create_topic(topic_name(), 1)
    owners = {coordinator_of(node.stub, topic_id, 0) for topic_id in (kept, deleted)}
    produced = [
        batch(kept, 0, 1, producer_id=41, epoch=0, sequence=0),
        batch(deleted, 0, 1, producer_id=42, epoch=0, sequence=0),
    ]
    assert [b.error_code for b in broker.commit(laid_out(produced)).batches] == [pb.NONE, pb.NONE]
    assert delete(broker, deleted)[0].error_code == pb.NONE
    node.stop()
    left = [
        row[1]
        for owner in owners
        for row in logical_dump(tmp_path / "data" / f"coordinator-{owner}" / "state.sqlite")["producers"]
    ]
    assert left == [41]
