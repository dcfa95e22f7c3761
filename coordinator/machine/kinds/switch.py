"""The record kind of the classic -> diskless switch (design §4d): DisklessLogsInitialized.

A classic partition's leader sealed its log at its high watermark; the partition, which holds no diskless batch yet
(coordinator.topics.switch.rules checked it), takes the classic log start as its log start and the seal as its high
watermark and local log start: below the seal the classic log (local or tiered) serves reads, as remote storage does
for offloaded batches (DESIGN §4a), and the classic log's highest timestamp stands where an offload's would, so
timestamp queries it may answer go there. Its producers' state becomes exactly the one carried over (a repair keeps
the producers and the classic start, and moves only the seal).
"""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    NO_NAMES,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordNames,
)
from coordinator.machine.producers import decode_window
from coordinator.machine.records import DisklessLogInit, diskless_log_inits
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec


def _check_positions(log: DisklessLogInit) -> None:
    check_invariant(
        0 <= log.log_start_offset <= log.seal_offset and log.leader_epoch >= 0,
        f"partition {log.partition_key} switched with log start {log.log_start_offset}, seal {log.seal_offset} and "
        f"leader epoch {log.leader_epoch}",
    )


def _check_no_diskless_batch(partition_key: int, high_watermark: int, seal_offset: int) -> None:
    """A switch or a repair happens only while the partition holds nothing diskless: its high watermark is still
    where diskless offsets start (the seal, or 0 for a partition never switched)."""
    check_invariant(
        high_watermark == max(seal_offset, 0),
        f"partition {partition_key} switched to diskless with diskless offsets up to {high_watermark} "
        f"committed above its seal {seal_offset}",
    )


class DisklessLogsInitializedKind:
    name = "diskless_logs_initialized"
    # No partition created or deleted: the catalog does not follow it. The next offsets move (to the seals).
    changes_catalog = False

    def replay(self, view: CoordinatorView, initialized: rec.DisklessLogsInitialized, end_offset: int) -> None:
        for log in diskless_log_inits(initialized):
            _check_positions(log)
            partition = view.partitions_by_key.get(log.partition_key)
            check_invariant(partition is not None, f"switch of partition {log.partition_key}, not here")
            assert partition is not None
            _check_no_diskless_batch(partition.key, partition.high_watermark, partition.seal_offset)
            partition.log_start_offset = log.log_start_offset
            partition.high_watermark = partition.local_log_start_offset = log.seal_offset
            partition.seal_offset = log.seal_offset
            partition.switch_leader_epoch = log.leader_epoch
            partition.classic_log_start_offset = log.classic_log_start_offset
            if not log.producers_replaced:
                continue
            view.producer_windows.pop(partition.key, None)
            view.open_transactions.pop(partition.key, None)
            view.coordinator_epochs.pop(partition.key, None)
            for producer in log.producers:
                window = decode_window(producer.producer_epoch, producer.window, producer.last_timestamp)
                view.load_producer(partition.key, producer.producer_id, window)
                view.load_transaction_state(
                    partition.key, producer.producer_id, producer.coordinator_epoch, producer.txn_first_offset
                )

    def apply(self, transaction: StateTransaction, initialized: rec.DisklessLogsInitialized) -> None:
        transaction.write_high_watermarks()  # a commit earlier in the transaction would show here
        db = transaction.db
        for log in diskless_log_inits(initialized):
            _check_positions(log)
            key = log.partition_key
            row = db.execute(
                "SELECT high_watermark, seal_offset, remote_max_timestamp FROM partitions WHERE partition_key = ?",
                (key,),
            )
            found = row.fetchone()
            check_invariant(found is not None, f"switch of partition {key}, which is not here")
            assert found is not None
            _check_no_diskless_batch(key, found[0], found[1])
            check_invariant(not transaction.has_batches(key), f"partition {key} switched while it holds batches")
            # The classic log's timestamps stand where remote ones would (DESIGN §4a), while any of it is kept; a
            # repair keeps the one its switch gave.
            remote_max = log.max_timestamp if log.producers_replaced else found[2]
            db.execute(
                "UPDATE partitions SET log_start_offset = ?, high_watermark = ?, local_log_start_offset = ?, "
                "remote_max_timestamp = ?, seal_offset = ?, switch_leader_epoch = ?, classic_log_start_offset = ? "
                "WHERE partition_key = ?",
                (log.log_start_offset, log.seal_offset, log.seal_offset,
                 remote_max if log.log_start_offset < log.seal_offset else -1, log.seal_offset, log.leader_epoch,
                 log.classic_log_start_offset, key),
            )  # fmt: skip
            transaction.forget_time_tail(key)
            if log.producers_replaced:
                _replace_producers(transaction, log)

    def partition_changes(self, initialized: rec.DisklessLogsInitialized) -> PartitionChanges:
        return PartitionChanges(next_offsets=tuple((log.partition_key, log.seal_offset) for log in initialized.logs))

    def names_given(self, initialized: rec.DisklessLogsInitialized) -> NamesGiven:
        return NO_NAMES

    def describe(self, initialized: rec.DisklessLogsInitialized, names: RecordNames) -> RecordDescription:
        logs = diskless_log_inits(initialized)
        parts = [
            f"{names.partition(log.partition_key)} "
            + ("switched" if log.producers_replaced else "seal repaired")
            + f" at seal {log.seal_offset} (log start {log.log_start_offset}, leader epoch {log.leader_epoch}"
            + (f", {_count(len(log.producers), 'producer')})" if log.producers_replaced else ")")
            for log in logs
        ]
        fields = {
            "logs": [
                {
                    "partition": names.partition(log.partition_key),
                    "log_start_offset": log.log_start_offset,
                    "seal_offset": log.seal_offset,
                    "leader_epoch": log.leader_epoch,
                    "producers_replaced": log.producers_replaced,
                    "producers": [p.producer_id for p in log.producers],
                }
                for log in logs
            ]
        }
        return RecordDescription("diskless logs initialized: " + "; ".join(parts), fields)


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _replace_producers(transaction: StateTransaction, log: DisklessLogInit) -> None:
    """The partition's producers' state becomes exactly the one carried over, their transactions' too."""
    key = log.partition_key
    existing = set(transaction.committed_windows.get(key, {})) | {
        producer for partition_key, producer in transaction.changed_windows if partition_key == key
    }
    for producer_id in existing:
        transaction.expire_window(key, producer_id)
    transaction.db.execute("DELETE FROM producer_transactions WHERE partition_key = ?", (key,))
    for producer in log.producers:
        transaction.changed_windows[(key, producer.producer_id)] = (
            producer.producer_epoch,
            producer.window,
            producer.last_timestamp,
        )
    transaction.db.executemany(
        "INSERT INTO producer_transactions (partition_key, producer_id, coordinator_epoch, first_offset) "
        "VALUES (?,?,?,?)",
        [
            (key, p.producer_id, p.coordinator_epoch, p.txn_first_offset)
            for p in log.producers
            if p.coordinator_epoch >= 0 or p.txn_first_offset >= 0
        ],
    )
    transaction.db.execute(
        "UPDATE partitions SET switch_producers = ? WHERE partition_key = ?", (len(log.producers), key)
    )
