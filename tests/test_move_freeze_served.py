"""A partition move's freeze at its source, served over gRPC (design §5a): the freeze operation run on the partition's
coordinator's leader (as the move worker will run it; there is no admin call for it yet), then CommitFile and
DeleteRecords through the real socket answer NOT_COORDINATOR for the frozen partition only, FindBatches still answers
its batches, the freeze survives a restart, and after the cancel the producer goes on (a resend is a duplicate)."""

from __future__ import annotations

from typing import Any

from coordinator.runtime.operation import Operation
from coordinator.topics.move_freeze import MoveCancel, MoveStart, check_cancel_move, check_start_move
from protos import coordinator_pb2 as pb
from tests.harness import Broker, batch, coordinator_of, delete_records, fetch, topic_name
from tests.in_process import InProcessNode

PID = 6262
MOVE = 5


def run_on_leader(node: InProcessNode, coordinator_id: int, check: Any, request: Any) -> Any:
    # The router's coordinators: what an admin or internal call of this node would run the operation on.
    coordinators = node.node.router._coordinators
    outcome = node.loop.run(coordinators.run_parts({coordinator_id: Operation(check, request)}, 10_000))
    return outcome[coordinator_id]


def codes(response: pb.CommitFileResponse) -> list[tuple[int, int, bool]]:
    return [(b.error_code, b.assigned_base_offset, b.is_duplicate) for b in response.batches]


def idempotent(topic_id: bytes, sequence: int) -> pb.CommitFileRequest.Batch:
    return batch(topic_id, 0, 2, producer_id=PID, epoch=1, sequence=sequence)


def test_a_frozen_partition_answers_not_coordinator_over_grpc_until_its_move_is_cancelled(
    fresh_node: InProcessNode,
) -> None:
    node = fresh_node.start()
    broker = Broker(node.stub, node.coordinators)
    topic_id = broker.create_topic(topic_name("move"), 2)
    source = coordinator_of(node.stub, topic_id, 0)
    target = (source + 1) % node.coordinators
    assert codes(broker.commit([idempotent(topic_id, 0)])) == [(pb.NONE, 0, False)]

    started = run_on_leader(node, source, check_start_move, MoveStart(topic_id, 0, target, MOVE))
    assert started.error_code == pb.NONE
    frozen = broker.commit([idempotent(topic_id, 2)])
    assert [b.error_code for b in frozen.batches] == [pb.NOT_COORDINATOR]
    other = broker.commit([batch(topic_id, 1, 3)])  # the topic's other partition is not frozen
    assert codes(other) == [(pb.NONE, 0, False)]
    assert delete_records(node.stub, topic_id, 0, 1).error_code == pb.NOT_COORDINATOR
    read = fetch(node.stub, topic_id, 0, 0)  # reads go on at the source until the cut-over
    assert read.error_code == pb.NONE and read.high_watermark == 2 and len(read.batches) == 1

    node.restart()  # the freeze is in the state: it holds across a restart
    broker = Broker(node.stub, node.coordinators)
    assert [b.error_code for b in broker.commit([idempotent(topic_id, 2)]).batches] == [pb.NOT_COORDINATOR]

    cancelled = run_on_leader(node, source, check_cancel_move, MoveCancel(topic_id, 0, MOVE))
    assert cancelled.error_code == pb.NONE
    assert codes(broker.commit([idempotent(topic_id, 0)])) == [(pb.NONE, 0, True)]  # its window did not change
    assert codes(broker.commit([idempotent(topic_id, 2)])) == [(pb.NONE, 2, False)]
