"""A moved partition's batches staged at the move's target, a chunk at a time (design §5a), pure.

`check_adoption_chunk` answers the source's chunk `index` of a move: it writes one PartitionAdoptionChunk, or
nothing when the chunk is recorded already (a resumed worker sends it again), or refuses a chunk past a gap, one
larger than `diskless.partition.move.chunk.batches`, or one not continuing the staged offsets. Its batches keep
their offsets and positions in their WAL files and take this coordinator's batch ids; each file they live in
becomes this coordinator's row for it by the loan rule (coordinator/files/loans.py): a row already here takes the
batches, no row here makes a loan row borrowed from the source, and a row the file workers may be passing on (idle
and owned) makes the chunk wait (COORDINATOR_LOAD_IN_PROGRESS: the worker sends it again), as does a file whose
record here is not applied yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.files.loans import FileAdoption, HeldFile, adoption_of_file
from coordinator.machine import records
from coordinator.machine.batch_entries import CONTROL, TRANSACTIONAL
from coordinator.machine.records import CommittedBatch, MovedBatch, MovedFile
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

_DONE = ItemError(ErrorCode.NONE, "")


@dataclass(frozen=True, slots=True)
class AdoptionChunk:
    """Chunk `index` of a move, as the source sends it: batches in offset order and the files they live in."""

    from_coordinator: int
    move_id: int
    index: int
    topic_id: bytes
    partition: int
    batches: tuple[MovedBatch, ...]
    files: tuple[MovedFile, ...]
    # (marker offset, producer id, first offset, last stable offset): the aborted transactions whose markers are
    # among the batches.
    aborted: tuple[tuple[int, int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ChunkAnswer:
    """The answer, and the chunks staged here for the move after it (the next index the source sends)."""

    error: ItemError
    staged_chunks: int


def _refused(code: ErrorCode, message: str, staged: int) -> Result[ChunkAnswer]:
    return Result([], ChunkAnswer(ItemError(code, message), staged))


def _file_rows(
    view: CoordinatorView, chunk: AdoptionChunk, known: dict[str, int]
) -> list[rec.PartitionAdoptionChunk.File] | str:
    """This coordinator's row for each file of the chunk, by the loan rule; or why the chunk waits."""
    facts = {file.object_key: file for file in chunk.files}
    rows: dict[str, rec.PartitionAdoptionChunk.File] = {}
    next_file_id = view.next_file_id
    for batch in chunk.batches:
        key = batch.object_key
        if key in rows:
            continue
        if key in known:  # a row an earlier chunk of this move made or joined: its staged batches keep it live
            rows[key] = rec.PartitionAdoptionChunk.File(file_id=known[key], object_key=key)
            continue
        if view.file_pending(key):
            return f"file {key!r} is recorded here but not applied yet"
        held = view.committed_file(key)
        row = None if held is None else HeldFile(held.live_batches, held.owned, held.lender_id, held.loans_out)
        adoption = adoption_of_file(row)
        if adoption is FileAdoption.RETRY:
            return f"file {key!r} has no live batch here and may be on its way to its next owner"
        if adoption is FileAdoption.ADD:
            assert held is not None
            rows[key] = rec.PartitionAdoptionChunk.File(file_id=held.file_id, object_key=key)
            continue
        source = facts[key]
        rows[key] = rec.PartitionAdoptionChunk.File(
            file_id=next_file_id,
            object_key=key,
            loaned=True,
            file_size=source.file_size,
            uploader_broker_id=source.uploader_broker_id,
            owner_ids=source.owner_ids,
            committed_at_ms=source.committed_at_ms,
        )
        next_file_id += 1
    return list(rows.values())


