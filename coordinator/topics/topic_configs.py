"""Topic configurations (DESIGN §4a): Kafka's names, parsing, defaults and checks, as pure functions.

A topic holds only the configurations set on it (`StoredConfigs`: name -> value in canonical form); every other
name is at its default, which for retention is the node's setting, read when it is used (as a Kafka topic without
an override follows the broker's `log.retention.ms`). What a coordinator records is the stored map, so replay
never depends on the node's settings; what other code acts on is `effective_configs`, the one way to read a
topic's values.

Kafka's rules, as its `LogConfig` has them: a long is `Long.parseLong` of the trimmed text, a boolean `true` or
`false` in any case; an unknown name or a bad value is INVALID_CONFIG with Kafka's message; a name given twice in
one change is INVALID_REQUEST (Kafka's "duplicate config keys"); turning `remote.storage.enable` from true to false
needs `remote.log.delete.on.disable=true` in the resulting configuration (KIP-950). `local.retention.ms` and
`local.retention.bytes` (KIP-405; -2, the default: as `retention.*`) are checked on the resulting configuration, its
unset names at their defaults, as Kafka's `LogConfig.validateTopicLogConfigValues` checks them when remote storage
is enabled: with a `retention.*` limit (not -1), the local one is -2 or a limit no larger (never -1,
`validateRemoteStorageRetentionSize/Time`); with `remote.log.copy.disable=true`, the local one is -2 or equal to
`retention.*` (KIP-950, `validateRetentionConfigsWhenRemoteCopyDisabled`). A change that fails changes nothing.

The coordinator's own retention reads `retention.*` only: Kafka applies local retention to local segments already
copied to remote storage, and a batch the copier offloads (CommitRemoteLogSegments) leaves the coordinator at once,
so no copied batch is left here for a local limit to remove; with copies disabled, KIP-950's check makes the local
limits those of `retention.*` (or -2, the same).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import final

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError
from coordinator.config.settings import Settings

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
LOCAL_RETENTION_MS = "local.retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"
LOCAL_AS_RETENTION = -2  # Kafka's default of local.retention.*: the value of retention.*
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
REMOTE_LOG_COPY_DISABLE = "remote.log.copy.disable"
REMOTE_LOG_DELETE_ON_DISABLE = "remote.log.delete.on.disable"

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_LONG = re.compile(r"[+-]?[0-9]+")  # Long.parseLong: an optional sign and ASCII digits (after Kafka's trim)

StoredConfigs = Mapping[str, str]  # the configurations set on a topic: name -> canonical value
ConfigPairs = Sequence[tuple[str, str]]  # (name, value) as a request gives them


class ConfigProblem(ValueError):
    """A value that does not parse or is out of range; the message is Kafka's."""


@final
@dataclass(frozen=True, slots=True)
class ConfigDefaults:
    """What a name not set on a topic is worth: the node's settings (DESIGN §4a), Kafka's defaults otherwise."""

    retention_ms: int = -1
    retention_bytes: int = -1

    @classmethod
    def from_settings(cls, settings: Settings) -> ConfigDefaults:
        return cls(settings.log_retention_ms, settings.log_retention_bytes)


@final
@dataclass(frozen=True, slots=True)
class TopicConfigs:
    """A topic's effective configuration: its own values where set, the defaults elsewhere."""

    retention_ms: int  # -1: no time limit
    retention_bytes: int  # per partition; -1: no size limit
    remote_storage_enable: bool
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool
    local_retention_ms: int = LOCAL_AS_RETENTION  # -2: as retention_ms
    local_retention_bytes: int = LOCAL_AS_RETENTION  # -2: as retention_bytes

    @property
    def tiering_on(self) -> bool:
        """Offloads to remote storage are allowed (DESIGN §4a: enabled and copies not disabled)."""
        return self.remote_storage_enable and not self.remote_log_copy_disable


@final
@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool


def _parse_long(name: str, text: str, at_least: int) -> str:
    trimmed = text.strip()
    if not _LONG.fullmatch(trimmed) or not LONG_MIN <= int(trimmed) <= LONG_MAX:
        raise ConfigProblem(f"Invalid value {text} for configuration {name}: Not a number of type LONG")
    value = int(trimmed)
    if value < at_least:
        raise ConfigProblem(f"Invalid value {value} for configuration {name}: Value must be at least {at_least}")
    return str(value)


