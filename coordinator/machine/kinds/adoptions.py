"""The record kinds of a partition move at its target (design §5a): PartitionAdoptionChunk.

A chunk stages a bounded run of the moved partition's batches here under a partition key that no `partitions` row
names, so no read, retention or expiry finds them until the adoption. Each chunk is an ordinary record: replicated,
snapshotted and replayed like any other (I1), and a crash loses at most the chunk in flight. The batches keep their
offsets, timestamps, producers and positions in their WAL files; they take this coordinator's batch ids (ids are
per coordinator, in order). Each file they live in is this coordinator's row for it: a row it had (the batches join
it) or a loan row made here, borrowed from the source (coordinator/files/loans.py), which is never owned, handed over
or deleting. Both effects check the same invariants: chunks in order from 0, offsets continuing the staged ones, new
partition keys, file and batch ids in order.
"""

from __future__ import annotations

from collections import Counter

from coordinator.base.invariants import check_invariant
from coordinator.machine.batch_entries import aborted_entries, batch_entry
from coordinator.machine.kinds.files import owner_list
from coordinator.machine.kinds.kind import (
    NamesGiven,
    NoCatalogEffects,
    RecordDescription,
    RecordNames,
    batch_discontinuity,
    next_id_after,
)
from coordinator.machine.producers import LOG_APPEND_TIME
from coordinator.machine.records import CommittedBatch, unpack_batches
from coordinator.machine.state import time_index
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView, StagedMove
from protos import records_pb2 as rec

_INSERT_LOAN_ROW = (
    "INSERT INTO files (file_id, object_key, file_size, uploader_broker_id, owner_ids, committed_at_ms, "
    "live_batches, is_last_owner, owned, delete_after_ms, part_batches, lender_id, loan_move_id) "
    "VALUES (?,?,?,?,?,?,?,0,0,-1,0,?,?)"
)
_INSERT_ABORTED = (
    "INSERT INTO aborted_transactions (partition_key, last_offset, producer_id, first_offset, last_stable_offset, "
    "entry) VALUES (?, ?, ?, ?, ?, ?)"
)
_STAGED = (
    "SELECT staged_partition_key, topic_id, partition, chunks, next_offset FROM partition_adoptions "
    "WHERE from_coordinator = ? AND move_id = ?"
)


def _check_shape(chunk: rec.PartitionAdoptionChunk, batches: list[CommittedBatch]) -> None:
    count = len(batches)
    check_invariant(
        len(chunk.file_indexes) == len(chunk.append_times_ms) == len(chunk.flags) == count
        and all(0 <= index < len(chunk.files) for index in chunk.file_indexes)
        and all(batch.partition_key == chunk.staged_partition_key for batch in batches),
        f"chunk {chunk.index} of move {chunk.move_id} from coordinator {chunk.from_coordinator}: "
        f"{count} batches, not one file, append time and flags each on the staged partition",
    )


def _check_continues(chunk: rec.PartitionAdoptionChunk, staged: tuple[int, bytes, int, int] | None, move: str) -> None:
    """A later chunk: (staged key, topic id, partition, chunks recorded) of its move must be the chunk's."""
    check_invariant(
        staged is not None and staged == (chunk.staged_partition_key, chunk.topic_id, chunk.partition, chunk.index),
        f"chunk {chunk.index} of {move} does not continue its staged chunks {staged}",
    )


def _continue_batches(batches: list[CommittedBatch], next_batch_id: int, next_offset: int, key: int) -> tuple[int, int]:
    """Checks the batches continue the staged ones (ids and offsets in order); the next batch id and offset after."""
    for batch in batches:
        expected_offset = batch.base_offset if next_offset < 0 else next_offset
        broken = batch_discontinuity(
            batch.batch_id, next_batch_id, batch.base_offset, batch.last_offset, key, expected_offset
        )
        if broken is not None:
            raise broken
        next_batch_id, next_offset = batch.batch_id + 1, batch.last_offset + 1
    return next_batch_id, next_offset


def _move(chunk: rec.PartitionAdoptionChunk) -> str:
    return f"move {chunk.move_id} from coordinator {chunk.from_coordinator}"


