"""DeleteTopics in bounded passes (DESIGN §4a): the topic is gone for every caller at once, its batches leave later.

Through the real gRPC socket on an in-process node whose clock the test moves: DeleteTopics answers once its record
is applied, and from then on every call sees the topic as unknown (a new topic may take its name, even its id);
each coordinator's leader then removes at most `diskless.coordinator.topic.purge.batch.max` batches per pass, one
pass per `diskless.coordinator.topic.purge.interval.ms` of the node's clock, and goes on after a restart. The pure
choice of a pass is checked against a model with hypothesis.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.node.gauges import coordinator_gauges
from coordinator.topics.purge import EVERY_BATCH, finishes, select_purge
from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    assert_state_equals_log_rebuild,
    batch,
    coordinator_of,
    delete_records,
    describe_coordinators,
    describe_file,
    fetch,
    laid_out,
    list_offset,
    topic_name,
)
from tests.in_process import InProcessNode
from tests.lanes import sized

BATCH_MAX = 10
DOOMED_BATCHES = 35  # on the doomed topic's partition 0: four passes of ten
FILE_BATCHES = 7  # batches per file: five files hold the doomed partition's batches


@pytest.fixture
def node(tmp_path: Path) -> Iterator[InProcessNode]:
    node = InProcessNode(
        tmp_path / "data", coordinators=4, settings={"diskless.coordinator.topic.purge.batch.max": str(BATCH_MAX)}
    ).start()
    yield node
    if node.is_running():
        node.stop()


def live_batches(node: InProcessNode) -> dict[int, int]:
    return {c: d.live_batch_count for c, d in describe_coordinators(node.stub).items()}


def gauge(node: InProcessNode, name: str, coordinator_id: int) -> float:
    for found, _, _, labels, value in node.loop.call(lambda: list(coordinator_gauges(node.node))):
        if found == name and labels["coordinator"] == str(coordinator_id):
            return value
    raise AssertionError(f"no gauge {name} for coordinator {coordinator_id}")


def purged_counter(node: InProcessNode, coordinator_id: int) -> float:
    value = node.node.metrics.registry.get_sample_value(
        "diskless_purged_batches_total", {"coordinator": str(coordinator_id)}
    )
    return value or 0.0


def fill(broker: Broker, doomed: bytes, kept: bytes) -> tuple[list[str], str]:
    """The doomed topic's partition 0 in files of its own, and one file shared with the kept topic."""
    keys = []
    for _ in range(DOOMED_BATCHES // FILE_BATCHES):
        key = f"wal/{uuid.uuid4()}"
        committed = broker.commit(laid_out([batch(doomed, 0) for _ in range(FILE_BATCHES)]), object_key=key)
        assert all(b.error_code == pb.NONE for b in committed.batches), committed
        keys.append(key)
    shared = f"wal/{uuid.uuid4()}"
    committed = broker.commit(laid_out([batch(doomed, 1), batch(kept, 0)]), object_key=shared)
    assert all(b.error_code == pb.NONE for b in committed.batches), committed
    return keys, shared


def test_a_deleted_topic_is_unknown_at_once_and_its_batches_leave_in_bounded_passes(node: InProcessNode) -> None:
    broker = Broker(node.stub, node.coordinators)
    name = topic_name("doomed")
    doomed = broker.create_topic(name, 2)
    kept = broker.create_topic(topic_name("kept"), 1)
    owner = coordinator_of(node.stub, doomed, 0)
    keys, shared = fill(broker, doomed, kept)
    before = live_batches(node)

    (deleted,) = node.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[doomed])).topics
    assert deleted.error_code == pb.NONE

    # No clock has moved: nothing is purged yet, and the topic is unknown to every call.
    assert live_batches(node) == before
    # DescribeFiles too: a file whose only batches were the topic's has none live at once; the shared one has.
    described = [describe_file(node.stub, key) for key in keys]
    assert [(d.has_live_batches, d.state) for d in described] == [(False, pb.FILE_STATE_AWAITING_DELETION)] * len(keys)
    assert (describe_file(node.stub, shared).has_live_batches, describe_file(node.stub, shared).state) == (
        True, pb.FILE_STATE_LIVE,
    )  # fmt: skip
    assert gauge(node, "diskless_coordinator_topics_awaiting_purge", owner) == 1
    assert node.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[doomed])).topics[0].error_code == (
        pb.UNKNOWN_TOPIC_ID
    )
    found = fetch(node.stub, doomed, 0, 0)
    assert (found.error_code, found.log_start_offset, found.high_watermark, list(found.batches)) == (
        pb.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, [],
    )  # fmt: skip
    assert list_offset(node.stub, doomed, 0, -1).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert delete_records(node.stub, doomed, 0, -1).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.commit([batch(doomed, 0)], owner_ids=[owner]).batches[0].error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    located = node.stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=doomed, partitions=[0])])
    )
    assert (located.topics[0].partitions[0].error_code, located.topics[0].partitions[0].coordinator_id) == (
        pb.UNKNOWN_TOPIC_OR_PARTITION, -1,
    )  # fmt: skip
    # Its name is free for a new topic (a new id: a new incarnation, as in Kafka), while the old batches remain.
    renewed = broker.create_topic(name, 1)
    assert broker.commit([batch(renewed, 0)]).batches[0].assigned_base_offset == 0
    assert [b.object_key not in keys for b in fetch(node.stub, renewed, 0, 0).batches] == [True]
    before = live_batches(node)

    # One pass per interval, each at most BATCH_MAX batches, the oldest first; files follow as they empty.
    passes = math.ceil(DOOMED_BATCHES / BATCH_MAX)
    for done in range(1, passes + 1):
        node.run_purge_passes()
        expected = before[owner] - min(done * BATCH_MAX, DOOMED_BATCHES)
        assert live_batches(node)[owner] == expected, f"after pass {done}"
        assert not any(describe_file(node.stub, key).has_live_batches for key in keys), f"after pass {done}"
    assert purged_counter(node, owner) == DOOMED_BATCHES
    assert gauge(node, "diskless_coordinator_topics_awaiting_purge", owner) == 0
    # A file with no live batch left goes on to deletion (DESIGN §5); the one shared with a live topic stays.
    assert all(describe_file(node.stub, key).state == pb.FILE_STATE_AWAITING_DELETION for key in keys)
    assert describe_file(node.stub, shared).state == pb.FILE_STATE_LIVE
    assert all(gauge(node, "diskless_coordinator_topics_awaiting_purge", c) == 0 for c in range(node.coordinators))
    node.run_purge_passes(3)  # nothing more to do: nothing more goes
    assert live_batches(node)[owner] == before[owner] - DOOMED_BATCHES
    assert len(fetch(node.stub, kept, 0, 0).batches) == 1


