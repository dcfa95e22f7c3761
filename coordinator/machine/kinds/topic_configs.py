"""The TopicConfigsChanged record: a topic's configurations on this coordinator (DESIGN §4a).

Written with a topic's first partitions here (CreatePartitions) and by AlterTopicConfigs, on every coordinator
holding a partition of the topic. It carries the result (every configuration set, canonical), never the change, so
replay needs neither the request nor the node's settings. The topic's deletion (TopicDeleted) forgets it. Code
on the coordinator reads a topic's configurations from its view (`CoordinatorView.topic_configs`, through
`coordinator.topics.topic_configs.effective_configs`, which adds the defaults).

KIP-950's "delete" (DESIGN §4a): a topic whose configuration, once changed, has `remote.storage.enable=false` and
`remote.log.delete.on.disable=true` keeps nothing remote: each of its partitions' log start moves to the local log
start and the remote range is forgotten, as the record is applied (the two defaults are false, not node settings:
the record alone decides). Offloads re-enabled later go on from the local start, offsets continuous.
"""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    NoCatalogEffects,
    RecordDescription,
    RecordNames,
)
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

# Kafka's names (coordinator.topics.topic_configs holds them with their rules; machine/ may not import topics/).
_REMOTE_STORAGE_ENABLE = "remote.storage.enable"
_REMOTE_LOG_DELETE_ON_DISABLE = "remote.log.delete.on.disable"


def _forgets_remote_data(configs: dict[str, str]) -> bool:
    """Remote storage off with its data deleted (KIP-950): nothing of the topic stays remote."""
    return configs.get(_REMOTE_STORAGE_ENABLE, "false") != "true" and (
        configs.get(_REMOTE_LOG_DELETE_ON_DISABLE, "false") == "true"
    )


def _pairs(changed: rec.TopicConfigsChanged) -> tuple[tuple[str, str], ...]:
    return tuple((config.name, config.value) for config in changed.configs)


class TopicConfigsChangedKind(NoCatalogEffects):
    name = "topic_configs_changed"
    # The node's catalog holds no configurations: they are read from the coordinators' leaders, never from a copy
    # that may trail them (coordinator.topics.config_admin).

    def replay(self, view: CoordinatorView, changed: rec.TopicConfigsChanged, end_offset: int) -> None:
        check_invariant(
            bool(view.partitions_of_topic(changed.topic_id)),
            f"configurations of topic {changed.topic_id.hex()}, which has no partition here",
        )
        configs = dict(_pairs(changed))
        view.load_topic_configs(changed.topic_id, configs)
        if _forgets_remote_data(configs):
            for partition in view.partitions_of_topic(changed.topic_id):
                partition.log_start_offset = partition.local_log_start_offset

    def apply(self, transaction: StateTransaction, changed: rec.TopicConfigsChanged) -> None:
        db = transaction.db
        here = db.execute("SELECT 1 FROM partitions WHERE topic_id = ? LIMIT 1", (changed.topic_id,)).fetchone()
        check_invariant(
            here is not None, f"configurations of topic {changed.topic_id.hex()}, which has no partition here"
        )
        db.execute("DELETE FROM topic_configs WHERE topic_id = ?", (changed.topic_id,))
        db.executemany(
            "INSERT INTO topic_configs (topic_id, name, value) VALUES (?,?,?)",
            [(changed.topic_id, name, value) for name, value in _pairs(changed)],
        )
        if _forgets_remote_data(dict(_pairs(changed))):
            db.execute(
                "UPDATE partitions SET log_start_offset = local_log_start_offset, remote_max_timestamp = -1 "
                "WHERE topic_id = ? AND log_start_offset < local_log_start_offset",
                (changed.topic_id,),
            )

    def describe(self, changed: rec.TopicConfigsChanged, names: RecordNames) -> RecordDescription:
        topics, topic_id = names.topic_names(changed.topic_id), changed.topic_id.hex()
        pairs = _pairs(changed)
        set_here = ", ".join(f"{name}={value}" for name, value in pairs) or "every one at its default"
        return RecordDescription(
            f"topic configs changed: {', '.join(topics) or 'name unknown'} (topic id {topic_id}): {set_here}",
            {"topic_id": topic_id, "topics": topics, "configs": dict(pairs)},
        )