class PartitionAdoptionChunkKind(NoCatalogEffects):
    """Batches staged for a move: the catalog does not follow them (no partition here serves them yet)."""

    name = "partition_adoption_chunk"

    def replay(self, view: CoordinatorView, chunk: rec.PartitionAdoptionChunk, end_offset: int) -> None:
        move = (chunk.from_coordinator, chunk.move_id)
        staged = view.staged_moves.get(move)
        if chunk.index == 0:
            check_invariant(staged is None, f"chunk 0 of {_move(chunk)}, which is staged already")
            view.next_partition_key = next_id_after(
                "partition key", chunk.staged_partition_key, view.next_partition_key
            )
            staged = StagedMove(
                chunk.from_coordinator, chunk.move_id, chunk.staged_partition_key, chunk.topic_id, chunk.partition,
                0, -1, {},
            )  # fmt: skip
            view.staged_moves[move] = staged
        else:
            _check_continues(
                chunk,
                None if staged is None else (staged.partition_key, staged.topic_id, staged.partition, staged.chunks),
                _move(chunk),
            )
        assert staged is not None
        batches = unpack_batches(chunk.packed_batches)
        _check_shape(chunk, batches)
        for file in chunk.files:
            if file.loaned:
                view.next_file_id = next_id_after("file id", file.file_id, view.next_file_id)
                # Known from its record on, as a committed file is: a commit of the same key is then a retry.
                view.add_pending_file(file.object_key, end_offset)
            staged.files[file.object_key] = file.file_id
        view.next_batch_id, staged.next_offset = _continue_batches(
            batches, view.next_batch_id, staged.next_offset, staged.partition_key
        )
        staged.chunks += 1

    def apply(self, transaction: StateTransaction, chunk: rec.PartitionAdoptionChunk) -> None:
        db = transaction.db
        key = chunk.staged_partition_key
        row = db.execute(_STAGED, (chunk.from_coordinator, chunk.move_id)).fetchone()
        if chunk.index == 0:
            check_invariant(row is None, f"chunk 0 of {_move(chunk)}, which is staged already")
            transaction.next_partition_key = next_id_after("partition key", key, transaction.next_partition_key)
            db.execute(
                "INSERT INTO partition_adoptions (from_coordinator, move_id, staged_partition_key, topic_id, "
                "partition, chunks, next_offset) VALUES (?, ?, ?, ?, ?, 0, -1)",
                (chunk.from_coordinator, chunk.move_id, key, chunk.topic_id, chunk.partition),
            )
            next_offset = -1
        else:
            _check_continues(
                chunk, None if row is None else (int(row[0]), bytes(row[1]), int(row[2]), int(row[3])), _move(chunk)
            )
            assert row is not None
            next_offset = int(row[4])
        batches = unpack_batches(chunk.packed_batches)
        _check_shape(chunk, batches)
        per_file = Counter(chunk.file_indexes)
        for index, file in enumerate(chunk.files):
            if file.loaned:
                transaction.next_file_id = next_id_after("file id", file.file_id, transaction.next_file_id)
                db.execute(
                    _INSERT_LOAN_ROW,
                    (
                        file.file_id, file.object_key, file.file_size, file.uploader_broker_id,
                        owner_list(list(file.owner_ids)), file.committed_at_ms, per_file[index], chunk.from_coordinator,
                        chunk.move_id,
                    ),
                )  # fmt: skip
            else:
                transaction.update_exactly_one(
                    "UPDATE files SET live_batches = live_batches + ? WHERE file_id = ? AND object_key = ?",
                    (per_file[index], file.file_id, file.object_key),
                    f"chunk {chunk.index} of {_move(chunk)} names file {file.file_id} ({file.object_key!r}), not here",
                )
        transaction.next_batch_id, next_offset = _continue_batches(batches, transaction.next_batch_id, next_offset, key)
        rows = []
        index_entries = []
        tail = transaction.time_tail(key)
        for batch, file_index, append_time, flags in zip(
            batches, chunk.file_indexes, chunk.append_times_ms, chunk.flags, strict=True
        ):
            file = chunk.files[file_index]
            entry = batch_entry(
                batch.batch_id, file.object_key, batch.magic, batch.byte_offset, batch.size, batch.base_offset,
                batch.last_offset, append_time, batch.max_timestamp, batch.timestamp_type, batch.producer_id, flags,
            )  # fmt: skip
            rows.append((*batch, file.file_id, append_time, entry))
            timestamp = append_time if batch.timestamp_type == LOG_APPEND_TIME else batch.max_timestamp
            tail, index_entry = time_index.entry_of_batch(key, tail, timestamp, batch.last_offset, batch.base_offset)
            if index_entry is not None:
                index_entries.append(index_entry)
        transaction.time_tails[key] = tail
        transaction.add_live_batches(len(rows))
        db.executemany("INSERT INTO batches VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        db.executemany(time_index.INSERT_ENTRIES, index_entries)
        if chunk.aborted_transactions:
            db.executemany(
                _INSERT_ABORTED,
                [
                    (key, a.last_offset, a.producer_id, a.first_offset, a.last_stable_offset,
                     aborted_entries([(a.producer_id, a.first_offset)]))
                    for a in chunk.aborted_transactions
                ],
            )  # fmt: skip
        db.execute(
            "UPDATE partition_adoptions SET chunks = chunks + 1, next_offset = ? "
            "WHERE from_coordinator = ? AND move_id = ?",
            (next_offset, chunk.from_coordinator, chunk.move_id),
        )

    def names_given(self, chunk: rec.PartitionAdoptionChunk) -> NamesGiven:
        return NamesGiven(files=tuple((file.file_id, file.object_key) for file in chunk.files if file.loaned))

    def describe(self, chunk: rec.PartitionAdoptionChunk, names: RecordNames) -> RecordDescription:
        batches = unpack_batches(chunk.packed_batches)
        loaned = sum(file.loaned for file in chunk.files)
        span = f", offsets {batches[0].base_offset}..{batches[-1].last_offset}" if batches else ""
        topic = names.topic_names(chunk.topic_id)
        partition = f"{topic[0] if topic else chunk.topic_id.hex()}-{chunk.partition}"
        return RecordDescription(
            f"partition adoption chunk: {partition} chunk {chunk.index} from coordinator {chunk.from_coordinator} "
            f"(move {chunk.move_id}), {len(batches)} batch{'' if len(batches) == 1 else 'es'}{span} staged as "
            f"partition key {chunk.staged_partition_key}, {loaned} file{'' if loaned == 1 else 's'} borrowed",
            {
                "partition": partition,
                "from_coordinator": chunk.from_coordinator,
                "move_id": chunk.move_id,
                "index": chunk.index,
                "batches": len(batches),
                "files_borrowed": loaned,
            },
        )
