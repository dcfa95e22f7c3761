"""AdoptPartitionChunk (protos/internal.proto) at a move's target (design §5a): a chunk of a frozen partition's
batches from the source's move worker, decided by `move_chunks.check_adoption_chunk` through the target's pipeline
like any write, answered with where the target is (chunks staged, the next offset, adopted) so that a resumed
worker knows where to go on, and once adopted with the loans the source's drop records. Index -1 only asks: the check
answers it as a chunk staged already, writing nothing."""

from __future__ import annotations

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.base.result import Result
from coordinator.files.move_chunks import AdoptionChunk, ChunkAnswer, check_adoption_chunk
from coordinator.machine.records import MovedBatch, MovedFile
from coordinator.machine.state import adoptions
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import Operation
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal


def chunk_of(request: internal.AdoptPartitionChunkRequest) -> AdoptionChunk:
    return AdoptionChunk(
        from_coordinator=request.from_coordinator_id,
        move_id=request.move_id,
        index=request.index,
        topic_id=request.topic_id,
        partition=request.partition,
        batches=tuple(MovedBatch._make(_batch_fields(b)) for b in request.batches),
        files=tuple(
            MovedFile(f.object_key, f.file_size, f.uploader_broker_id, tuple(f.owner_ids), f.committed_at_ms)
            for f in request.files
        ),
        aborted=tuple(
            (a.marker_offset, a.producer_id, a.first_offset, a.last_stable_offset) for a in request.aborted_transactions
        ),
    )


def _batch_fields(b: internal.MovedBatch) -> tuple[str | int, ...]:
    return (
        b.object_key, b.byte_offset, b.size, b.base_offset, b.last_offset, b.max_timestamp, b.producer_id,
        b.producer_epoch, b.base_sequence, b.last_sequence, b.magic, b.timestamp_type, b.append_time_ms, b.flags,
    )  # fmt: skip


def _check(view: CoordinatorView, request: tuple[AdoptionChunk, int], now_ms: int) -> Result[ChunkAnswer]:
    chunk, max_batches = request
    return check_adoption_chunk(view, chunk, max_batches, now_ms)


async def adopt_partition_chunk(
    coordinators: NodeCoordinators, request: internal.AdoptPartitionChunkRequest
) -> internal.AdoptPartitionChunkResponse:
    """Stages chunk `index` of a move here (or nothing: staged already, or only asked), then says where the move is."""
    target = request.to_coordinator_id
    if not coordinators.hosts(target):
        return internal.AdoptPartitionChunkResponse(
            error_code=pb.NOT_COORDINATOR, error_message=f"coordinator {target} is not hosted on this node"
        )
    max_batches = coordinators.settings.partition_move_chunk_batches
    coordinators.require_room([target])
    operation = Operation(_check, (chunk_of(request), max_batches))
    outcome = (await coordinators.run_parts({target: operation}, request.timeout_ms))[target]
    if isinstance(outcome, CoordinatorUnavailable):
        return internal.AdoptPartitionChunkResponse(
            error_code=wire_code(outcome.error_code), error_message=outcome.message
        )
    staged, next_offset, adopted, abandoned = coordinators.shard(target).adoption_progress(
        request.from_coordinator_id, request.move_id
    )
    response = internal.AdoptPartitionChunkResponse(
        error_code=wire_code(outcome.error.error_code),
        error_message=outcome.error.message,
        staged_chunks=staged,
        next_offset=next_offset,
        adopted=adopted,
        abandoned=abandoned,
    )
    if adopted:  # what the source's drop records as loans, once the adoption is applied here
        with coordinators.shard(target).read_transaction() as db:
            lent = adoptions.lent_for(
                db, request.topic_id, request.partition, request.from_coordinator_id, request.move_id
            )
        response.lent_files_known = lent is not None
        response.lent_files.extend(lent or ())
    return response
