"""The only place metadata-log records are built (see protos/records.proto)."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from protos import records_pb2 as rec

MetadataRecord = rec.MetadataRecord


class CommittedBatch(NamedTuple):
    """One accepted batch with its assigned offsets; packed into FileCommitted.packed_batches."""

    batch_id: int
    partition_key: int
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    magic: int
    timestamp_type: int


BATCH_LAYOUT = struct.Struct("<qqqqqqqqiiibb")


class MovedFile(NamedTuple):
    """A WAL file a moved partition's batches live in, as its source holds it (design §5a)."""

    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: tuple[int, ...]
    committed_at_ms: int


class MovedBatch(NamedTuple):
    """A batch of a moved partition as its source holds it, sent to the target (design §5a): everything but its id,
    which is per coordinator."""

    object_key: str
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    magic: int
    timestamp_type: int
    append_time_ms: int
    flags: int  # coordinator/machine/batch_entries.py: TRANSACTIONAL, CONTROL


def pack_batches(batches: Sequence[CommittedBatch]) -> bytes:
    pack = BATCH_LAYOUT.pack
    return b"".join([pack(*batch) for batch in batches])


def unpack_batches(packed: bytes) -> list[CommittedBatch]:
    return list(map(CommittedBatch._make, BATCH_LAYOUT.iter_unpack(packed)))


def leader_change(leader_epoch: int, node_id: int) -> rec.MetadataRecord:
    return rec.MetadataRecord(leader_change=rec.LeaderChange(leader_epoch=leader_epoch, node_id=node_id))


def partition_created(partition_key: int, topic_id: bytes, topic_name: str, partition: int) -> rec.MetadataRecord:
    return rec.MetadataRecord(
        partition_created=rec.PartitionCreated(
            partition_key=partition_key, topic_id=topic_id, topic_name=topic_name, partition=partition
        )
    )


def topic_deleted(topic_id: bytes) -> rec.MetadataRecord:
    """The topic leaves at once for every caller; its batches leave in later passes (`batches_purged`)."""
    return rec.MetadataRecord(topic_deleted=rec.TopicDeleted(topic_id=topic_id, batches_purged_later=True))


def batches_purged(ranges: Sequence[tuple[int, int]]) -> rec.MetadataRecord:
    """One purge pass: (partition key, below offset) per partition awaiting purge, in key order."""
    return rec.MetadataRecord(
        batches_purged=rec.BatchesPurged(
            ranges=[rec.PurgedRange(partition_key=key, below_offset=below) for key, below in ranges]
        )
    )


def retention_applied(starts: Sequence[tuple[int, int]]) -> rec.MetadataRecord:
    """One retention step: (partition key, new log start offset) per partition whose oldest batches expired."""
    return rec.MetadataRecord(
        retention_applied=rec.RetentionApplied(
            starts=[rec.RetainedStart(partition_key=key, log_start_offset=start) for key, start in starts]
        )
    )


def topic_configs_changed(topic_id: bytes, configs: Mapping[str, str]) -> rec.MetadataRecord:
    """The topic's configurations set on this coordinator from now on (the others at their defaults)."""
    return rec.MetadataRecord(
        topic_configs_changed=rec.TopicConfigsChanged(
            topic_id=topic_id,
            configs=[rec.TopicConfigValue(name=name, value=configs[name]) for name in sorted(configs)],
        )
    )


def records_deleted(partition_key: int, log_start_offset: int) -> rec.MetadataRecord:
    return rec.MetadataRecord(
        records_deleted=rec.RecordsDeleted(partition_key=partition_key, log_start_offset=log_start_offset)
    )


def remote_log_segments_committed(partition_key: int, local_log_start_offset: int) -> rec.MetadataRecord:
    """The partition's batches below `local_log_start_offset` are remote now (DESIGN §4a, KIP-405)."""
    return rec.MetadataRecord(
        remote_log_segments_committed=rec.RemoteLogSegmentsCommitted(
            partition_key=partition_key, local_log_start_offset=local_log_start_offset
        )
    )


