"""A topic's configurations on one coordinator: a change checked against what this coordinator holds, then recorded
(DESIGN §4a); with nothing to change, a read.

The node checks a change against its catalog first (`coordinator.topics.rules`), but a node's catalog may trail the
coordinators' leaders (it follows its own replicas): a coordinator decides again on its own view, and its record
carries the result computed there, so a change never undoes one the catalog had not seen yet, and KIP-950's check
always reads the configuration it replaces. Run by the leader's pipeline, the answer also comes only once every
record before it is applied: a read here sees every change acknowledged before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine import records
from coordinator.machine.view import CoordinatorView
from coordinator.topics.topic_configs import ConfigDefaults, altered


@dataclass(frozen=True, slots=True)
class TopicConfigsChange:
    topic_id: bytes
    set_pairs: tuple[tuple[str, str], ...] = ()  # (name, value as given)
    delete: tuple[str, ...] = ()
    validate_only: bool = False  # check and answer the result; record nothing
    # The node's defaults, for the checks between values on the resulting configuration (local.retention.* against
    # retention.*): given with a change, never with a read, which answers what is set whatever the defaults now.
    defaults: ConfigDefaults | None = None
    # Compare-and-set (coordinator.topics.config_admin): the configuration this coordinator must hold for the change
    # to apply, as (name, value) pairs; None: whatever it holds. With it, `set_pairs` is the whole configuration to
    # hold instead, decided and checked on the owner's by the node (a part, or the put-back of one).
    expected: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True, slots=True)
class ConfigsOutcome:
    error_code: ErrorCode  # UNKNOWN_TOPIC_OR_PARTITION: no partition of the topic here
    message: str
    configs: Mapping[str, str]  # the configurations set on the topic here afterwards (on an error: unchanged)


CHANGED_MEANWHILE = "the topic's configuration was changed by another call meanwhile; retry"


def not_here(topic_id: bytes) -> ConfigsOutcome:
    return ConfigsOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic id {topic_id.hex()} is unknown", {})


def check_topic_configs(view: CoordinatorView, change: TopicConfigsChange, now_ms: int) -> Result[ConfigsOutcome]:
    """Records the topic's configurations after the change; nothing when it fails, changes nothing or only checks."""
    if not view.partitions_of_topic(change.topic_id):
        return Result([], not_here(change.topic_id))
    current = view.topic_configs(change.topic_id)
    if change.expected is not None and dict(current) != dict(change.expected):
        return Result([], ConfigsOutcome(ErrorCode.COORDINATOR_NOT_AVAILABLE, CHANGED_MEANWHILE, dict(current)))
    changing = bool(change.set_pairs or change.delete)  # else a read: what is set, whatever the defaults are now
    if change.expected is not None:  # values parsed again (canonical), the whole configuration replaced
        result = altered({}, change.set_pairs, (), None)
    else:
        result = altered(current, change.set_pairs, change.delete, change.defaults if changing else None)
    if isinstance(result, ItemError):
        return Result([], ConfigsOutcome(result.error_code, result.message, dict(current)))
    unchanged = change.validate_only or result == current
    written = [] if unchanged else [records.topic_configs_changed(change.topic_id, result)]
    return Result(written, ConfigsOutcome(ErrorCode.NONE, "", result))