def test_a_file_mixing_a_deleted_topic_with_a_live_one_on_one_coordinator_stays_live(node: InProcessNode) -> None:
    broker = Broker(node.stub, node.coordinators)
    doomed = broker.create_topic(topic_name("doomed"), 1)
    owner = coordinator_of(node.stub, doomed, 0)
    kept = next(  # a topic whose partition lands on the same coordinator (placement spreads topics)
        t
        for t in (broker.create_topic(topic_name("kept"), 1) for _ in range(20))
        if coordinator_of(node.stub, t, 0) == owner
    )
    mixed, alone = f"wal/{uuid.uuid4()}", f"wal/{uuid.uuid4()}"
    assert broker.commit(laid_out([batch(doomed, 0), batch(kept, 0), batch(doomed, 0)]), object_key=mixed).batches
    assert broker.commit(laid_out([batch(doomed, 0), batch(doomed, 0)]), object_key=alone).batches
    assert node.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[doomed])).topics[0].error_code == pb.NONE

    # Before any purge pass: the mixed file keeps its live topic's batch, the other has none live.
    assert (describe_file(node.stub, mixed).has_live_batches, describe_file(node.stub, mixed).state) == (
        True, pb.FILE_STATE_LIVE,
    )  # fmt: skip
    assert describe_file(node.stub, alone).has_live_batches is False
    node.run_purge_passes()
    assert describe_file(node.stub, mixed).state == pb.FILE_STATE_LIVE
    assert describe_file(node.stub, alone).state == pb.FILE_STATE_AWAITING_DELETION