class CarriedProducer(NamedTuple):
    """A producer's state carried over by the classic -> diskless switch (design §4d)."""

    producer_id: int
    producer_epoch: int
    window: bytes  # its last batches, packed as SQLite holds them (coordinator.machine.producers.encode_window)
    last_timestamp: int
    coordinator_epoch: int  # of its last transaction marker, -1 if none
    txn_first_offset: int  # of its open transaction, -1 if none


class DisklessLogInit(NamedTuple):
    """One partition's switch (or repaired seal), as applied: the positions it takes and its producers."""

    partition_key: int
    log_start_offset: int
    seal_offset: int
    leader_epoch: int
    max_timestamp: int
    producers_replaced: bool  # False for a repair: the producers stay as they are
    producers: tuple[CarriedProducer, ...]
    classic_log_start_offset: int  # as the classic leader gave it; the log start above never goes back


def diskless_logs_initialized(logs: Sequence[DisklessLogInit]) -> rec.MetadataRecord:
    """Partitions switched from classic to diskless, or their seals repaired (design §4d): one record per call."""
    return rec.MetadataRecord(
        diskless_logs_initialized=rec.DisklessLogsInitialized(
            logs=[
                rec.DisklessLogInit(
                    partition_key=log.partition_key,
                    log_start_offset=log.log_start_offset,
                    seal_offset=log.seal_offset,
                    leader_epoch=log.leader_epoch,
                    max_timestamp=log.max_timestamp,
                    producers_replaced=log.producers_replaced,
                    producers=[rec.CarriedProducer(**producer._asdict()) for producer in log.producers],
                    classic_log_start_offset=log.classic_log_start_offset,
                )
                for log in logs
            ]
        )
    )


def batches_replaced(
    file_id: int,
    object_key: str,
    file_size: int,
    uploader_broker_id: int,
    owner_ids: Sequence[int],
    committed_at_ms: int,
    runs: Sequence[rec.BatchesReplaced.Run],
    extents: Sequence[rec.BatchesReplaced.Extent],
) -> rec.MetadataRecord:
    """ReplaceBatches at one coordinator (DESIGN §4c): the new file, the runs moved into it, the part's extents."""
    return rec.MetadataRecord(
        batches_replaced=rec.BatchesReplaced(
            file_id=file_id,
            object_key=object_key,
            file_size=file_size,
            uploader_broker_id=uploader_broker_id,
            owner_ids=owner_ids,
            committed_at_ms=committed_at_ms,
            runs=runs,
            extents=extents,
        )
    )


def diskless_log_inits(initialized: rec.DisklessLogsInitialized) -> list[DisklessLogInit]:
    return [
        DisklessLogInit(
            log.partition_key,
            log.log_start_offset,
            log.seal_offset,
            log.leader_epoch,
            log.max_timestamp,
            log.producers_replaced,
            tuple(
                CarriedProducer(
                    p.producer_id, p.producer_epoch, p.window, p.last_timestamp, p.coordinator_epoch, p.txn_first_offset
                )
                for p in log.producers
            ),
            log.classic_log_start_offset,
        )
        for log in initialized.logs
    ]


def file_committed(
    file_id: int,
    object_key: str,
    file_size: int,
    uploader_broker_id: int,
    owner_ids: Sequence[int],
    append_time_ms: int,
    batches: Sequence[CommittedBatch],
    rejected_batches: int = 0,
    transaction_batches: Sequence[rec.TransactionBatch] = (),
) -> rec.MetadataRecord:
    return rec.MetadataRecord(
        file_committed=rec.FileCommitted(
            file_id=file_id,
            object_key=object_key,
            file_size=file_size,
            uploader_broker_id=uploader_broker_id,
            owner_ids=owner_ids,
            append_time_ms=append_time_ms,
            packed_batches=pack_batches(batches),
            rejected_batches=rejected_batches,
            transaction_batches=transaction_batches,
        )
    )


