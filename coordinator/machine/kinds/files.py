"""Record kinds of WAL files (DESIGN §5): committed, ownership taken, handed over, deletion scheduled, deleted.

The view keeps only what checks need (pending object keys and the id
counters); a file's ownership and deletion time live in SQLite alone.
"""

from __future__ import annotations

from coordinator.base.invariants import InvariantViolation
from coordinator.machine.batch_entries import CONTROL, TRANSACTIONAL, FileEntries
from coordinator.machine.kinds.kind import (
    NO_NAMES,
    NO_PARTITION_CHANGES,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordNames,
    batch_discontinuity,
    next_id_after,
)
from coordinator.machine.kinds.transaction_batches import apply_transactions, replay_transactions
from coordinator.machine.producers import (
    LOG_APPEND_TIME,
    WindowEntry,
    advance_packed_window,
    advance_window,
    packed_window_after_marker,
    window_after_marker,
)
from coordinator.machine.records import BATCH_LAYOUT, unpack_batches
from coordinator.machine.state import time_index
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

# A WindowEntry built once per batch: tuple.__new__ skips the NamedTuple's generated __new__ (a Python call).
new_tuple = tuple.__new__

INSERT_FILE = (
    "INSERT INTO files (file_id, object_key, file_size, uploader_broker_id, owner_ids, committed_at_ms, "
    "live_batches, is_last_owner, owned, delete_after_ms, part_batches) VALUES (?,?,?,?,?,?,?,?,?,-1,?)"
)


def owner_list(owner_ids: list[int]) -> str:
    return ",".join(map(str, owner_ids))


def _discontinuity(
    batch_id: int, expected_batch_id: int, base_offset: int, last_offset: int, partition_key: int, high_watermark: int
) -> InvariantViolation:
    """The violation of a batch the loops' inlined condition (batch_discontinuity's) found broken."""
    broken = batch_discontinuity(batch_id, expected_batch_id, base_offset, last_offset, partition_key, high_watermark)
    return broken or InvariantViolation(f"batch {batch_id} found discontinuous by a check that disagrees with I3")


