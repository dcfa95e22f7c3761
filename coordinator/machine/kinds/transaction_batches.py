"""The transaction effects of a FileCommitted (DESIGN §4b): its TransactionBatch results, view and SQLite side by side.

The check decided everything (which batch opened a transaction, what a marker ended, the LSO after an abort);
these only write it down. A file without transactional batches never reaches here.
"""

from __future__ import annotations

from collections.abc import Iterator

from coordinator.machine.batch_entries import aborted_entries
from coordinator.machine.records import BATCH_LAYOUT
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec

CONTROL_ABORT = pb.CONTROL_ABORT


def _batches_of(committed: rec.FileCommitted) -> Iterator[tuple[rec.TransactionBatch, int, int, int]]:
    """Each transaction batch with (partition key, producer id, base offset) of its batch in the file (the file's
    batch ids are consecutive: one unpack per batch, a transactional file holds one per batch)."""
    packed = committed.packed_batches
    first_id = BATCH_LAYOUT.unpack_from(packed, 0)[0]
    size = BATCH_LAYOUT.size
    unpack_from = BATCH_LAYOUT.unpack_from
    for batch in committed.transaction_batches:
        fields = unpack_from(packed, (batch.batch_id - first_id) * size)
        yield batch, fields[1], fields[7], fields[4]


def replay_transactions(view: CoordinatorView, committed: rec.FileCommitted) -> None:
    for batch, key, producer_id, _ in _batches_of(committed):
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
    # Rows gathered and written by one executemany each, in the order the batches came: a file of a transaction's
    # first batches opens one per partition, a file of markers ends as many.
    opened: list[tuple[int, int, int]] = []
    ended: list[tuple[int, int, int]] = []
    aborted: list[tuple[int, int, int, int, int, bytes]] = []
    for batch, key, producer_id, offset in _batches_of(committed):
        if not batch.is_control:
            if batch.transaction_first_offset == offset:  # the batch opened the transaction; the rest change nothing
                opened.append((key, producer_id, offset))
            continue
        ended.append((key, producer_id, batch.coordinator_epoch))
        if batch.control_type == CONTROL_ABORT and batch.transaction_first_offset >= 0:
            first = batch.transaction_first_offset
            entry = aborted_entries([(producer_id, first)])
            aborted.append((key, offset, producer_id, first, batch.last_stable_offset, entry))
    # A file may open a producer's transaction and end it (data then marker), or end one and open the next: the
    # ends and opens of one producer and partition must land in the file's order.
    if opened and ended and {row[:2] for row in opened} & {row[:2] for row in ended}:
        _apply_in_order(transaction, committed)
        return
    db = transaction.db
    if ended:
        db.executemany(_END, ended)
    if opened:
        db.executemany(_OPEN, opened)
    if aborted:
        db.executemany(_ABORTED, aborted)


def _apply_in_order(transaction: StateTransaction, committed: rec.FileCommitted) -> None:
    execute = transaction.db.execute
    for batch, key, producer_id, offset in _batches_of(committed):
        if not batch.is_control:
            if batch.transaction_first_offset == offset:
                execute(_OPEN, (key, producer_id, offset))
            continue
        execute(_END, (key, producer_id, batch.coordinator_epoch))
        if batch.control_type == CONTROL_ABORT and batch.transaction_first_offset >= 0:
            first = batch.transaction_first_offset
            entry = aborted_entries([(producer_id, first)])
            execute(_ABORTED, (key, offset, producer_id, first, batch.last_stable_offset, entry))