def transactional_batch(batch_id: int, transaction_first_offset: int) -> rec.TransactionBatch:
    """A transactional data batch: its producer's open transaction starts at `transaction_first_offset`."""
    return rec.TransactionBatch(batch_id=batch_id, transaction_first_offset=transaction_first_offset)


def transaction_marker(
    batch_id: int, control_type: int, coordinator_epoch: int, ended_first_offset: int, last_stable_offset: int
) -> rec.TransactionBatch:
    """A marker that ended the transaction starting at `ended_first_offset` (-1: none was open)."""
    return rec.TransactionBatch(
        batch_id=batch_id,
        is_control=True,
        control_type=control_type,
        coordinator_epoch=coordinator_epoch,
        transaction_first_offset=ended_first_offset,
        last_stable_offset=last_stable_offset,
    )


def file_ownership_taken(
    file_id: int,
    new_file: bool,
    object_key: str,
    file_size: int,
    uploader_broker_id: int,
    owner_ids: Sequence[int],
    committed_at_ms: int,
    from_coordinator_id: int,
) -> rec.MetadataRecord:
    return rec.MetadataRecord(
        file_ownership_taken=rec.FileOwnershipTaken(
            file_id=file_id,
            new_file=new_file,
            object_key=object_key,
            file_size=file_size,
            uploader_broker_id=uploader_broker_id,
            owner_ids=owner_ids,
            committed_at_ms=committed_at_ms,
            from_coordinator_id=from_coordinator_id,
        )
    )


def file_handed_over(file_id: int, to_coordinator_id: int) -> rec.MetadataRecord:
    return rec.MetadataRecord(file_handed_over=rec.FileHandedOver(file_id=file_id, to_coordinator_id=to_coordinator_id))


def file_deletion_scheduled(file_id: int, delete_after_ms: int) -> rec.MetadataRecord:
    return rec.MetadataRecord(
        file_deletion_scheduled=rec.FileDeletionScheduled(file_id=file_id, delete_after_ms=delete_after_ms)
    )


def file_deleted(file_id: int) -> rec.MetadataRecord:
    return rec.MetadataRecord(file_deleted=rec.FileDeleted(file_id=file_id))


class ExpiredProducer(NamedTuple):
    """A producer's state on one partition as the expiry decision saw it (DESIGN §4a)."""

    partition_key: int
    producer_id: int
    producer_epoch: int
    last_batch_offset: int  # assigned base offset of its last batch
    last_timestamp: int  # that batch's effective timestamp


def producers_expired(expired_before_ms: int, producers: Sequence[ExpiredProducer]) -> rec.MetadataRecord:
    return rec.MetadataRecord(
        producers_expired=rec.ProducersExpired(
            expired_before_ms=expired_before_ms,
            producers=[rec.ExpiredProducer(**producer._asdict()) for producer in producers],
        )
    )


def expired_producers(expired: rec.ProducersExpired) -> list[ExpiredProducer]:
    return [
        ExpiredProducer(p.partition_key, p.producer_id, p.producer_epoch, p.last_batch_offset, p.last_timestamp)
        for p in expired.producers
    ]


def encode_batch(records: Sequence[rec.MetadataRecord]) -> bytes:
    """The payload of one log frame: all records of one operation."""
    return rec.RecordBatch(records=records).SerializeToString()


def decode_batch(payload: bytes) -> list[rec.MetadataRecord]:
    batch = rec.RecordBatch()
    batch.ParseFromString(payload)
    return list(batch.records)


def partition_move_started(
    partition_key: int, to_coordinator: int, move_id: int, catch_up: bool = False
) -> rec.MetadataRecord:
    """A partition moving from its source to `to_coordinator` (design §5a): frozen at once, or catching up first."""
    started = rec.PartitionMoveStarted(
        partition_key=partition_key, to_coordinator=to_coordinator, move_id=move_id, catch_up=catch_up
    )
    return rec.MetadataRecord(partition_move_started=started)


