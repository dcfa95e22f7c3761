"""The node's topic catalog: topic ids, names, and which coordinator holds each partition.

It is derived from the coordinators' records, never patched by callers:
rebuilt from every loaded coordinator's partitions when one (re)loads, and
kept current from the records each coordinator reports once SQLite applied
them (before their callers are answered): of each kind that changes the
catalog (`coordinator.machine.kinds`), the partitions it creates and the topics
it deletes. It routes every request and enforces the topic-wide naming rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, final

from coordinator.machine import kinds
from protos import records_pb2 as rec


@dataclass(slots=True)
class TopicEntry:
    name: str
    partitions: dict[int, int] = field(default_factory=dict)  # partition -> coordinator id


class TopicLookup(Protocol):
    """The catalog as the topic-wide rules read it."""

    def topic(self, topic_id: bytes) -> TopicEntry | None: ...

    def topic_id_of(self, name: str) -> bytes | None: ...


@final
@dataclass(frozen=True, slots=True)
class PlacedPartition:
    """A partition and the coordinator that holds it."""

    coordinator_id: int
    topic_id: bytes
    topic_name: str
    partition: int


@final
class TopicCatalog:
    def __init__(self) -> None:
        self._topics: dict[bytes, TopicEntry] = {}
        self._ids_by_name: dict[str, bytes] = {}

    def topic(self, topic_id: bytes) -> TopicEntry | None:
        return self._topics.get(topic_id)

    def topic_id_of(self, name: str) -> bytes | None:
        return self._ids_by_name.get(name)

    def coordinator_of(self, topic_id: bytes, partition: int) -> int | None:
        entry = self._topics.get(topic_id)
        return None if entry is None else entry.partitions.get(partition)

    # ------------------------------------------------------------------ derived from the coordinators

    def rebuild(self, partitions: Iterable[PlacedPartition]) -> None:
        """Replaces everything with these partitions (every loaded coordinator's)."""
        self._topics.clear()
        self._ids_by_name.clear()
        for placed in partitions:
            self._add_partitions(placed.topic_id, placed.topic_name, {placed.partition: placed.coordinator_id})

    def apply_records(self, coordinator_id: int, records: Sequence[rec.MetadataRecord]) -> None:
        """Follows a coordinator's applied records, in log order; kinds that do not change the catalog are ignored."""
        for record in records:
            found = kinds.find(record)
            if found is None or not found[0].changes_catalog:
                continue
            kind, body = found
            changes = kind.partition_changes(body)
            for created in changes.created:
                self._add_partitions(created.topic_id, created.topic_name, {created.partition: coordinator_id})
            for topic_id in changes.deleted_topics:
                self._remove_partitions(topic_id, coordinator_id)

    def learn(self, topic_id: bytes, name: str, assignment: Mapping[int, int]) -> None:
        """Partitions this node's replicas have not applied yet, known as created (by this node's own acknowledgement
        of their creation, or from the leader of their coordinator): they are answered at once, not after the
        replicas catch up. Their records, when applied, say the same."""
        self._add_partitions(topic_id, name, assignment)

    def _add_partitions(self, topic_id: bytes, name: str, assignment: Mapping[int, int]) -> None:
        entry = self._topics.get(topic_id)
        if entry is None:
            entry = self._topics[topic_id] = TopicEntry(name)
            self._ids_by_name[name] = topic_id
        entry.partitions.update(assignment)

    def _remove_partitions(self, topic_id: bytes, coordinator_id: int) -> None:
        """Forgets the topic's partitions held by this coordinator; the topic goes with its last one."""
        entry = self._topics.get(topic_id)
        if entry is None:
            return
        entry.partitions = {p: c for p, c in entry.partitions.items() if c != coordinator_id}
        if not entry.partitions:
            del self._topics[topic_id]
            if self._ids_by_name.get(entry.name) == topic_id:
                del self._ids_by_name[entry.name]
