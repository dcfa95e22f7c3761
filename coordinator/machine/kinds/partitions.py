"""Record kinds of partitions: created, their topic deleted, their log start moved (DeleteRecords)."""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    NO_NAMES,
    NO_PARTITION_CHANGES,
    CreatedPartition,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordNames,
    check_log_start_moves,
    next_id_after,
)
from coordinator.machine.state import time_index
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView, PartitionView
from protos import records_pb2 as rec


class PartitionCreatedKind:
    """One user partition assigned to this coordinator, under the next partition key, empty."""

    name = "partition_created"
    changes_catalog = True

    def replay(self, view: CoordinatorView, created: rec.PartitionCreated, end_offset: int) -> None:
        view.next_partition_key = next_id_after("partition key", created.partition_key, view.next_partition_key)
        view.load_partition(
            PartitionView(created.partition_key, created.topic_id, created.topic_name, created.partition, 0, 0, 0)
        )

    def apply(self, transaction: StateTransaction, created: rec.PartitionCreated) -> None:
        transaction.next_partition_key = next_id_after(
            "partition key", created.partition_key, transaction.next_partition_key
        )
        transaction.db.execute(
            "INSERT INTO partitions (partition_key, topic_id, topic_name, partition, log_start_offset, high_watermark, "
            "local_log_start_offset, remote_max_timestamp) VALUES (?,?,?,?,0,0,0,-1)",
            (created.partition_key, created.topic_id, created.topic_name, created.partition),
        )

    def partition_changes(self, created: rec.PartitionCreated) -> PartitionChanges:
        return PartitionChanges(created=(_created_partition(created),))

    def names_given(self, created: rec.PartitionCreated) -> NamesGiven:
        return NamesGiven(partitions=(_created_partition(created),))

    def describe(self, created: rec.PartitionCreated, names: RecordNames) -> RecordDescription:
        topic_id = created.topic_id.hex()
        return RecordDescription(
            f"partition created: {created.topic_name}-{created.partition} (topic id {topic_id})",
            {"topic": created.topic_name, "topic_id": topic_id, "partition": created.partition},
        )


def _created_partition(created: rec.PartitionCreated) -> CreatedPartition:
    return CreatedPartition(created.partition_key, created.topic_id, created.topic_name, created.partition)


class TopicDeletedKind:
    """Every partition of the topic on this coordinator goes, with its producer state and configurations; its batches
    at once, or (`batches_purged_later`) in the bounded passes of BatchesPurged, the partition awaiting purge
    meanwhile."""

    name = "topic_deleted"
    changes_catalog = True

    def replay(self, view: CoordinatorView, deleted: rec.TopicDeleted, end_offset: int) -> None:
        for partition in view.partitions_of_topic(deleted.topic_id):
            view.remove_partition(partition)
        view.forget_topic_configs(deleted.topic_id)

    def apply(self, transaction: StateTransaction, deleted: rec.TopicDeleted) -> None:
        transaction.write_high_watermarks()  # before the partitions' rows go
        db = transaction.db
        keys = [
            key for (key,) in db.execute("SELECT partition_key FROM partitions WHERE topic_id = ?", (deleted.topic_id,))
        ]
        for key in keys:
            if not deleted.batches_purged_later:
                transaction.remove_batches_below(key, None)  # a record of before the field: everything at once
            elif transaction.has_batches(key):
                # Set aside under its key (never given again): a new topic may take its name, even its id.
                db.execute(
                    "INSERT INTO partitions_awaiting_purge (partition_key, topic_id, topic_name, partition) "
                    "SELECT partition_key, topic_id, topic_name, partition FROM partitions WHERE partition_key = ?",
                    (key,),
                )
            time_index.forget(db, key)  # a partition awaiting purge answers no timestamp query
            transaction.forget_time_tail(key)
            db.execute("DELETE FROM producers WHERE partition_key = ?", (key,))
            db.execute("DELETE FROM producer_transactions WHERE partition_key = ?", (key,))
            db.execute("DELETE FROM aborted_transactions WHERE partition_key = ?", (key,))
            db.execute("DELETE FROM partition_moves WHERE partition_key = ?", (key,))  # as the view forgets it
            db.execute("DELETE FROM partitions WHERE partition_key = ?", (key,))
        transaction.deleted_partition_keys.update(keys)
        db.execute("DELETE FROM topic_configs WHERE topic_id = ?", (deleted.topic_id,))

    def partition_changes(self, deleted: rec.TopicDeleted) -> PartitionChanges:
        return PartitionChanges(deleted_topics=(deleted.topic_id,))

    def names_given(self, deleted: rec.TopicDeleted) -> NamesGiven:
        return NO_NAMES  # its partitions' names stay known, for describing the records that name them

    def describe(self, deleted: rec.TopicDeleted, names: RecordNames) -> RecordDescription:
        topics, topic_id = names.topic_names(deleted.topic_id), deleted.topic_id.hex()
        return RecordDescription(
            f"topic deleted: {', '.join(topics) or 'name unknown'} (topic id {topic_id})",
            {"topic_id": topic_id, "topics": topics, "batches_purged_later": deleted.batches_purged_later},
        )


