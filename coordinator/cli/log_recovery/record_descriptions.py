"""Metadata records in Kafka terms, for an operator reading what a recovery gives up (log/recovery.py).

Records name partitions by a coordinator-local key and files by id; `Names` maps them back to
topic, partition and object key from whatever is at hand (the state, a snapshot, the log).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.machine import records
from protos import records_pb2 as rec


@dataclass(frozen=True, slots=True)
class LostRecord:
    kind: str  # the MetadataRecord field: file_committed, partition_created, ...
    summary: str  # what it held, in Kafka terms
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Names:
    """Partition keys and file ids in Kafka terms, gathered from the state, the snapshot and the log."""

    partitions: dict[int, tuple[str, bytes, int]] = field(default_factory=dict)  # key -> (topic, topic id, partition)
    files: dict[int, str] = field(default_factory=dict)  # file id -> object key
    leader_node_id: int = 0  # of the newest leader change seen

    def partition(self, key: int) -> str:
        known = self.partitions.get(key)
        return f"{known[0]}-{known[2]}" if known else f"partition key {key} (name unknown)"

    def file(self, file_id: int) -> str:
        known = self.files.get(file_id)
        return f"{known} (file id {file_id})" if known else f"file id {file_id}"

    def learn(self, record: rec.MetadataRecord) -> None:
        kind = record.WhichOneof("record")
        if kind == "partition_created":
            created = record.partition_created
            self.partitions[created.partition_key] = (created.topic_name, created.topic_id, created.partition)
        elif kind == "file_committed":
            self.files[record.file_committed.file_id] = record.file_committed.object_key
        elif kind == "file_ownership_taken":
            self.files[record.file_ownership_taken.file_id] = record.file_ownership_taken.object_key
        elif kind == "leader_change":
            self.leader_node_id = record.leader_change.node_id


def describe_record(record: rec.MetadataRecord, names: Names) -> LostRecord:
    """What one metadata record held, for an operator."""
    kind = record.WhichOneof("record") or "empty"
    if kind == "file_committed":
        return _describe_file_committed(record.file_committed, names)
    body: Any = getattr(record, kind, None)  # the oneof's message; None for a record with none set
    if kind == "leader_change":
        summary = f"leader change: epoch {body.leader_epoch} on node {body.node_id}"
        fields: dict[str, Any] = {"leader_epoch": body.leader_epoch, "node_id": body.node_id}
    elif kind == "partition_created":
        summary = f"partition created: {body.topic_name}-{body.partition} (topic id {body.topic_id.hex()})"
        fields = {"topic": body.topic_name, "topic_id": body.topic_id.hex(), "partition": body.partition}
    elif kind == "topic_deleted":
        topics = {name for name, topic_id, _ in names.partitions.values() if topic_id == body.topic_id}
        summary = f"topic deleted: {', '.join(sorted(topics)) or 'name unknown'} (topic id {body.topic_id.hex()})"
        fields = {"topic_id": body.topic_id.hex(), "topics": sorted(topics)}
    elif kind == "records_deleted":
        partition = names.partition(body.partition_key)
        summary = f"records deleted: {partition} log start offset moved to {body.log_start_offset}"
        fields = {"partition": partition, "log_start_offset": body.log_start_offset}
    elif kind == "file_ownership_taken":
        origin = "coordinators before it" if body.from_coordinator_id < 0 else f"coordinator {body.from_coordinator_id}"
        summary = f"file ownership taken: {names.file(body.file_id)} from {origin}"
        fields = {"object_key": body.object_key, "file_id": body.file_id, "from": body.from_coordinator_id}
    elif kind == "file_handed_over":
        summary = f"file handed over: {names.file(body.file_id)} to coordinator {body.to_coordinator_id}"
        fields = {"file": names.file(body.file_id), "to_coordinator_id": body.to_coordinator_id}
    elif kind == "file_deletion_scheduled":
        summary = f"file deletion scheduled: {names.file(body.file_id)} after {body.delete_after_ms} ms"
        fields = {"file": names.file(body.file_id), "delete_after_ms": body.delete_after_ms}
    elif kind == "file_deleted":
        summary = f"file deleted: {names.file(body.file_id)}"
        fields = {"file": names.file(body.file_id)}
    else:
        summary, fields = "a record of no known kind", {}
    return LostRecord(kind, summary, fields)


def _describe_file_committed(body: rec.FileCommitted, names: Names) -> LostRecord:
    batches = records.unpack_batches(body.packed_batches)
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
        f"file committed: {body.object_key} ({body.file_size} bytes, broker {body.uploader_broker_id}, append time "
        f"{body.append_time_ms}): {len(batches)} batch{'' if len(batches) == 1 else 'es'}"
        + (": " + "; ".join(parts) if parts else "")
    )
    fields = {
        "object_key": body.object_key,
        "file_id": body.file_id,
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
    return LostRecord("file_committed", summary, fields)
