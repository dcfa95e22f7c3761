"""A reader process's cached route after a partition moved (design §5a; coordinator/reads/readers/state_files.py).

A node spread over processes serves FindBatches from reader processes that read the coordinators' state files and
cache each topic's partition -> coordinator routes for up to ROUTE_CACHE_S. After a move, such a route names the
source, which no longer holds the partition: its one answer is UNKNOWN_TOPIC_OR_PARTITION (retriable, the consumer
retries), and the very next call reads the partition at the target instead of failing for the rest of the cache's
life. Here the reader's view runs in the test's process over a real node's state files.
"""

from __future__ import annotations

from pathlib import Path

from coordinator.node.node import coordinator_directory
from coordinator.reads.find_batches import find_batches
from coordinator.reads.readers.board import Status, StatusBoard
from coordinator.reads.readers.state_files import STATE_FILE, reader_coordinators
from protos import coordinator_pb2 as pb
from tests.harness import coordinator_of, fetch_all_batches
from tests.in_process import InProcessNode
from tests.test_move_partition import SETTINGS, move, moving_partition, positions, run_pass, supervised_worker

COORDINATORS = 4


def applied(node: InProcessNode) -> None:
    """Every coordinator's SQLite holds what its log holds now: what the reader reads is the node's latest."""
    for shard in node.node.shards:
        node.loop.run(shard.wait_applied(shard.speculative_end_offset))


def read_partition_0(view: object, topic_id: bytes) -> pb.FindBatchesResponse.TopicResult.PartitionResult:
    request = pb.FindBatchesRequest(
        topics=[
            pb.FindBatchesRequest.Topic(
                topic_id=topic_id, partitions=[{"partition": 0, "offset": 0, "max_partition_fetch_bytes": 1 << 20}]
            )
        ],
        fetch_max_bytes=1 << 20,
        max_batches_per_partition=1000,
    )
    response = pb.FindBatchesResponse.FromString(find_batches(view, request))  # type: ignore[arg-type]
    (topic,) = response.topics
    (partition,) = topic.partitions
    return partition


def test_a_readers_route_to_the_source_is_dropped_by_its_first_miss_and_the_next_read_finds_the_target(
    tmp_path: Path,
) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=COORDINATORS, settings=SETTINGS).start()
    board = StatusBoard.create(COORDINATORS)
    for coordinator_id in range(COORDINATORS):
        board.publish(coordinator_id, Status(pb.NONE, 1))
    damage: list[tuple[int, int, str]] = []
    directories = [coordinator_directory(tmp_path / "data", c) for c in range(COORDINATORS)]
    assert all((d / STATE_FILE).exists() for d in directories)
    try:
        with reader_coordinators(node.node.settings, directories, board, lambda *seen: damage.append(seen)) as view:
            _, topic_id, source, target = moving_partition(node)
            before = positions(fetch_all_batches(node.stub, topic_id, 0)[0])
            applied(node)
            first = read_partition_0(view, topic_id)  # the route to the source is cached here
            assert first.error_code == pb.NONE and positions(list(first.batches)) == before

            started = move(node, topic_id, target)
            assert started.error_code == pb.NONE
            done = run_pass(supervised_worker(node, source), node)
            assert (done.adopted, done.dropped, done.failures) == (1, 1, [])
            assert coordinator_of(node.stub, topic_id, 0) == target
            applied(node)

            missed = read_partition_0(view, topic_id)  # the cached route, well within ROUTE_CACHE_S
            assert missed.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION, missed
            found = read_partition_0(view, topic_id)
            assert found.error_code == pb.NONE, found
            assert positions(list(found.batches)) == before
        assert damage == []
    finally:
        node.stop()
