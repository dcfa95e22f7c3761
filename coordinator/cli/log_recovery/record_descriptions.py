"""Metadata records in Kafka terms, for an operator reading what a recovery gives up (apply.py).

Records name partitions by a coordinator-local key and files by id; `Names` maps them back to
topic, partition and object key from whatever is at hand (the state, a snapshot, the log). What
each record gives to the names and how it reads is its kind's (`coordinator.machine.kinds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.machine import kinds
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

    def topic_names(self, topic_id: bytes) -> list[str]:
        return sorted({name for name, known_id, _ in self.partitions.values() if known_id == topic_id})

    def learn(self, given: kinds.NamesGiven) -> None:
        for created in given.partitions:
            self.partitions[created.partition_key] = (created.topic_name, created.topic_id, created.partition)
        self.files.update(given.files)
        if given.leader_node_id is not None:
            self.leader_node_id = given.leader_node_id


def describe_record(record: rec.MetadataRecord, names: Names) -> LostRecord:
    """What one metadata record held, for an operator."""
    found = kinds.find(record)
    if found is None:
        return LostRecord("empty", "a record of no known kind")
    kind, body = found
    description = kind.describe(body, names)
    return LostRecord(kind.name, description.summary, description.fields)