class RecordsDeletedKind:
    """A partition's log start moves forward; the batches wholly below it go.

    Below the local log start (DESIGN §4a) only the log start moves: the broker expired remote data, and the
    coordinator holds no batch there. At or past it the local log start moves too, and nothing is remote any more.
    """

    name = "records_deleted"
    changes_catalog = False

    def replay(self, view: CoordinatorView, deleted: rec.RecordsDeleted, end_offset: int) -> None:
        replay_log_start(view, deleted.partition_key, deleted.log_start_offset)

    def apply(self, transaction: StateTransaction, deleted: rec.RecordsDeleted) -> None:
        transaction.write_high_watermarks()  # the log start is checked against the high watermark
        apply_log_start(transaction, deleted.partition_key, deleted.log_start_offset)

    def partition_changes(self, deleted: rec.RecordsDeleted) -> PartitionChanges:
        return NO_PARTITION_CHANGES  # the log start moves; the next offset stays

    def names_given(self, deleted: rec.RecordsDeleted) -> NamesGiven:
        return NO_NAMES

    def describe(self, deleted: rec.RecordsDeleted, names: RecordNames) -> RecordDescription:
        partition = names.partition(deleted.partition_key)
        return RecordDescription(
            f"records deleted: {partition} log start offset moved to {deleted.log_start_offset}",
            {"partition": partition, "log_start_offset": deleted.log_start_offset},
        )


def replay_log_start(view: CoordinatorView, partition_key: int, log_start_offset: int) -> None:
    """A partition's log start moved forward (DeleteRecords, retention), in the view; the local start follows it."""
    partition = view.partitions_by_key.get(partition_key)
    check_invariant(partition is not None, f"log start moves in partition {partition_key}, which is not here")
    assert partition is not None
    check_log_start_moves(partition_key, partition.log_start_offset, log_start_offset, partition.high_watermark)
    partition.log_start_offset = log_start_offset
    partition.local_log_start_offset = max(partition.local_log_start_offset, log_start_offset)


def apply_log_start(transaction: StateTransaction, partition_key: int, log_start_offset: int) -> None:
    """The same in SQLite, the batches below it removed (their files go on as DESIGN §5 says). The caller has
    written the high watermarks it is checked against."""
    db = transaction.db
    row = db.execute(
        "SELECT log_start_offset, high_watermark FROM partitions WHERE partition_key = ?", (partition_key,)
    ).fetchone()
    check_invariant(row is not None, f"log start moves in partition {partition_key}, which is not here")
    assert row is not None
    check_log_start_moves(partition_key, row[0], log_start_offset, row[1])
    # At or past the local start, nothing is remote any more: its highest timestamp is forgotten with it.
    db.execute(
        "UPDATE partitions SET log_start_offset = ?1, "
        "remote_max_timestamp = CASE WHEN ?1 >= local_log_start_offset THEN -1 ELSE remote_max_timestamp END, "
        "local_log_start_offset = max(local_log_start_offset, ?1) WHERE partition_key = ?2",
        (log_start_offset, partition_key),
    )
    transaction.remove_batches_below(partition_key, log_start_offset)
