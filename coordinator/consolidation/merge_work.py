"""GetFileMergeWorkItem (DESIGN §4c): what a merge job should merge, from one coordinator, without listing the store.

Named after Inkless's getFileMergeWorkItem, but stateless: nothing is leased, so a job that dies leaves nothing to
expire, and two jobs planning at once may pick the same files (ReplaceBatches then moves each run once; the later
call finds its runs moved and its object is deleted after the grace, having moved what was still where it read it).

The answer is the coordinator's oldest live files (committed at least `min_age_ms` ago, at most `max_file_size`
bytes, some batch still live here), oldest first, each with its live batches here in (topic, partition, offset)
order, as FindBatches would answer them. The files come from the partial index `files_live_by_time` in
(commit time, file id) order, and each file's batches from `batches_by_file`: the cost follows the answer, never
the number of batches. A page token is the last file's (commit time, file id); paging goes on after it.

Only the coordinator's leader answers (NOT_COORDINATOR elsewhere): a follower's state may lag what was moved.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import apsw

from coordinator.base.clock import Clock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode, MalformedRequest
from coordinator.config.settings import Settings
from coordinator.machine.object_keys import WRITE_AHEAD_MULTI_SEGMENT
from coordinator.machine.state import reads
from coordinator.machine.state.detached_read import DetachedReadClosed
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from protos import coordinator_pb2 as pb

_TOKEN = struct.Struct(">qq")  # (committed_at_ms, file_id) of the last file of the previous answer

_FILES = (
    "SELECT file_id, object_key, file_size, committed_at_ms FROM files INDEXED BY files_live_by_time "
    "WHERE live_batches > 0 AND committed_at_ms <= ?1 AND file_size <= ?2 "
    "AND (committed_at_ms > ?3 OR (committed_at_ms = ?3 AND file_id > ?4)) "
    "ORDER BY committed_at_ms, file_id"
)
# A file's batches on partitions that exist (those of deleted topics awaiting their purge are gone for every caller).
_BATCHES = (
    "SELECT p.topic_id, p.partition, b.base_offset, b.last_offset, b.byte_offset, b.size "
    "FROM batches AS b INDEXED BY batches_by_file JOIN partitions AS p ON p.partition_key = b.partition_key "
    "WHERE b.file_id = ? ORDER BY p.topic_id, p.partition, b.last_offset"
)


@dataclass(frozen=True, slots=True)
class WorkBounds:
    committed_before_ms: int  # files committed at or before this time
    max_file_size: int
    max_files: int
    max_batches: int  # over the answer's files; its first file is whole whatever it holds
    after: tuple[int, int]  # (committed_at_ms, file_id) already answered; (-2**63, -1): from the oldest


def request_bounds(
    request: pb.GetFileMergeWorkItemRequest, coordinators: int, settings: Settings, now_ms: int
) -> WorkBounds:
    """The request as bounds, or MalformedRequest (INVALID_ARGUMENT) saying why it cannot be answered."""
    if not 0 <= request.coordinator_id < coordinators:
        raise MalformedRequest(
            f"coordinator_id must be 0..{coordinators - 1} (the coordinators), got {request.coordinator_id}"
        )
    for name in ("min_age_ms", "max_file_size", "max_files"):
        if getattr(request, name) < 0:
            raise MalformedRequest(f"{name} must be >= 0, got {getattr(request, name)}")
    after = (-(2**63), -1)
    if request.page_token:
        if len(request.page_token) != _TOKEN.size:
            raise MalformedRequest(f"page_token is not one this service gave ({len(request.page_token)} bytes)")
        after = _TOKEN.unpack(request.page_token)
    files_cap = settings.merge_work_files_max
    return WorkBounds(
        committed_before_ms=now_ms - request.min_age_ms,
        max_file_size=request.max_file_size or settings.merge_work_file_bytes_max,
        max_files=files_cap if request.max_files == 0 or request.max_files > files_cap else request.max_files,
        max_batches=settings.merge_work_batches_max,
        after=after,
    )


def merge_work(db: apsw.Connection, bounds: WorkBounds) -> pb.GetFileMergeWorkItemResponse:
    """The oldest files within the bounds, with their live batches, in one read transaction of `db`."""
    response = pb.GetFileMergeWorkItemResponse()
    batch_count = 0
    last: tuple[int, int] | None = None
    more = False
    cursor = db.execute(_FILES, (bounds.committed_before_ms, bounds.max_file_size, *bounds.after))
    for file_id, object_key, file_size, committed_at_ms in cursor:
        if len(response.files) >= bounds.max_files:
            more = True
            break
        batches = list(db.execute(_BATCHES, (file_id,)))
        if response.files and batch_count + len(batches) > bounds.max_batches:
            more = True
            break
        last = (committed_at_ms, file_id)
        if not batches:  # every live batch is of a deleted topic, leaving with its purge
            continue
        batch_count += len(batches)
        found = response.files.add(
            object_key=object_key,
            object_format=WRITE_AHEAD_MULTI_SEGMENT,
            file_size=file_size,
            committed_at_ms=committed_at_ms,
        )
        for topic_id, partition, base_offset, last_offset, byte_offset, size in batches:
            found.batches.add(
                topic_id=topic_id, partition=partition, base_offset=base_offset, last_offset=last_offset,
                byte_offset=byte_offset, size=size,
            )  # fmt: skip
    if more and last is not None:
        response.next_page_token = _TOKEN.pack(*last)
    return response


async def get_file_merge_work_item(
    coordinators: NodeCoordinators, clock: Clock, request: pb.GetFileMergeWorkItemRequest
) -> pb.GetFileMergeWorkItemResponse:
    """The plan, read on a connection and thread of its own (a worker's read): it reads the coordinator's oldest files
    and their batches, rows whose pages may have left the OS cache long ago, and a read of the disk on the loop would
    hold every coordinator's commits (docs/benchmarks.md, "The loop's reads of cold pages")."""
    bounds = request_bounds(request, len(coordinators.shards), coordinators.settings, clock.now_ms())
    shard = coordinators.shard(request.coordinator_id)
    try:
        shard.require_leader()
        detached = shard.open_detached_read(one_snapshot=False)
    except CoordinatorUnavailable as error:
        return _unavailable(error)
    try:
        return await detached.read(lambda db: merge_work(db, bounds))
    except DetachedReadClosed as error:  # the coordinator's files closed under the read: a reload or a stop
        return _unavailable(
            CoordinatorUnavailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {shard.coordinator_id}: {error}")
        )
    except reads.DAMAGE_ERRORS as error:
        return _unavailable(coordinators.damaged(shard, error))
    finally:
        detached.close()


def _unavailable(error: CoordinatorUnavailable) -> pb.GetFileMergeWorkItemResponse:
    return pb.GetFileMergeWorkItemResponse(error_code=wire_code(error.error_code), error_message=error.message)
