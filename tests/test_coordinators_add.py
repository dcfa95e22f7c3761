"""Coordinators added online to a lone node (CreateCoordinators, `diskless coordinators add`; DESIGN §2).

Existing partitions stay on the coordinator recorded when they were created; new topics spread over every
coordinator; FindCoordinator, DescribeCoordinators and the produce gateways know the new ones; the count
survives a restart with the old `--coordinators` flag and a crash in the middle of the add.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coordinator.base.errors import ErrorCode
from coordinator.config.rules import COORDINATORS_MAX
from coordinator.node.coordinator_count import (
    COUNT_FILE,
    CountFileDamaged,
    plan_count_change,
    record_count,
    recorded_count,
)
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from tests.harness import Broker, batch, coordinators_of, describe_coordinators, high_watermark, topic_name
from tests.in_process import InProcessNode

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def node(tmp_path: Path) -> Iterator[InProcessNode]:
    node = InProcessNode(tmp_path / "data", coordinators=4).start()
    yield node
    if node.is_running():
        node.stop()


def create_coordinators(node: InProcessNode, count: int, expected: int = -1) -> admin.CreateCoordinatorsResponse:
    stub = admin_pb2_grpc.CoordinatorAdminStub(node.channel())
    return stub.CreateCoordinators(admin.CreateCoordinatorsRequest(count=count, expected_count=expected), timeout=60)


def committed(broker: Broker, topic_id: bytes, partition: int) -> None:
    answer = broker.commit([batch(topic_id, partition, records=3)])
    assert [b.error_code for b in answer.batches] == [pb.NONE], answer


def test_two_added_to_a_node_of_four_serve_new_topics_and_old_partitions_stay(node: InProcessNode) -> None:
    broker = Broker(node.stub, 4)
    old_topic = broker.create_topic(topic_name("old"), 8)
    old_places = coordinators_of(node.stub, {old_topic: 8})
    committed(broker, old_topic, 5)

    answer = create_coordinators(node, 6, expected=4)

    assert (answer.error_code, answer.previous_count, answer.count) == (pb.NONE, 4, 6), answer
    assert sorted(describe_coordinators(node.stub)) == [0, 1, 2, 3, 4, 5]
    # Existing partitions are where they were (their placement is stored, not recomputed over 6).
    assert coordinators_of(node.stub, {old_topic: 8}) == old_places
    assert high_watermark(node.stub, old_topic, 5) == 3
    # A new topic of 6 partitions has one on each coordinator, the new ones included, and they take commits.
    new_topic = broker.create_topic(topic_name("new"), 6)
    new_places = coordinators_of(node.stub, {new_topic: 6})
    assert sorted(new_places.values()) == [0, 1, 2, 3, 4, 5]
    on_new = [p for (_, p), c in new_places.items() if c in (4, 5)]
    for partition in on_new:
        committed(broker, new_topic, partition)
        assert high_watermark(node.stub, new_topic, partition) == 3
    # The produce gateways count 6 coordinators.
    gateways = node.stub.DescribeProduceGateways(
        pb.DescribeProduceGatewaysRequest(
            brokers=[pb.DescribeProduceGatewaysRequest.Broker(broker_id=b) for b in (1, 2)]
        )
    )
    assert sorted({g.coordinator_id for g in gateways.gateways}) == [0, 1, 2, 3, 4, 5]

    # The count survives a restart with the formation's flag (4): the recorded count wins.
    assert node.coordinators == 4
    node.restart()
    assert sorted(describe_coordinators(node.stub)) == [0, 1, 2, 3, 4, 5]
    assert coordinators_of(node.stub, {old_topic: 8, new_topic: 6}) == {**old_places, **new_places}
    for partition in on_new:
        assert high_watermark(node.stub, new_topic, partition) == 3


def test_the_same_add_again_changes_nothing_and_a_stale_or_lower_count_is_refused(node: InProcessNode) -> None:
    assert create_coordinators(node, 5, expected=4).error_code == pb.NONE
    retried = create_coordinators(node, 5, expected=4)  # the answer was lost: the same call again
    assert (retried.error_code, retried.previous_count, retried.count) == (pb.NONE, 5, 5)
    stale = create_coordinators(node, 6, expected=4)  # a second `--count 2` computed before the first add
    assert stale.error_code == pb.INVALID_REQUEST and "not the 4 expected" in stale.error_message
    assert create_coordinators(node, 3).error_code == pb.INVALID_PARTITIONS
    stub = admin_pb2_grpc.CoordinatorAdminStub(node.channel())
    dry = stub.CreateCoordinators(admin.CreateCoordinatorsRequest(count=7, expected_count=-1, validate_only=True))
    assert (dry.error_code, dry.previous_count, dry.count) == (pb.NONE, 5, 7)
    assert sorted(describe_coordinators(node.stub)) == [0, 1, 2, 3, 4]
    assert recorded_count(node.data_dir) == 5


def test_two_adds_at_once_from_the_same_count_make_one_change(node: InProcessNode) -> None:
    """Two operators' `--count` read 4 at once: one add runs, the other is refused, never both."""
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda total: create_coordinators(node, total, expected=4), (5, 6)))
    assert sorted(a.error_code for a in answers) == [pb.NONE, pb.INVALID_REQUEST], answers
    done = next(a for a in answers if a.error_code == pb.NONE)
    assert sorted(describe_coordinators(node.stub)) == list(range(done.count))
    assert recorded_count(node.data_dir) == done.count