def _parse_boolean(name: str, text: str) -> str:
    trimmed = text.strip().lower()
    if trimmed not in ("true", "false"):
        raise ConfigProblem(f"Invalid value {text} for configuration {name}: Expected value to be either true or false")
    return trimmed


@final
@dataclass(frozen=True, slots=True)
class _Known:
    canonical: Callable[[str, str], str]  # (name, text) -> canonical value, or ConfigProblem
    default: Callable[[ConfigDefaults], str]


KNOWN: Mapping[str, _Known] = {
    RETENTION_MS: _Known(lambda n, t: _parse_long(n, t, -1), lambda d: str(d.retention_ms)),
    RETENTION_BYTES: _Known(lambda n, t: _parse_long(n, t, -1), lambda d: str(d.retention_bytes)),
    LOCAL_RETENTION_MS: _Known(lambda n, t: _parse_long(n, t, LOCAL_AS_RETENTION), lambda d: str(LOCAL_AS_RETENTION)),
    LOCAL_RETENTION_BYTES: _Known(
        lambda n, t: _parse_long(n, t, LOCAL_AS_RETENTION), lambda d: str(LOCAL_AS_RETENTION)
    ),
    REMOTE_STORAGE_ENABLE: _Known(_parse_boolean, lambda d: "false"),
    REMOTE_LOG_COPY_DISABLE: _Known(_parse_boolean, lambda d: "false"),
    REMOTE_LOG_DELETE_ON_DISABLE: _Known(_parse_boolean, lambda d: "false"),
}
NAMES = tuple(sorted(KNOWN))

# Kafka's refusal of KIP-950's case (LogConfig.validateTurningOffRemoteStorageWithDelete).
TURNING_OFF_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data and "
    f"turn to read only, please set `{REMOTE_LOG_COPY_DISABLE}=true`. If you want to disable remote storage and "
    f"delete all remote data, please set `{REMOTE_STORAGE_ENABLE}=false,{REMOTE_LOG_DELETE_ON_DISABLE}=true`."
)


def canonical_value(name: str, text: str) -> str:
    """The value as stored and described (a long in decimal, a boolean in lower case); ConfigProblem if bad."""
    known = KNOWN.get(name)
    if known is None:
        raise ConfigProblem(f"Unknown topic config name: {name}")
    return known.canonical(name, text)


def _invalid(message: str) -> ItemError:
    return ItemError(ErrorCode.INVALID_CONFIG, message)


