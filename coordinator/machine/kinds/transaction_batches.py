"""The transaction effects of a FileCommitted (DESIGN §4b): its TransactionBatch results, view and SQLite side by side.

The check decided everything (which batch opened a transaction, what a marker ended, the LSO after an abort);
these only write it down. A file without transactional batches never reaches here.
"""

from __future__ import annotations

from coordinator.machine.batch_entries import aborted_entries
from coordinator.machine.records import BATCH_LAYOUT
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec

CONTROL_ABORT = pb.CONTROL_ABORT


def _batch_of(committed: rec.FileCommitted, batch_id: int) -> tuple[int, int, int]:
    """(partition key, producer id, base offset) of one of the file's batches (their ids are consecutive)."""
    first_id = BATCH_LAYOUT.unpack_from(committed.packed_batches, 0)[0]
    fields = BATCH_LAYOUT.unpack_from(committed.packed_batches, (batch_id - first_id) * BATCH_LAYOUT.size)
    return fields[1], fields[7], fields[4]


def replay_transactions(view: CoordinatorView, committed: rec.FileCommitted) -> None:
    for batch in committed.transaction_batches:
        key, producer_id, _ = _batch_of(committed, batch.batch_id)
        if batch.is_control:
            view.end_transaction(key, producer_id, batch.coordinator_epoch)
        else:
            view.open_transaction_at(key, producer_id, batch.transaction_first_offset)


_OPEN = (
    "INSERT INTO producer_transactions (partition_key, producer_id, coordinator_epoch, first_offset) "
    "VALUES (?, ?, -1, ?) ON CONFLICT (partition_key, producer_id) DO UPDATE SET first_offset = excluded.first_offset"
)
_END = (
    "INSERT INTO producer_transactions (partition_key, producer_id, coordinator_epoch, first_offset) "
    "VALUES (?, ?, ?, -1) ON CONFLICT (partition_key, producer_id) DO UPDATE SET "
    "coordinator_epoch = excluded.coordinator_epoch, first_offset = -1"
)
_ABORTED = (
    "INSERT INTO aborted_transactions (partition_key, last_offset, producer_id, first_offset, last_stable_offset, "
    "entry) VALUES (?, ?, ?, ?, ?, ?)"
)


def apply_transactions(transaction: StateTransaction, committed: rec.FileCommitted) -> None:
    execute = transaction.db.execute
    for batch in committed.transaction_batches:
        key, producer_id, offset = _batch_of(committed, batch.batch_id)
        if not batch.is_control:
            if batch.transaction_first_offset == offset:  # the batch opened the transaction; the rest change nothing
                execute(_OPEN, (key, producer_id, offset))
            continue
        execute(_END, (key, producer_id, batch.coordinator_epoch))
        if batch.control_type == CONTROL_ABORT and batch.transaction_first_offset >= 0:
            first = batch.transaction_first_offset
            entry = aborted_entries([(producer_id, first)])
            execute(_ABORTED, (key, offset, producer_id, first, batch.last_stable_offset, entry))
