"""FindBatches: committed reads at once, one read transaction per coordinator, one byte budget (DESIGN §4)."""

from __future__ import annotations

import contextlib

import apsw

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.base.result import ItemError
from coordinator.config.settings import Settings
from coordinator.machine import batch_entries
from coordinator.machine.batch_entries import UNKNOWN_OFFSETS
from coordinator.machine.object_keys import OBJECT_KEY_MAX_BYTES
from coordinator.machine.producers import last_stable_offset
from coordinator.machine.state import reads
from coordinator.reads import byte_budget
from coordinator.runtime.node_coordinators import ReadableT, ReadingCoordinators
from protos import coordinator_pb2 as pb

PartitionResult = pb.FindBatchesResponse.PartitionResult
# The most bytes one batch's entry takes in an answer: every integer at its longest varint, the longest object key.
ENTRY_MAX_BYTES = len(
    batch_entries.batch_entry(
        -1,
        "k" * OBJECT_KEY_MAX_BYTES,
        2**31 - 1,
        -1,
        -1,
        -1,
        -1,
        -1,
        -1,
        2**31 - 1,
        -1,
        batch_entries.TRANSACTIONAL | batch_entries.CONTROL,
    )
)
# An aborted transaction of a READ_COMMITTED answer at its longest. Each one listed starts at a returned batch,
# except those open across the offset asked: counted one per batch, with the partition's own bytes for the rest.
ABORTED_MAX_BYTES = len(pb.AbortedTransaction(producer_id=-1, first_offset=-1).SerializeToString()) + 2
# A partition's own fields and framing (an error message is a sentence), and a topic's (its id and framing).
PARTITION_MAX_BYTES = 2048
TOPIC_MAX_BYTES = 64


def answer_bound(settings: Settings, request: pb.FindBatchesRequest) -> int:
    """The most bytes `request`'s answer can take, known before any work: what the edge admits (gate.py).

    An answer holds at most find.batches.max.results batches (fewer when max_batches_per_partition says so),
    each at most ENTRY_MAX_BYTES, and never more than the message bound. fetch_max_bytes does not bound it: it
    counts the bytes of the batches in their files, not of their entries here.
    """
    partitions = sum(len(topic.partitions) for topic in request.topics)
    batches = settings.find_batches_max_results
    if request.max_batches_per_partition > 0:
        batches = min(batches, partitions * request.max_batches_per_partition)
    entry_max_bytes = ENTRY_MAX_BYTES + (ABORTED_MAX_BYTES if request.isolation_level == pb.READ_COMMITTED else 0)
    size = batches * entry_max_bytes + partitions * PARTITION_MAX_BYTES + len(request.topics) * TOPIC_MAX_BYTES
    return min(settings.request_max_bytes, size)


def find_batches(coordinators: ReadingCoordinators[ReadableT], request: pb.FindBatchesRequest) -> bytes:
    """The serialized FindBatchesResponse: headers built here, each batch's entry as stored (machine/batch_entries).

    The same rules whether the node's loop serves the call or a reader process (coordinator/reads/readers/).
    """
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    budget = byte_budget.FetchBudget(
        request.fetch_max_bytes, request.max_batches_per_partition, coordinators.settings.find_batches_max_results
    )
    topics: list[bytes] = []
    read_committed = request.isolation_level == pb.READ_COMMITTED
    partition_header = batch_entries.partition_header
    partition_result = batch_entries.partition_result
    with contextlib.ExitStack() as snapshots:
        # A coordinator is checked (require_active) and its read transaction opened at its first partition; the
        # call's later partitions of it read the same snapshot without the check again, unless a read met damage
        # (the coordinator may then be out of service) or the check refused (it is asked again, as it was).
        opened: dict[int, apsw.Connection] = {}
        checked: set[int] = set()
        for topic in request.topics:
            topic_id = topic.topic_id
            items = topic.partitions
            partitions: list[bytes] = []
            numbers = [item.partition for item in items]
            routes = coordinators.route(topic_id, numbers)
            # The offsets of the topic's partitions on each coordinator, read in one statement at its first one
            # (dropped after damage: the next partition reads them again, as a partition read alone would).
            offsets_by_route: dict[int, dict[int, reads.PartitionOffsets]] = {}
            for item, partition, route in zip(items, numbers, routes, strict=True):
                if isinstance(route, ItemError):
                    header = partition_header(partition, route.error_code, route.message, UNKNOWN_OFFSETS)
                    partitions.append(partition_result(header, ()))
                    continue
                entries: list[bytes] = []
                shard = coordinators.shard(route)
                try:
                    if route not in checked:
                        shard.require_active()
                        checked.add(route)
                    db = opened.get(route)
                    if db is None:
                        db = opened[route] = snapshots.enter_context(shard.read_transaction())
                    offsets = offsets_by_route.get(route)
                    if offsets is None:
                        on_route = [number for number, other in zip(numbers, routes, strict=True) if other == route]
                        offsets = offsets_by_route[route] = reads.partitions_offsets(db, topic_id, on_route)
                    found = offsets.get(partition)
                    if found is None:
                        coordinators.route_missed(topic_id)
                        message = f"partition {partition} of the topic is unknown"
                        header = partition_header(partition, pb.UNKNOWN_TOPIC_OR_PARTITION, message, UNKNOWN_OFFSETS)
                    else:
                        _, log_start, high_watermark, local_log_start, _, oldest_open = found
                        offset = item.offset
                        if offset == high_watermark and log_start <= offset and local_log_start <= offset:
                            # At the high watermark (a consumer at the tail, the most common call): nothing to return
                            # and no error, whatever the budget and the isolation (the LSO is at most the HWM).
                            code, message = byte_budget.NO_ERROR
                        else:
                            code, message = byte_budget.fetch_partition(
                                db, found, offset, item.max_partition_fetch_bytes, budget, entries, read_committed
                            )
                        stable = last_stable_offset(oldest_open, log_start, high_watermark)
                        header = partition_header(
                            partition, code, message, (log_start, high_watermark, local_log_start, stable)
                        )
                except CoordinatorUnavailable as unavailable:
                    header = partition_header(partition, unavailable.error_code, unavailable.message, UNKNOWN_OFFSETS)
                except reads.DAMAGE_ERRORS as damage:
                    damaged = coordinators.damaged(shard, damage)
                    entries.clear()
                    header = partition_header(partition, damaged.error_code, damaged.message, UNKNOWN_OFFSETS)
                    checked.discard(route)
                    offsets_by_route.pop(route, None)
                partitions.append(partition_result(header, entries))
            topics.append(batch_entries.topic_result(topic_id, partitions))
    return b"".join(topics)