def _shape_problem(chunk: AdoptionChunk, next_offset: int, max_batches: int) -> str | None:
    if len(chunk.batches) > max_batches:
        return f"{len(chunk.batches)} batches, more than a chunk holds ({max_batches})"
    named = {file.object_key for file in chunk.files}
    expected = next_offset
    for batch in chunk.batches:
        if batch.object_key not in named:
            return f"batch at offset {batch.base_offset} lives in {batch.object_key!r}, which the chunk does not name"
        if batch.last_offset < batch.base_offset or (expected >= 0 and batch.base_offset != expected):
            return f"batch {batch.base_offset}..{batch.last_offset} does not continue the staged offsets at {expected}"
        if batch.flags & ~(TRANSACTIONAL | CONTROL):
            return f"batch at offset {batch.base_offset} has unknown flags {batch.flags}"
        expected = batch.last_offset + 1
    markers = {batch.last_offset for batch in chunk.batches if batch.flags & CONTROL}
    for marker_offset, _, first_offset, _ in chunk.aborted:
        if marker_offset not in markers or first_offset > marker_offset:
            return f"aborted transaction ending at {marker_offset} is not ended by a marker of the chunk"
    return None


def check_adoption_chunk(
    view: CoordinatorView, chunk: AdoptionChunk, max_batches: int, now_ms: int
) -> Result[ChunkAnswer]:
    """One PartitionAdoptionChunk, nothing (recorded already), or why not (design §5a)."""
    move = f"move {chunk.move_id} from coordinator {chunk.from_coordinator}"
    staged = view.staged_moves.get((chunk.from_coordinator, chunk.move_id))
    recorded = 0 if staged is None else staged.chunks
    if chunk.from_coordinator < 0 or chunk.from_coordinator == view.coordinator_id or chunk.move_id < 0:
        return _refused(ErrorCode.INVALID_REQUEST, f"{move}: a move comes from another coordinator", recorded)
    if (chunk.from_coordinator, chunk.move_id) in view.abandoned_moves:
        return _refused(ErrorCode.INVALID_REQUEST, f"{move} was abandoned here", recorded)
    # The rule of coordinator/topics/move_protocol.chunk_answer: a repeated chunk changes nothing, a gap is refused.
    if chunk.index < recorded:
        return Result([], ChunkAnswer(_DONE, recorded))
    if chunk.index > recorded:
        return _refused(ErrorCode.INVALID_REQUEST, f"{move}: chunk {chunk.index} after {recorded} staged", recorded)
    if staged is None:
        if view.partition(chunk.topic_id, chunk.partition) is not None:
            message = f"{move}: partition {chunk.partition} of the topic is served here already"
            return _refused(ErrorCode.INVALID_REQUEST, message, recorded)
        key, next_offset, known = view.next_partition_key, -1, {}
    else:
        if (staged.topic_id, staged.partition) != (chunk.topic_id, chunk.partition):
            message = f"{move} stages partition {staged.partition} of another topic or partition"
            return _refused(ErrorCode.INVALID_REQUEST, message, recorded)
        key, next_offset, known = staged.partition_key, staged.next_offset, staged.files
    problem = _shape_problem(chunk, next_offset, max_batches)
    if problem is not None:
        return _refused(ErrorCode.INVALID_REQUEST, f"{move}, chunk {chunk.index}: {problem}", recorded)
    files = _file_rows(view, chunk, known)
    if isinstance(files, str):
        return _refused(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{move}, chunk {chunk.index}: {files}", recorded)
    index_of = {file.object_key: index for index, file in enumerate(files)}
    batch_id = view.next_batch_id
    batches = []
    for moved in chunk.batches:
        committed = CommittedBatch(
            batch_id, key, moved.byte_offset, moved.size, moved.base_offset, moved.last_offset, moved.max_timestamp,
            moved.producer_id, moved.producer_epoch, moved.base_sequence, moved.last_sequence, moved.magic,
            moved.timestamp_type,
        )  # fmt: skip
        batches.append((committed, index_of[moved.object_key], moved.append_time_ms, moved.flags))
        batch_id += 1
    record = records.partition_adoption_chunk(
        chunk.from_coordinator,
        chunk.move_id,
        key,
        chunk.index,
        chunk.topic_id,
        chunk.partition,
        files,
        batches,
        chunk.aborted,
    )
    return Result([record], ChunkAnswer(_DONE, recorded + 1))
