"""InitDisklessLog, RepairDisklessLog and DescribeDisklessLogs (design §4d): each request split by coordinator.

The two writes run their pure checks (coordinator/topics/switch/rules.py) on each partition's coordinator's leader,
one operation per coordinator; the read answers from each leader's committed state once everything pending at its
arrival is applied (a strict read, as DescribeProducers).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypeVar

import apsw

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.base.result import ItemError
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from coordinator.runtime.shard import Operation
from coordinator.topics.switch import rules
from protos import coordinator_pb2 as pb

_Item = TypeVar("_Item")


def _switch_item(topic_id: bytes, partition: pb.InitDisklessLogRequest.Partition) -> rules.SwitchItem:
    producers = tuple(
        rules.ClassicProducer(
            p.producer_id,
            p.producer_epoch,
            tuple(
                rules.ClassicBatch(
                    b.base_sequence, b.last_sequence, b.base_offset, b.last_offset, b.timestamp, b.timestamp_type
                )
                for b in p.batches
            ),
            p.last_timestamp,
            p.coordinator_epoch,
            p.current_txn_first_offset,
        )
        for p in partition.producers
    )
    return rules.SwitchItem(
        topic_id,
        partition.partition,
        partition.log_start_offset,
        partition.seal_offset,
        partition.leader_epoch,
        partition.max_timestamp,
        producers,
    )


async def _run(
    coordinators: NodeCoordinators,
    topics: Sequence[Any],
    response_topics: Any,
    item_of: Any,
    operation_of: Any,
    timeout_ms: int,
) -> None:
    """Routes each partition item, runs one operation per coordinator and fills the results (SwitchOutcomes)."""
    coordinators.limit_items(sum(len(t.partitions) for t in topics), "partitions")
    items: dict[int, list[Any]] = defaultdict(list)
    slots: dict[int, list[Any]] = defaultdict(list)
    for topic in topics:
        topic_result = response_topics.add(topic_id=topic.topic_id)
        routes = coordinators.route(topic.topic_id, [item.partition for item in topic.partitions])
        for item, route in zip(topic.partitions, routes, strict=True):
            result = topic_result.partitions.add(
                partition=item.partition, log_start_offset=-1, seal_offset=-1, high_watermark=-1
            )
            if isinstance(route, ItemError):
                set_error(result, route)
                continue
            items[route].append(item_of(topic.topic_id, item))
            slots[route].append(result)
    coordinators.require_room(items)
    operations = {c: operation_of(tuple(its)) for c, its in items.items()}
    for coordinator_id, outcome in (await coordinators.run_parts(operations, timeout_ms)).items():
        for index, result in enumerate(slots[coordinator_id]):
            if isinstance(outcome, CoordinatorUnavailable):
                set_error(result, outcome)
                continue
            answer: rules.SwitchOutcome = outcome[index]
            set_error(result, answer)
            result.log_start_offset = answer.log_start_offset
            result.seal_offset = answer.seal_offset
            result.high_watermark = answer.high_watermark


async def init_diskless_log(
    coordinators: NodeCoordinators, request: pb.InitDisklessLogRequest
) -> pb.InitDisklessLogResponse:
    producers_max = coordinators.settings.switch_producers_max
    response = pb.InitDisklessLogResponse()
    await _run(
        coordinators,
        request.topics,
        response.topics,
        _switch_item,
        lambda its: Operation(rules.check_init_diskless_logs, rules.InitDisklessLogs(its, producers_max)),
        request.timeout_ms,
    )
    return response


async def repair_diskless_log(
    coordinators: NodeCoordinators, request: pb.RepairDisklessLogRequest
) -> pb.RepairDisklessLogResponse:
    response = pb.RepairDisklessLogResponse()
    await _run(
        coordinators,
        request.topics,
        response.topics,
        lambda topic_id, item: (topic_id, item.partition, item.seal_offset),
        lambda its: Operation(rules.check_repair_diskless_logs, rules.RepairDisklessLogs(its)),
        request.timeout_ms,
    )
    return response


_DescribeResult = pb.DescribeDisklessLogsResponse.PartitionResult
_SWITCH = (
    "SELECT seal_offset, switch_leader_epoch, classic_log_start_offset, switch_producers, log_start_offset, "
    "local_log_start_offset, high_watermark FROM partitions WHERE topic_id = ? AND partition = ?"
)


async def describe_diskless_logs(
    coordinators: NodeCoordinators, request: pb.DescribeDisklessLogsRequest
) -> pb.DescribeDisklessLogsResponse:
    response = pb.DescribeDisklessLogsResponse()
    await coordinators.read_at_leaders(
        request.topics, lambda topic_id: response.topics.add(topic_id=topic_id), _describe
    )
    return response


def _describe(db: apsw.Connection, topic_id: bytes, result: _DescribeResult) -> None:
    row = db.execute(_SWITCH, (topic_id, result.partition)).fetchone()
    if row is None:
        result.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION
        result.error_message = f"partition {result.partition} of the topic is unknown"
        return
    seal, epoch, classic_start, producers, log_start, local_start, high_watermark = row
    result.switched = seal >= 0
    result.seal_offset = seal
    result.leader_epoch = epoch
    result.classic_log_start_offset = classic_start
    result.producers_carried = producers
    result.log_start_offset = log_start
    result.local_log_start_offset = local_start
    result.high_watermark = high_watermark
