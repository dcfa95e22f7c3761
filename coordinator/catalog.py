"""The node's topic catalog: topic ids, names, and which coordinator holds each partition.

Built at load from the coordinators' own state (each stores its partitions),
then kept current by the router as CreatePartitions and DeleteTopics succeed.
It routes every request and enforces the topic-wide naming rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(slots=True)
class TopicEntry:
    name: str
    partitions: dict[int, int] = field(default_factory=dict)  # partition -> coordinator id


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

    def add_partitions(self, topic_id: bytes, name: str, assignment: Mapping[int, int]) -> None:
        entry = self._topics.get(topic_id)
        if entry is None:
            entry = self._topics[topic_id] = TopicEntry(name)
            self._ids_by_name[name] = topic_id
        entry.partitions.update(assignment)

    def remove_partitions(self, topic_id: bytes, coordinator_ids: Iterable[int]) -> None:
        """Forgets the topic's partitions held by these coordinators; the topic goes with its last one."""
        entry = self._topics.get(topic_id)
        if entry is None:
            return
        gone = set(coordinator_ids)
        entry.partitions = {p: c for p, c in entry.partitions.items() if c not in gone}
        if not entry.partitions:
            del self._topics[topic_id]
            if self._ids_by_name.get(entry.name) == topic_id:
                del self._ids_by_name[entry.name]
