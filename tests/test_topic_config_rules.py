"""The topic configurations' rules (coordinator/topics/topic_configs.py, DESIGN §4a): Kafka's parsing, defaults and
checks, against a small model under hypothesis-generated changes."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError
from coordinator.config.rules import validated
from coordinator.config.settings import Settings, SettingsError
from coordinator.topics.topic_configs import (
    NAMES,
    TURNING_OFF_WITHOUT_DELETE,
    ConfigDefaults,
    altered,
    config_entries,
    configs_at_creation,
    effective_configs,
)

LONGS = ("retention.ms", "retention.bytes")
BOOLEANS = ("remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable")


# ---------------------------------------------------------------- the model: the contract's comment, read literally


def model_value(name: str, text: str) -> str | None:
    """The canonical value, or None when Kafka refuses it."""
    if name in LONGS:
        stripped = text.strip()
        digits = stripped[1:] if stripped[:1] in "+-" else stripped
        if not digits or not all(c in "0123456789" for c in digits):
            return None
        value = int(stripped)
        return str(value) if -1 <= value < 2**63 else None
    if name in BOOLEANS:
        lowered = text.strip().lower()
        return lowered if lowered in ("true", "false") else None
    return None  # an unknown name


def model_alter(
    current: Mapping[str, str], set_pairs: list[tuple[str, str]], delete: list[str]
) -> tuple[int, dict[str, str]]:
    names = [n for n, _ in set_pairs] + delete
    if len(names) != len(set(names)):
        return ErrorCode.INVALID_REQUEST, dict(current)
    if any(name not in NAMES for name in delete):
        return ErrorCode.INVALID_CONFIG, dict(current)
    after = {n: v for n, v in current.items() if n not in delete}
    for name, text in set_pairs:
        value = model_value(name, text)
        if value is None:
            return ErrorCode.INVALID_CONFIG, dict(current)
        after[name] = value
    was_on = current.get("remote.storage.enable") == "true"
    if was_on and after.get("remote.storage.enable") != "true" and after.get("remote.log.delete.on.disable") != "true":
        return ErrorCode.INVALID_CONFIG, dict(current)
    return ErrorCode.NONE, after


names = st.sampled_from([*NAMES, "cleanup.policy", "retention.MS", ""])
texts = st.one_of(
    st.sampled_from(["true", "FALSE", " True ", "yes", "0", "-1", "-2", "+5", " 42 ", "1_000", "9223372036854775807",
                     "9223372036854775808", "", "1e3", "٣"]),
    st.integers(min_value=-3, max_value=10**6).map(str),
)  # fmt: skip
changes = st.tuples(st.lists(st.tuples(names, texts), max_size=4), st.lists(names, max_size=2))


@settings(max_examples=400, deadline=None)
@given(st.lists(changes, min_size=1, max_size=12))
def test_a_sequence_of_changes_follows_the_model_and_a_refused_one_changes_nothing(
    steps: list[tuple[list[tuple[str, str]], list[str]]],
) -> None:
    current: dict[str, str] = {}
    for set_pairs, delete in steps:
        want_code, want = model_alter(current, set_pairs, delete)
        got = altered(current, set_pairs, delete)
        if isinstance(got, ItemError):
            assert got.error_code == want_code != ErrorCode.NONE, (set_pairs, delete, got)
            assert got.message
        else:
            assert want_code == ErrorCode.NONE and got == want, (set_pairs, delete, got, want)
            # KIP-950: remote storage never goes from on to off while the remote data would be kept.
            if current.get("remote.storage.enable") == "true" and got.get("remote.storage.enable") != "true":
                assert got.get("remote.log.delete.on.disable") == "true"
            current = got
        assert set(current) <= set(NAMES)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES), st.booleans()), st.integers(-1, 10**9), st.integers(-1, 10**9))
def test_effective_values_are_the_topics_own_else_the_defaults(
    flags: dict[str, bool], retention_ms: int, node_ms: int
) -> None:
    stored = {name: str(flag).lower() for name, flag in flags.items() if name in BOOLEANS}
    stored["retention.ms"] = str(retention_ms)
    defaults = ConfigDefaults(retention_ms=node_ms, retention_bytes=123)
    effective = effective_configs(stored, defaults)
    assert effective.retention_ms == retention_ms and effective.retention_bytes == 123
    assert effective.remote_storage_enable == (stored.get("remote.storage.enable") == "true")
    assert effective.tiering_on == (effective.remote_storage_enable and not effective.remote_log_copy_disable)
    entries = config_entries(stored, defaults)
    assert [e.name for e in entries] == sorted(NAMES)
    assert {e.name for e in entries if not e.is_default} == set(stored)
    assert {e.name: e.value for e in entries}["retention.bytes"] == "123"


# ---------------------------------------------------------------- Kafka's cases, one by one


def test_values_are_parsed_as_kafka_parses_them_and_stored_canonical() -> None:
    assert altered({}, [("retention.ms", " +60000 "), ("remote.storage.enable", "TRUE")], []) == {
        "retention.ms": "60000",
        "remote.storage.enable": "true",
    }


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("retention.ms", "abc", "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
        ("retention.bytes", "-2", "Invalid value -2 for configuration retention.bytes: Value must be at least -1"),
        ("retention.ms", "9223372036854775808", "Not a number of type LONG"),
        ("remote.storage.enable", "yes", "Expected value to be either true or false"),
        ("segment.bytes", "1024", "Unknown topic config name: segment.bytes"),
    ],
)
def test_a_bad_value_or_an_unknown_name_is_invalid_config_with_kafkas_message(
    name: str, value: str, message: str
) -> None:
    for result in (altered({}, [(name, value)], []), configs_at_creation([(name, value)])):
        assert isinstance(result, ItemError) and result.error_code == ErrorCode.INVALID_CONFIG
        assert message in result.message


def test_a_name_twice_in_one_change_is_invalid_request() -> None:
    twice = altered({}, [("retention.ms", "1")], ["retention.ms"])
    assert isinstance(twice, ItemError) and twice.error_code == ErrorCode.INVALID_REQUEST
    created = configs_at_creation([("retention.ms", "1"), ("retention.ms", "2")])
    assert isinstance(created, ItemError) and created.error_code == ErrorCode.INVALID_REQUEST


def test_deleting_a_name_puts_it_back_to_its_default_and_an_unknown_one_is_refused() -> None:
    assert altered({"retention.ms": "5"}, [], ["retention.ms"]) == {}
    unknown = altered({"retention.ms": "5"}, [], ["retention.hours"])
    assert isinstance(unknown, ItemError) and unknown.error_code == ErrorCode.INVALID_CONFIG


def test_kip_950_turning_remote_storage_off_needs_delete_on_disable_in_the_result() -> None:
    on = {"remote.storage.enable": "true"}
    refused = altered(on, [("remote.storage.enable", "false")], [])
    assert refused == ItemError(ErrorCode.INVALID_CONFIG, TURNING_OFF_WITHOUT_DELETE)
    assert isinstance(altered(on, [], ["remote.storage.enable"]), ItemError)  # back to the default, false: the same
    assert altered(on, [("remote.storage.enable", "false"), ("remote.log.delete.on.disable", "true")], []) == {
        "remote.storage.enable": "false",
        "remote.log.delete.on.disable": "true",
    }
    # Set earlier counts too: the check reads the resulting configuration.
    ready = {**on, "remote.log.delete.on.disable": "true"}
    assert altered(ready, [("remote.storage.enable", "false")], []) == {
        "remote.storage.enable": "false",
        "remote.log.delete.on.disable": "true",
    }
    # Copies disabled ("retain") is no disablement; and a topic never enabled may say false.
    assert altered(on, [("remote.log.copy.disable", "true")], []) == {**on, "remote.log.copy.disable": "true"}
    assert altered({}, [("remote.storage.enable", "false")], []) == {"remote.storage.enable": "false"}


def test_the_node_defaults_are_minus_one_or_more() -> None:
    assert Settings().log_retention_ms == Settings().log_retention_bytes == -1
    assert ConfigDefaults.from_settings(Settings().with_overrides({"diskless.log.retention.ms": "604800000"})) == (
        ConfigDefaults(604800000, -1)
    )
    for name in ("diskless.log.retention.ms", "diskless.log.retention.bytes"):
        with pytest.raises(SettingsError, match=name):
            validated(Settings().with_overrides({name: "-2"}))