def _duplicates(names: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    repeated: list[str] = []
    for name in names:
        if name in seen and name not in repeated:
            repeated.append(name)
        seen.add(name)
    return repeated


def _set_all(stored: dict[str, str], pairs: ConfigPairs) -> ItemError | None:
    for name, text in pairs:
        try:
            stored[name] = canonical_value(name, text)
        except ConfigProblem as problem:
            return _invalid(str(problem))
    return None


def configs_at_creation(pairs: ConfigPairs, defaults: ConfigDefaults | None = None) -> ItemError | dict[str, str]:
    """A new topic's stored configurations (CreatePartitions' `configs`), or the topic's error. With `defaults` (the
    node's), the relations between values are checked too (`retention_problem`)."""
    repeated = _duplicates(name for name, _ in pairs)
    if repeated:
        return ItemError(ErrorCode.INVALID_REQUEST, f"duplicate config keys: {', '.join(repeated)}")
    stored: dict[str, str] = {}
    problem = _set_all(stored, pairs)
    if problem is None and defaults is not None:
        problem = retention_problem(stored, defaults)
    return problem if problem is not None else stored


def altered(
    current: StoredConfigs, set_pairs: ConfigPairs, delete: Sequence[str], defaults: ConfigDefaults | None = None
) -> ItemError | dict[str, str]:
    """The stored configurations after AlterTopicConfigs' `set` and `delete` on `current`, or the topic's error.

    Nothing of `current` changes on an error: the result is a new map. With `defaults` (the node's), the relations
    between the resulting values are checked too (`retention_problem`): only a check on the topic's own current
    configuration may pass them, never one on a part of it.
    """
    repeated = _duplicates([*(name for name, _ in set_pairs), *delete])
    if repeated:
        return ItemError(ErrorCode.INVALID_REQUEST, f"duplicate config keys: {', '.join(repeated)}")
    unknown = [name for name in delete if name not in KNOWN]
    if unknown:
        return _invalid(f"Unknown topic config name: {unknown[0]}")
    result = {name: value for name, value in current.items() if name not in delete}
    problem = _set_all(result, set_pairs)
    if problem is not None:
        return problem
    if _remote_storage_turned_off_without_delete(current, result):
        return _invalid(TURNING_OFF_WITHOUT_DELETE)
    relation = None if defaults is None else retention_problem(result, defaults)
    return relation if relation is not None else result


def copy_disabled_needs_identical(kind: str) -> str:
    """Kafka's refusal of a local retention other than retention's while copies are disabled (KIP-950)."""
    return (
        f"When `{REMOTE_LOG_COPY_DISABLE}` is set to true, the `local.retention.{kind}` and `retention.{kind}` must be "
        "set to the identical value because there will be no more logs copied to the remote storage."
    )


def retention_problem(stored: StoredConfigs, defaults: ConfigDefaults) -> ItemError | None:
    """Kafka's checks of local.retention.* against retention.* on a resulting configuration (see the module's
    comment); none while remote storage is off, as Kafka checks them only then."""
    configs = effective_configs(stored, defaults)
    if not configs.remote_storage_enable:
        return None
    limits = (
        (LOCAL_RETENTION_BYTES, RETENTION_BYTES, configs.local_retention_bytes, configs.retention_bytes, "bytes"),
        (LOCAL_RETENTION_MS, RETENTION_MS, configs.local_retention_ms, configs.retention_ms, "ms"),
    )
    for local_name, name, local, limit, _ in limits:
        if limit == -1 or local == LOCAL_AS_RETENTION:
            continue
        if local == -1:
            return _invalid(
                f"Invalid value {local} for configuration {local_name}: Value must not be -1 as {name} value is set "
                f"as {limit}."
            )
        if local > limit:
            return _invalid(
                f"Invalid value {local} for configuration {local_name}: Value must not be more than {name} property "
                f"value: {limit}"
            )
    if configs.remote_log_copy_disable:
        for _, _, local, limit, kind in limits:
            if local not in (LOCAL_AS_RETENTION, limit):
                return _invalid(copy_disabled_needs_identical(kind))
    return None


def _flag(stored: StoredConfigs, name: str) -> bool:
    return stored.get(name, "false") == "true"


def _remote_storage_turned_off_without_delete(before: StoredConfigs, after: StoredConfigs) -> bool:
    """KIP-950: remote storage goes from on to off while the resulting configuration keeps the remote data."""
    return (
        _flag(before, REMOTE_STORAGE_ENABLE)
        and not _flag(after, REMOTE_STORAGE_ENABLE)
        and not _flag(after, REMOTE_LOG_DELETE_ON_DISABLE)
    )


def effective_configs(stored: StoredConfigs, defaults: ConfigDefaults) -> TopicConfigs:
    """The values a topic's rules act on (retention, tiering): the one way other code reads a configuration."""

    def value(name: str) -> str:
        found = stored.get(name)
        return found if found is not None else KNOWN[name].default(defaults)

    return TopicConfigs(
        retention_ms=int(value(RETENTION_MS)),
        retention_bytes=int(value(RETENTION_BYTES)),
        remote_storage_enable=value(REMOTE_STORAGE_ENABLE) == "true",
        remote_log_copy_disable=value(REMOTE_LOG_COPY_DISABLE) == "true",
        remote_log_delete_on_disable=value(REMOTE_LOG_DELETE_ON_DISABLE) == "true",
        local_retention_ms=int(value(LOCAL_RETENTION_MS)),
        local_retention_bytes=int(value(LOCAL_RETENTION_BYTES)),
    )


def config_entries(stored: StoredConfigs, defaults: ConfigDefaults) -> list[ConfigEntry]:
    """Every known configuration, sorted by name, as DescribeTopicConfigs answers."""
    return [
        ConfigEntry(name, stored[name], False)
        if name in stored
        else ConfigEntry(name, KNOWN[name].default(defaults), True)
        for name in NAMES
    ]