class FileCommittedKind:
    """A WAL file committed here with the batches it accepted: offsets, producer windows, live batches."""

    name = "file_committed"
    changes_catalog = False

    def replay(self, view: CoordinatorView, committed: rec.FileCommitted, end_offset: int) -> None:
        view.next_file_id = next_id_after("file id", committed.file_id, view.next_file_id)
        view.add_pending_file(committed.object_key, end_offset, committed)
        append_time = committed.append_time_ms
        partitions = view.partitions_by_key
        producers = view.producer_windows
        next_batch_id = view.next_batch_id
        # Fields unpacked into locals: this loop runs once per batch.
        for (batch_id, key, _, _, base_offset, last_offset, max_timestamp, producer_id, producer_epoch, base_sequence,
             last_sequence, _, timestamp_type) in BATCH_LAYOUT.iter_unpack(committed.packed_batches):  # fmt: skip
            partition = partitions[key]
            # batch_discontinuity's condition, inlined (this runs once per batch); it says why when it breaks.
            if batch_id != next_batch_id or base_offset != partition.high_watermark or last_offset < base_offset:
                raise _discontinuity(batch_id, next_batch_id, base_offset, last_offset, key, partition.high_watermark)
            next_batch_id += 1
            partition.high_watermark = last_offset + 1
            if producer_id >= 0:
                windows = producers.get(key)
                if windows is None:
                    windows = producers[key] = {}
                # effective_timestamp, inlined
                timestamp = append_time if timestamp_type == LOG_APPEND_TIME or max_timestamp < 0 else max_timestamp
                if base_sequence >= 0:
                    windows[producer_id] = advance_window(
                        windows.get(producer_id),
                        producer_epoch,
                        new_tuple(
                            WindowEntry, (base_sequence, last_sequence, base_offset, append_time, timestamp_type)
                        ),
                        timestamp,
                    )
                else:  # a transaction marker (DESIGN §4b): no sequence
                    windows[producer_id] = window_after_marker(windows.get(producer_id), producer_epoch, timestamp)
        view.next_batch_id = next_batch_id
        if committed.transaction_batches:
            replay_transactions(view, committed)

    def apply(self, transaction: StateTransaction, committed: rec.FileCommitted) -> None:
        file_id = committed.file_id
        transaction.next_file_id = next_id_after("file id", file_id, transaction.next_file_id)
        append_time = committed.append_time_ms
        owners = list(committed.owner_ids)
        batches = list(BATCH_LAYOUT.iter_unpack(committed.packed_batches))
        coordinator_id = transaction.coordinator_id
        transaction.db.execute(
            INSERT_FILE,
            (
                file_id,
                committed.object_key,
                committed.file_size,
                committed.uploader_broker_id,
                owner_list(owners),
                append_time,
                len(batches),
                int(owners[-1] == coordinator_id),
                int(owners[0] == coordinator_id),  # the first owner owns a file from its commit
                len(batches) + committed.rejected_batches,
            ),
        )
        if not batches:
            return
        high_watermarks = transaction.high_watermarks
        changed_windows = transaction.changed_windows
        committed_windows = transaction.committed_windows
        expired_windows = transaction.expired_windows
        next_batch_id = transaction.next_batch_id
        # Fields unpacked into locals: this loop runs once per batch. A partition's first batch in the
        # transaction is taken at its word here; write_high_watermarks checks it against SQLite.
        entry_of = FileEntries(committed.object_key, append_time).entry
        rows = []
        time_tails = transaction.time_tails
        interval_offsets = time_index.INTERVAL_OFFSETS
        index_entries = []  # where a partition's max effective timestamp grows, sparsely (its time index, DESIGN §4)
        # batch id -> its transaction flags in its FindBatches entry; empty for a file without transactions.
        # Read once: each read of a repeated field of a protobuf message builds a new wrapper, even an empty one.
        transaction_batches = committed.transaction_batches
        flags = {t.batch_id: TRANSACTIONAL | (CONTROL if t.is_control else 0) for t in transaction_batches}
        for batch in batches:
            (batch_id, key, byte_offset, size, base_offset, last_offset, max_timestamp, producer_id, producer_epoch,
             base_sequence, last_sequence, magic, timestamp_type) = batch  # fmt: skip
            before, after = high_watermarks.get(key, (base_offset, base_offset))
            # batch_discontinuity's condition, inlined (this runs once per batch); it says why when it breaks.
            if batch_id != next_batch_id or base_offset != after or last_offset < base_offset:
                raise _discontinuity(batch_id, next_batch_id, base_offset, last_offset, key, after)
            next_batch_id += 1
            high_watermarks[key] = (before, last_offset + 1)
            if producer_id >= 0:
                window_key = (key, producer_id)
                window = changed_windows.get(window_key)  # transaction.producer_window, inlined
                if window is None and window_key not in expired_windows:
                    partition_windows = committed_windows.get(key)
                    window = None if partition_windows is None else partition_windows.get(producer_id)
                # effective_timestamp, inlined
                last_timestamp = (
                    append_time if timestamp_type == LOG_APPEND_TIME or max_timestamp < 0 else max_timestamp
                )
                if base_sequence >= 0:
                    changed_windows[window_key] = advance_packed_window(
                        window,
                        producer_epoch,
                        new_tuple(
                            WindowEntry, (base_sequence, last_sequence, base_offset, append_time, timestamp_type)
                        ),
                        last_timestamp,
                    )
                else:  # a transaction marker (DESIGN §4b): no sequence
                    changed_windows[window_key] = packed_window_after_marker(window, producer_epoch, last_timestamp)
            entry = entry_of(
                batch_id, magic, byte_offset, size, base_offset, last_offset, max_timestamp, timestamp_type,
                producer_id, flags.get(batch_id, 0) if flags else 0,
            )  # fmt: skip
            rows.append((*batch, file_id, append_time, entry))
            timestamp = append_time if timestamp_type == LOG_APPEND_TIME else max_timestamp
            tail = time_tails.get(key)
            if tail is None:
                tail = transaction.time_tail(key)
            if timestamp > tail[0]:  # time_index.entry_of_batch, inlined: this runs once per batch
                interval = last_offset // interval_offsets
                time_tails[key] = (timestamp, interval)
                if interval != tail[1]:
                    index_entries.append((key, timestamp, last_offset, base_offset))
        transaction.next_batch_id = next_batch_id
        transaction.add_live_batches(len(batches))
        transaction.db.executemany("INSERT INTO batches VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        if index_entries:
            transaction.db.executemany(time_index.INSERT_ENTRIES, index_entries)
        if transaction_batches:
            apply_transactions(transaction, committed)

    def partition_changes(self, committed: rec.FileCommitted) -> PartitionChanges:
        batches = unpack_batches(committed.packed_batches)
        return PartitionChanges(next_offsets=tuple((batch.partition_key, batch.last_offset + 1) for batch in batches))

    def names_given(self, committed: rec.FileCommitted) -> NamesGiven:
        return NamesGiven(files=((committed.file_id, committed.object_key),))

    def describe(self, committed: rec.FileCommitted, names: RecordNames) -> RecordDescription:
        batches = unpack_batches(committed.packed_batches)
        parts = []
        for batch in batches:
            producer = (
                f" producer {batch.producer_id} epoch {batch.producer_epoch} sequences "
                f"{batch.base_sequence}..{batch.last_sequence}"
                if batch.producer_id >= 0
                else ""
            )
            parts.append(
                f"{names.partition(batch.partition_key)} offsets {batch.base_offset}..{batch.last_offset}{producer}"
            )
        summary = (
            f"file committed: {committed.object_key} ({committed.file_size} bytes, broker "
            f"{committed.uploader_broker_id}, append time {committed.append_time_ms}): {len(batches)} "
            f"batch{'' if len(batches) == 1 else 'es'}" + (": " + "; ".join(parts) if parts else "")
        )
        fields = {
            "object_key": committed.object_key,
            "file_id": committed.file_id,
            "batches": [
                {
                    "partition": names.partition(b.partition_key),
                    "base_offset": b.base_offset,
                    "last_offset": b.last_offset,
                    "producer_id": b.producer_id,
                    "base_sequence": b.base_sequence,
                    "last_sequence": b.last_sequence,
                }
                for b in batches
            ],
        }
        return RecordDescription(summary, fields)


class FileOwnershipTakenKind:
    """This coordinator became a file's owner: a file it knew, or a new one recorded without batches."""

    name = "file_ownership_taken"
    changes_catalog = False

    def replay(self, view: CoordinatorView, taken: rec.FileOwnershipTaken, end_offset: int) -> None:
        if taken.new_file:
            view.next_file_id = next_id_after("file id", taken.file_id, view.next_file_id)
            view.add_pending_file(taken.object_key, end_offset)

    def apply(self, transaction: StateTransaction, taken: rec.FileOwnershipTaken) -> None:
        if not taken.new_file:
            transaction.update_exactly_one(
                "UPDATE files SET owned = 1 WHERE file_id = ? AND object_key = ?",
                (taken.file_id, taken.object_key),
                f"ownership of file {taken.file_id} ({taken.object_key!r}) taken, but it is not here",
            )
            return
        transaction.next_file_id = next_id_after("file id", taken.file_id, transaction.next_file_id)
        owners = list(taken.owner_ids)
        transaction.db.execute(
            INSERT_FILE,
            (
                taken.file_id,
                taken.object_key,
                taken.file_size,
                taken.uploader_broker_id,
                owner_list(owners),
                taken.committed_at_ms,
                0,
                int(owners[-1] == transaction.coordinator_id),
                1,
                0,  # no commit here: no part of one
            ),
        )

    def partition_changes(self, taken: rec.FileOwnershipTaken) -> PartitionChanges:
        return NO_PARTITION_CHANGES  # a file taken over brings no batch

    def names_given(self, taken: rec.FileOwnershipTaken) -> NamesGiven:
        return NamesGiven(files=((taken.file_id, taken.object_key),))

    def describe(self, taken: rec.FileOwnershipTaken, names: RecordNames) -> RecordDescription:
        origin = (
            "coordinators before it" if taken.from_coordinator_id < 0 else f"coordinator {taken.from_coordinator_id}"
        )
        return RecordDescription(
            f"file ownership taken: {names.file(taken.file_id)} from {origin}",
            {"object_key": taken.object_key, "file_id": taken.file_id, "from": taken.from_coordinator_id},
        )


def _file_leaves(transaction: StateTransaction, file_id: int, how: str) -> None:
    """A file this coordinator owns with no live batch and no loan out (design §5a) leaves the state (handed over or
    deleted)."""
    transaction.update_exactly_one(
        "DELETE FROM files WHERE file_id = ? AND live_batches = 0 AND owned = 1 AND NOT EXISTS "
        "(SELECT 1 FROM file_loans AS l WHERE l.file_id = files.file_id)",
        (file_id,),
        f"file {file_id} {how}, but it is not an idle file owned here",
    )
    # A file consolidation recorded (DESIGN §4c) forgets its call's extents with it: a retry is no longer known.
    transaction.db.execute("DELETE FROM file_replacements WHERE file_id = ?", (file_id,))


class FileHandedOverKind:
    """The next owner recorded the file as its own: it leaves this coordinator."""

    name = "file_handed_over"
    changes_catalog = False

    def replay(self, view: CoordinatorView, handed_over: rec.FileHandedOver, end_offset: int) -> None:
        pass  # only the committed state holds a file's ownership

    def apply(self, transaction: StateTransaction, handed_over: rec.FileHandedOver) -> None:
        _file_leaves(transaction, handed_over.file_id, "handed over")

    def partition_changes(self, handed_over: rec.FileHandedOver) -> PartitionChanges:
        return NO_PARTITION_CHANGES

    def names_given(self, handed_over: rec.FileHandedOver) -> NamesGiven:
        return NO_NAMES

    def describe(self, handed_over: rec.FileHandedOver, names: RecordNames) -> RecordDescription:
        file = names.file(handed_over.file_id)
        return RecordDescription(
            f"file handed over: {file} to coordinator {handed_over.to_coordinator_id}",
            {"file": file, "to_coordinator_id": handed_over.to_coordinator_id},
        )


class FileDeletionScheduledKind:
    """The last owner of an idle file set the time after which its object may be deleted."""

    name = "file_deletion_scheduled"
    changes_catalog = False

    def replay(self, view: CoordinatorView, scheduled: rec.FileDeletionScheduled, end_offset: int) -> None:
        pass  # only the committed state holds a file's deletion time

    def apply(self, transaction: StateTransaction, scheduled: rec.FileDeletionScheduled) -> None:
        transaction.update_exactly_one(
            "UPDATE files SET delete_after_ms = ? WHERE file_id = ? AND live_batches = 0 AND owned = 1 "
            "AND is_last_owner = 1 AND NOT EXISTS (SELECT 1 FROM file_loans AS l WHERE l.file_id = files.file_id)",
            (scheduled.delete_after_ms, scheduled.file_id),
            f"deletion of file {scheduled.file_id} scheduled, but it is not an idle file owned last here",
        )

    def partition_changes(self, scheduled: rec.FileDeletionScheduled) -> PartitionChanges:
        return NO_PARTITION_CHANGES

    def names_given(self, scheduled: rec.FileDeletionScheduled) -> NamesGiven:
        return NO_NAMES

    def describe(self, scheduled: rec.FileDeletionScheduled, names: RecordNames) -> RecordDescription:
        file = names.file(scheduled.file_id)
        return RecordDescription(
            f"file deletion scheduled: {file} after {scheduled.delete_after_ms} ms",
            {"file": file, "delete_after_ms": scheduled.delete_after_ms},
        )


class FileDeletedKind:
    """The file's object is deleted from object storage: the file leaves the state."""

    name = "file_deleted"
    changes_catalog = False

    def replay(self, view: CoordinatorView, deleted: rec.FileDeleted, end_offset: int) -> None:
        pass  # the view holds no committed file

    def apply(self, transaction: StateTransaction, deleted: rec.FileDeleted) -> None:
        _file_leaves(transaction, deleted.file_id, "deleted")

    def partition_changes(self, deleted: rec.FileDeleted) -> PartitionChanges:
        return NO_PARTITION_CHANGES

    def names_given(self, deleted: rec.FileDeleted) -> NamesGiven:
        return NO_NAMES  # the file's object key stays known, for describing the records that name it

    def describe(self, deleted: rec.FileDeleted, names: RecordNames) -> RecordDescription:
        file = names.file(deleted.file_id)
        return RecordDescription(f"file deleted: {file}", {"file": file})
