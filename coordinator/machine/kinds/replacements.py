"""The record kind of object consolidation (DESIGN §4c): batches moved, byte for byte, into a new file.

A BatchesReplaced records the new file (owned, handed over and deleted as any WAL file, DESIGN §5) and moves each
run's batches into it: their file and position change, nothing else does (offsets, sizes, timestamps, producer
fields, transaction flags, the time index, aborted transactions, the partitions' offsets). The files they leave
lose as many live batches; one left with none goes to the file workers. The view only learns the new key and the
file id: the positions live in SQLite alone, where FindBatches reads them.
"""

from __future__ import annotations

from collections import Counter

from coordinator.base.invariants import check_invariant
from coordinator.machine.batch_entries import moved_entry
from coordinator.machine.kinds.files import INSERT_FILE, owner_list
from coordinator.machine.kinds.kind import (
    NO_PARTITION_CHANGES,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordNames,
    next_id_after,
)
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

_RUN_ROWS = (
    "SELECT last_offset, base_offset, size, file_id, entry FROM batches "
    "WHERE partition_key = ? AND last_offset >= ? AND last_offset <= ? ORDER BY last_offset"
)


def extents_blob(replaced: rec.BatchesReplaced) -> bytes:
    """What file_replacements keeps of the record: its extents and their answers, for a retry (DESIGN §4c)."""
    return rec.BatchesReplaced(extents=replaced.extents, file_size=replaced.file_size).SerializeToString()


class BatchesReplacedKind:
    """ReplaceBatches at this coordinator: a new file, and runs of batches moved into it."""

    name = "batches_replaced"
    changes_catalog = False

    def replay(self, view: CoordinatorView, replaced: rec.BatchesReplaced, end_offset: int) -> None:
        view.next_file_id = next_id_after("file id", replaced.file_id, view.next_file_id)
        view.add_pending_replacement(replaced.object_key, end_offset, replaced)

    def apply(self, transaction: StateTransaction, replaced: rec.BatchesReplaced) -> None:
        file_id = replaced.file_id
        transaction.next_file_id = next_id_after("file id", file_id, transaction.next_file_id)
        owners = list(replaced.owner_ids)
        coordinator_id = transaction.coordinator_id
        moved = sum(run.batches for run in replaced.runs)
        db = transaction.db
        db.execute(
            INSERT_FILE,
            (
                file_id,
                replaced.object_key,
                replaced.file_size,
                replaced.uploader_broker_id,
                owner_list(owners),
                replaced.committed_at_ms,
                moved,
                int(owners[-1] == coordinator_id),
                int(owners[0] == coordinator_id),  # the first owner owns it from the call, as a commit's file
                0,  # no commit's part: a CommitFile retried with this key is refused
            ),
        )
        db.execute("INSERT INTO file_replacements (file_id, extents) VALUES (?, ?)", (file_id, extents_blob(replaced)))
        left: Counter[int] = Counter()  # old file id -> batches that left it
        object_key = replaced.object_key
        for run in replaced.runs:
            rows = list(db.execute(_RUN_ROWS, (run.partition_key, run.base_offset, run.last_offset)))
            check_invariant(
                len(rows) == run.batches and bool(rows) and rows[0][1] == run.base_offset,
                f"batches of partition {run.partition_key} at {run.base_offset}..{run.last_offset} replaced: "
                f"{run.batches} expected, the state holds {len(rows)} there",
            )
            position = run.byte_offset
            updates = []
            expected_base = run.base_offset
            for last_offset, base_offset, size, old_file_id, entry in rows:
                check_invariant(
                    base_offset == expected_base,
                    f"batch {base_offset}..{last_offset} of partition {run.partition_key} does not follow "
                    f"{expected_base} in a replaced run",
                )
                expected_base = last_offset + 1
                new_entry = None if entry is None else moved_entry(entry, object_key, position)
                updates.append((file_id, position, new_entry, run.partition_key, last_offset))
                left[old_file_id] += 1
                position += size
            db.executemany(
                "UPDATE batches SET file_id = ?, byte_offset = ?, entry = ? "
                "WHERE partition_key = ? AND last_offset = ?",
                updates,
            )
        # One statement for all the files left (a run of the bench's store leaves one file per batch: a statement
        # each was a quarter of the apply); file_id is the key, so each row changes at most one row, and the
        # total says whether every file held as many live batches as left it.
        changes_before = db.total_changes()
        db.executemany(
            "UPDATE files SET live_batches = live_batches - ? WHERE file_id = ? AND live_batches >= ?",
            [(count, old_file_id, count) for old_file_id, count in left.items()],
        )
        check_invariant(
            db.total_changes() - changes_before == len(left),
            f"batches left files {sorted(left)}, not every one of which held as many live",
        )
        # The live batch count (meta) does not change: batches moved, none came or went.

    def partition_changes(self, replaced: rec.BatchesReplaced) -> PartitionChanges:
        return NO_PARTITION_CHANGES  # offsets do not move

    def names_given(self, replaced: rec.BatchesReplaced) -> NamesGiven:
        return NamesGiven(files=((replaced.file_id, replaced.object_key),))

    def describe(self, replaced: rec.BatchesReplaced, names: RecordNames) -> RecordDescription:
        runs = [
            f"{names.partition(run.partition_key)} offsets {run.base_offset}..{run.last_offset} ({run.batches} "
            f"batch{'' if run.batches == 1 else 'es'}) at byte {run.byte_offset}"
            for run in replaced.runs
        ]
        refused = sum(1 for extent in replaced.extents if extent.error_code != 0)
        summary = (
            f"batches replaced: {replaced.object_key} ({replaced.file_size} bytes, broker "
            f"{replaced.uploader_broker_id}): {len(runs)} run{'' if len(runs) == 1 else 's'} moved"
            + (f", {refused} extent{'' if refused == 1 else 's'} refused" if refused else "")
            + (": " + "; ".join(runs) if runs else "")
        )
        fields = {
            "object_key": replaced.object_key,
            "file_id": replaced.file_id,
            "runs": [
                {
                    "partition": names.partition(run.partition_key),
                    "base_offset": run.base_offset,
                    "last_offset": run.last_offset,
                    "byte_offset": run.byte_offset,
                    "batches": run.batches,
                }
                for run in replaced.runs
            ],
            "refused_extents": refused,
        }
        return RecordDescription(summary, fields)
