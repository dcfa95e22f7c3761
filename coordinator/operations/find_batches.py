"""FindBatches: committed reads at once, one read transaction per coordinator, one byte budget (DESIGN §4)."""

from __future__ import annotations

import contextlib

import apsw

from coordinator import fetch
from coordinator.errors import CoordinatorUnavailable
from coordinator.operations.routing import NodeCoordinators, set_error
from coordinator.result import ItemError
from coordinator.state import reads
from protos import coordinator_pb2 as pb


def find_batches(coordinators: NodeCoordinators, request: pb.FindBatchesRequest) -> pb.FindBatchesResponse:
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    budget = fetch.FetchBudget(
        request.fetch_max_bytes, request.max_batches_per_partition, coordinators.settings.find_batches_max_results
    )
    response = pb.FindBatchesResponse()
    with contextlib.ExitStack() as snapshots:
        opened: dict[int, apsw.Connection] = {}
        for topic in request.topics:
            topic_result = response.topics.add(topic_id=topic.topic_id)
            routes = coordinators.route(topic.topic_id, [item.partition for item in topic.partitions])
            for item, route in zip(topic.partitions, routes, strict=True):
                result = topic_result.partitions.add(partition=item.partition, log_start_offset=-1, high_watermark=-1)
                if isinstance(route, ItemError):
                    set_error(result, route)
                    continue
                shard = coordinators.shard(route)
                try:
                    shard.require_active()
                    db = opened.get(route)
                    if db is None:
                        db = opened[route] = snapshots.enter_context(shard.read_snapshot())
                    found = reads.partition_offsets(db, topic.topic_id, item.partition)
                    if found is None:
                        result.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION
                        result.error_message = f"partition {item.partition} of the topic is unknown"
                        continue
                    fetch.fetch_partition(db, found, item.offset, item.max_partition_fetch_bytes, budget, result)
                except CoordinatorUnavailable as error:
                    set_error(result, error)
                except reads.DAMAGE_ERRORS as error:
                    damaged = coordinators.damaged(shard, error)
                    del result.batches[:]
                    set_error(result, damaged)
                    result.log_start_offset = result.high_watermark = -1
    return response