def test_a_restart_mid_purge_goes_on_where_it_stopped(node: InProcessNode, tmp_path: Path) -> None:
    broker = Broker(node.stub, node.coordinators)
    doomed = broker.create_topic(topic_name("doomed"), 2)
    kept = broker.create_topic(topic_name("kept"), 1)
    owner = coordinator_of(node.stub, doomed, 0)
    keys, _ = fill(broker, doomed, kept)
    before = live_batches(node)[owner]
    assert node.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[doomed])).topics[0].error_code == pb.NONE
    node.run_purge_passes()
    assert live_batches(node)[owner] == before - BATCH_MAX

    node.restart()
    assert fetch(node.stub, doomed, 0, 0).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION  # still deleted
    assert live_batches(node)[owner] == before - BATCH_MAX  # a start purges nothing before its clock says so
    node.run_purge_passes(math.ceil(DOOMED_BATCHES / BATCH_MAX) - 1)
    assert live_batches(node)[owner] == before - DOOMED_BATCHES
    assert not any(describe_file(node.stub, key).has_live_batches for key in keys)
    node.stop()
    # I1: the state equals a replay of the log, the purge passes' records included.
    dumps = assert_state_equals_log_rebuild(node.data_dir, node.coordinators, tmp_path / "rebuilt")
    assert all(not dump["partitions_awaiting_purge"] for dump in dumps.values())


def test_a_deleted_id_created_again_is_a_new_topic_while_the_old_batches_are_purged(node: InProcessNode) -> None:
    broker = Broker(node.stub, node.coordinators)
    name = topic_name("again")
    topic_id = broker.create_topic(name, 1)
    old_key = f"wal/{uuid.uuid4()}"
    assert broker.commit(laid_out([batch(topic_id, 0, 5) for _ in range(3)]), object_key=old_key).batches
    assert node.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[topic_id])).topics[0].error_code == pb.NONE

    # The id is unknown: creating it again makes a topic with nothing in it (offsets from 0, nothing found).
    assert broker.create_topic(name, 1, topic_id=topic_id) == topic_id
    assert list_offset(node.stub, topic_id, 0, -1).offset == 0
    assert list(fetch(node.stub, topic_id, 0, 0).batches) == []
    new_key = f"wal/{uuid.uuid4()}"
    assert broker.commit([batch(topic_id, 0, 2)], object_key=new_key).batches[0].assigned_base_offset == 0
    node.run_purge_passes()
    assert not describe_file(node.stub, old_key).has_live_batches
    assert [b.object_key for b in fetch(node.stub, topic_id, 0, 0).batches] == [new_key]


# ---------------------------------------------------------------- the choice of a pass, against a model


@settings(max_examples=sized(200, 40), deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    batch_max=st.integers(1, 25),
    data=st.data(),
)
def test_passes_take_the_oldest_batches_within_the_bound_and_end_in_the_fewest_passes(
    counts: list[int], batch_max: int, data: st.DataObject
) -> None:
    """Model: partition key -> its batches' last offsets (ascending, gaps allowed); a pass's ranges applied to it."""
    model: dict[int, list[int]] = {}
    for key, count in enumerate(counts):
        gaps = data.draw(st.lists(st.integers(1, 3), min_size=count, max_size=count))
        model[key * 3] = [sum(gaps[: i + 1]) for i in range(count)]
    cost = sum(max(1, len(offsets)) for offsets in model.values())
    passes = 0
    while model:
        awaiting = sorted(model)[: batch_max + 1]
        plan = select_purge(awaiting, lambda key, limit: model[key][:limit], batch_max)
        assert plan.ranges, "a pass with something awaiting purge removes something"
        assert sum(r.batches for r in plan.ranges) <= batch_max
        assert [r.partition_key for r in plan.ranges] == awaiting[: len(plan.ranges)]  # in key order
        for purge_range in plan.ranges:
            offsets = model[purge_range.partition_key]
            removed = [o for o in offsets if o < purge_range.below_offset]
            assert removed == offsets[: len(removed)] and len(removed) == purge_range.batches  # the oldest first
            model[purge_range.partition_key] = offsets[len(removed) :]
            if not model[purge_range.partition_key]:  # finished: the partition goes with its last batch
                assert purge_range.below_offset == EVERY_BATCH
                del model[purge_range.partition_key]
            else:
                assert purge_range is plan.ranges[-1], "only the pass's last partition is left unfinished"
        assert finishes(plan, awaiting) == (not model)
        passes += 1
    assert passes == math.ceil(cost / batch_max)
