"""The node's topic catalog: topic ids, names, and which coordinator holds each partition.

It is derived from the coordinators' records, never patched by callers:
rebuilt from every loaded coordinator's partitions when one (re)loads, and
kept current from the records each coordinator reports once SQLite applied
them (before their callers are answered): of each kind that changes the
catalog (`coordinator.machine.kinds`), the partitions it creates and the topics
it deletes. It routes every request and enforces the topic-wide naming rules.

Read your writes (DESIGN §6a): a topic change this node acknowledged is in place at once, before the replicas it
only follows apply it: a creation is learned (`learn`), a deletion forgotten (`forget`), and the records of the
topic's creation that a lagging replica here applies after that are not taken until it applied the deletion too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, final

from coordinator.machine import kinds
from protos import records_pb2 as rec

# Topics this node acknowledged deleted whose deletion some replica here has not applied yet: kept until it has (a
# replica that caught up by a snapshot never applies the record: its entry stays until the bound drops the oldest, or
# the topic id is learned again). An entry dropped early only lets a lagging replica show the topic until it applies
# the deletion, as before this rule.
FORGOTTEN_TOPICS_MAX = 10_000


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
    # Frozen there by a move (design §5a): until the source drops it, its target may hold it too, and serves it once
    # adopted, so a holder that is not frozen wins.
    frozen: bool = False


@final
class TopicCatalog:
    def __init__(self, forgotten_max: int = FORGOTTEN_TOPICS_MAX) -> None:
        self._topics: dict[bytes, TopicEntry] = {}
        self._ids_by_name: dict[str, bytes] = {}
        # Topic id -> the coordinators whose replica here has still to apply its deletion (`forget`), oldest first.
        self._forgotten: OrderedDict[bytes, set[int]] = OrderedDict()
        self._forgotten_max = forgotten_max

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
        for placed in sorted(partitions, key=lambda placed: not placed.frozen):  # the frozen first: others win
            if not self._deleted_here(placed.topic_id, placed.coordinator_id):
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
                if not self._deleted_here(created.topic_id, coordinator_id):
                    self._add_partitions(created.topic_id, created.topic_name, {created.partition: coordinator_id})
            for topic_id in changes.deleted_topics:
                self._remove_partitions(topic_id, coordinator_id)
                self._applied_deletion(topic_id, coordinator_id)

    def learn(self, topic_id: bytes, name: str, assignment: Mapping[int, int]) -> None:
        """Partitions this node's replicas have not applied yet, known as created (by this node's own acknowledgement
        of their creation, or from the leader of their coordinator): they are answered at once, not after the
        replicas catch up. Their records, when applied, say the same."""
        self._forgotten.pop(topic_id, None)  # created again since this node deleted it
        self._add_partitions(topic_id, name, assignment)

    def forget(self, topic_id: bytes, lagging: Collection[int]) -> None:
        """A topic this node acknowledged deleted: unknown at once. `lagging`: the coordinators whose replica here
        may not have applied its deletion yet; what they apply of the topic's creation meanwhile is not taken."""
        entry = self._topics.pop(topic_id, None)
        if entry is not None and self._ids_by_name.get(entry.name) == topic_id:
            del self._ids_by_name[entry.name]
        if not lagging:
            return
        self._forgotten[topic_id] = set(lagging)
        self._forgotten.move_to_end(topic_id)
        while len(self._forgotten) > self._forgotten_max:
            self._forgotten.popitem(last=False)

    def _deleted_here(self, topic_id: bytes, coordinator_id: int) -> bool:
        """Whether this node acknowledged the topic's deletion and this coordinator's replica has yet to apply it."""
        lagging = self._forgotten.get(topic_id)
        return lagging is not None and coordinator_id in lagging

    def _applied_deletion(self, topic_id: bytes, coordinator_id: int) -> None:
        lagging = self._forgotten.get(topic_id)
        if lagging is not None:
            lagging.discard(coordinator_id)
            if not lagging:
                del self._forgotten[topic_id]

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