def test_a_crash_after_the_count_is_recorded_is_completed_by_the_next_start(node: InProcessNode) -> None:
    """The add records the total before it makes any coordinator: a crash between the two leaves the count, and
    the next start (with the formation's flag) creates the rest; before the record nothing changed at all."""
    broker = Broker(node.stub, 4)
    topic = broker.create_topic(topic_name(), 4)
    places = coordinators_of(node.stub, {topic: 4})
    node.stop()
    record_count(node.data_dir, 7)  # what the add wrote before the crash
    node.start()
    assert sorted(describe_coordinators(node.stub)) == list(range(7))
    assert coordinators_of(node.stub, {topic: 4}) == places
    retried = create_coordinators(node, 7, expected=4)
    assert (retried.error_code, retried.count) == (pb.NONE, 7)


def test_count_change_rules() -> None:
    assert plan_count_change(4, 6, 4).adds
    assert plan_count_change(4, 6, -1).adds
    assert not plan_count_change(6, 6, 4).adds and plan_count_change(6, 6, 4).error_code is ErrorCode.NONE
    assert plan_count_change(5, 6, 4).error_code is ErrorCode.INVALID_REQUEST
    assert plan_count_change(4, 3, -1).error_code is ErrorCode.INVALID_PARTITIONS
    assert plan_count_change(4, COORDINATORS_MAX + 1, -1).error_code is ErrorCode.INVALID_PARTITIONS


def test_a_damaged_count_file_stops_the_start_rather_than_guess(tmp_path: Path) -> None:
    (tmp_path / COUNT_FILE).write_text("{not json")
    with pytest.raises(CountFileDamaged):
        recorded_count(tmp_path)
    (tmp_path / COUNT_FILE).write_text(json.dumps({"coordinators": 0}))
    with pytest.raises(CountFileDamaged):
        recorded_count(tmp_path)
    assert recorded_count(tmp_path / "absent") is None


@pytest.mark.slow
def test_the_cli_adds_coordinators_to_a_served_node_with_a_reader(tmp_path: Path) -> None:
    """`diskless coordinators add` against `diskless serve` (a reader process restarted over every coordinator)."""
    from tests.harness import ServerProcess, find_batches_request
    from tests.test_coordinator_faults import wait_for
    from tests.test_readers import reader_stub, wait_reader

    server = ServerProcess(tmp_path / "data", coordinators=4, settings={"diskless.server.read.processes": "1"})
    server.start()
    try:

        def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "coordinator", "coordinators", "add", "--bootstrap", server.address,
                 "--json", *arguments],
                cwd=REPO, capture_output=True, text=True, timeout=120,
            )  # fmt: skip

        added = cli("--count", "2")
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["coordinators"] == [{"previous_count": 4, "count": 6}]
        again = cli("--total", "6")
        assert again.returncode == 0 and json.loads(again.stdout)["coordinators"][0]["count"] == 6
        lower = cli("--total", "3")
        assert lower.returncode == 2 and "INVALID_PARTITIONS" in lower.stderr
        broker = Broker(server.stub, 6)
        topic = broker.create_topic(topic_name(), 6)
        places = coordinators_of(server.stub, {topic: 6})
        assert sorted(places.values()) == list(range(6))
        # The reader, started again over six coordinators, serves a partition of a new one.
        partition = next(p for (_, p), c in places.items() if c == 5)
        committed(broker, topic, partition)
        reader = reader_stub(wait_reader(server))
        wait_for(
            lambda: reader.FindBatches(find_batches_request(topic, partition, 0), timeout=10).topics[0].partitions[0]
            .error_code == pb.NONE,
            "the reader serves a coordinator added online",
        )  # fmt: skip
        read = reader.FindBatches(find_batches_request(topic, partition, 0), timeout=10).topics[0].partitions[0]
        assert [b.base_offset for b in read.batches] == [0], read
        server.restart()
        assert sorted(describe_coordinators(server.stub)) == list(range(6))
    finally:
        assert server.stop() == 0