def partition_move_frozen(partition_key: int, move_id: int) -> rec.MetadataRecord:
    """The catch-up of move `move_id` ended: the partition is frozen at its source (design §5a)."""
    return rec.MetadataRecord(
        partition_move_frozen=rec.PartitionMoveFrozen(partition_key=partition_key, move_id=move_id)
    )


def partition_move_cancelled(partition_key: int, move_id: int) -> rec.MetadataRecord:
    """The freeze of move `move_id` lifted: the partition takes writes at its source again (design §5a)."""
    cancelled = rec.PartitionMoveCancelled(partition_key=partition_key, move_id=move_id)
    return rec.MetadataRecord(partition_move_cancelled=cancelled)


def partition_adoption_chunk(
    from_coordinator: int,
    move_id: int,
    staged_partition_key: int,
    index: int,
    topic_id: bytes,
    partition: int,
    files: Sequence[rec.PartitionAdoptionChunk.File],
    batches: Sequence[tuple[CommittedBatch, int, int, int]],  # (batch, file index, append time, flags)
    aborted: Sequence[tuple[int, int, int, int]] = (),  # (marker offset, producer id, first offset, last stable)
) -> rec.MetadataRecord:
    """One chunk of a moved partition's batches, staged at the target (design §5a)."""
    return rec.MetadataRecord(
        partition_adoption_chunk=rec.PartitionAdoptionChunk(
            move_id=move_id,
            from_coordinator=from_coordinator,
            staged_partition_key=staged_partition_key,
            index=index,
            topic_id=topic_id,
            partition=partition,
            files=files,
            packed_batches=pack_batches([batch for batch, _, _, _ in batches]),
            file_indexes=[file_index for _, file_index, _, _ in batches],
            append_times_ms=[append_time for _, _, append_time, _ in batches],
            flags=[flags for _, _, _, flags in batches],
            aborted_transactions=[
                rec.PartitionAdoptionChunk.Aborted(
                    last_offset=last, producer_id=producer_id, first_offset=first, last_stable_offset=stable
                )
                for last, producer_id, first, stable in aborted
            ],
        )
    )


class AdoptedPartition(NamedTuple):
    """A moved partition as its frozen source holds it besides its batches (design §5a): what its adoption carries."""

    topic_id: bytes
    topic_name: str
    partition: int
    log_start_offset: int
    high_watermark: int
    local_log_start_offset: int
    remote_max_timestamp: int
    classic_log_start_offset: int
    seal_offset: int
    switch_leader_epoch: int
    switch_producers: int
    producers: tuple[CarriedProducer, ...]
    configs: tuple[tuple[str, str], ...]  # the topic's configurations, sorted by name


def partition_adopted(
    from_coordinator: int, move_id: int, staged_partition_key: int, adopted: AdoptedPartition
) -> rec.MetadataRecord:
    """The cut-over at a move's target (design §5a): the staged batches become the partition, served here."""
    return rec.MetadataRecord(
        partition_adopted=rec.PartitionAdopted(
            from_coordinator=from_coordinator,
            move_id=move_id,
            staged_partition_key=staged_partition_key,
            topic_id=adopted.topic_id,
            topic_name=adopted.topic_name,
            partition=adopted.partition,
            log_start_offset=adopted.log_start_offset,
            high_watermark=adopted.high_watermark,
            local_log_start_offset=adopted.local_log_start_offset,
            remote_max_timestamp=adopted.remote_max_timestamp,
            classic_log_start_offset=adopted.classic_log_start_offset,
            seal_offset=adopted.seal_offset,
            switch_leader_epoch=adopted.switch_leader_epoch,
            switch_producers=adopted.switch_producers,
            producers=[rec.CarriedProducer(**producer._asdict()) for producer in adopted.producers],
            topic_configs=[rec.TopicConfigValue(name=name, value=value) for name, value in adopted.configs],
        )
    )
