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
from tests.lanes import sized

LONGS = ("retention.ms", "retention.bytes")
LOCAL_LONGS = ("local.retention.ms", "local.retention.bytes")  # KIP-405: at least -2 (-2: as retention.*)
BOOLEANS = ("remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable")


# ---------------------------------------------------------------- the model: the contract's comment, read literally


def model_value(name: str, text: str) -> str | None:
    """The canonical value, or None when Kafka refuses it."""
    if name in LONGS or name in LOCAL_LONGS:
        stripped = text.strip()
        digits = stripped[1:] if stripped[:1] in "+-" else stripped
        if not digits or not all(c in "0123456789" for c in digits):
            return None
        value = int(stripped)
        return str(value) if (-2 if name in LOCAL_LONGS else -1) <= value < 2**63 else None
    if name in BOOLEANS:
        lowered = text.strip().lower()
        return lowered if lowered in ("true", "false") else None
    return None  # an unknown name


def model_retentions_agree(after: Mapping[str, str], defaults: ConfigDefaults) -> bool:
    """KIP-405 and KIP-950 as their texts say, checked only with remote storage on: a local limit is -2 (as
    retention.*) or, under a retention limit, one no larger and not -1; with copies disabled, -2 or retention's."""
    if after.get("remote.storage.enable") != "true":
        return True
    for kind, node_value in (("ms", defaults.retention_ms), ("bytes", defaults.retention_bytes)):
        retention = int(after.get(f"retention.{kind}", node_value))
        local = int(after.get(f"local.retention.{kind}", "-2"))
        if retention != -1 and local != -2 and (local == -1 or local > retention):
            return False
        if after.get("remote.log.copy.disable") == "true" and local not in (-2, retention):
            return False
    return True


def model_alter(
    current: Mapping[str, str], set_pairs: list[tuple[str, str]], delete: list[str], defaults: ConfigDefaults
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
    if not model_retentions_agree(after, defaults):
        return ErrorCode.INVALID_CONFIG, dict(current)
    return ErrorCode.NONE, after


names = st.sampled_from([*NAMES, "cleanup.policy", "retention.MS", ""])
texts = st.one_of(
    st.sampled_from(["true", "FALSE", " True ", "yes", "0", "-1", "-2", "+5", " 42 ", "1000", "500", "1_000",
                     "9223372036854775807", "9223372036854775808", "", "1e3", "٣"]),
    st.integers(min_value=-3, max_value=10**6).map(str),
)  # fmt: skip
changes = st.tuples(st.lists(st.tuples(names, texts), max_size=4), st.lists(names, max_size=2))


@settings(max_examples=sized(400, 100), deadline=None)
@given(st.lists(changes, min_size=1, max_size=12), st.sampled_from([(-1, -1), (1000, 500), (42, 5)]))
def test_a_sequence_of_changes_follows_the_model_and_a_refused_one_changes_nothing(
    steps: list[tuple[list[tuple[str, str]], list[str]]], node_retention: tuple[int, int]
) -> None:
    defaults = ConfigDefaults(*node_retention)
    current: dict[str, str] = {}
    for set_pairs, delete in steps:
        want_code, want = model_alter(current, set_pairs, delete, defaults)
        got = altered(current, set_pairs, delete, defaults)
        if isinstance(got, ItemError):
            assert got.error_code == want_code != ErrorCode.NONE, (set_pairs, delete, got)
            assert got.message
        else:
            assert want_code == ErrorCode.NONE and got == want, (set_pairs, delete, got, want)
            # KIP-950: remote storage never goes from on to off while the remote data would be kept.
            if current.get("remote.storage.enable") == "true" and got.get("remote.storage.enable") != "true":
                assert got.get("remote.log.delete.on.disable") == "true"
            current = got
        assert set(current) <= set(NAMES) and model_retentions_agree(current, defaults)


@settings(max_examples=sized(200, 50), deadline=None)
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


def test_local_retention_is_kip_405s_and_kip_950_wants_it_as_retention_while_copies_are_disabled() -> None:
    node = ConfigDefaults(retention_ms=1000, retention_bytes=-1)
    entries = {e.name: (e.value, e.is_default) for e in config_entries({}, node)}
    assert entries["local.retention.ms"] == entries["local.retention.bytes"] == ("-2", True)
    assert effective_configs({}, node).local_retention_ms == -2
    below = altered({}, [("local.retention.ms", "-3")], [], node)
    assert isinstance(below, ItemError) and "Value must be at least -2" in below.message

    def refused(current: dict[str, str], pairs: list[tuple[str, str]]) -> str:
        result = altered(current, pairs, [], node)
        assert isinstance(result, ItemError) and result.error_code == ErrorCode.INVALID_CONFIG, result
        created = configs_at_creation([*current.items(), *pairs], node)
        assert created == result  # a new topic's configuration is checked as a change's result
        return result.message

    on = {"remote.storage.enable": "true"}
    # KIP-405 (remote storage on): under a retention limit (the node's 1000 ms here), never -1 nor above it.
    assert refused(on, [("local.retention.ms", "-1")]) == (
        "Invalid value -1 for configuration local.retention.ms: "
        "Value must not be -1 as retention.ms value is set as 1000."
    )
    assert "Value must not be more than retention.ms property value: 1000" in refused(
        on, [("local.retention.ms", "1001")]
    )
    assert altered(on, [("local.retention.ms", "500")], [], node) == {**on, "local.retention.ms": "500"}
    assert altered(on, [("local.retention.bytes", "-1")], [], node) == {**on, "local.retention.bytes": "-1"}  # no limit
    # KIP-950: copies disabled → each local limit -2 or equal to retention's.
    assert "`local.retention.ms` and `retention.ms` must be set to the identical value" in refused(
        {**on, "local.retention.ms": "500"}, [("remote.log.copy.disable", "true")]
    )
    assert "`local.retention.bytes` and `retention.bytes` must be set to the identical value" in refused(
        {**on, "retention.bytes": "100", "local.retention.bytes": "50"}, [("remote.log.copy.disable", "true")]
    )
    copy_off = {**on, "remote.log.copy.disable": "true"}
    assert altered(copy_off, [("local.retention.ms", "1000")], [], node) == {**copy_off, "local.retention.ms": "1000"}
    assert altered({**copy_off, "local.retention.ms": "1000"}, [], ["local.retention.ms"], node) == copy_off
    # As Kafka, nothing relates the values while remote storage is off; and a read (no defaults) checks nothing.
    off = {"remote.log.copy.disable": "true", "local.retention.ms": "5"}
    assert altered({}, list(off.items()), [], node) == off
    assert altered({**on, "local.retention.ms": "5000"}, [], [], None) == {**on, "local.retention.ms": "5000"}


def test_the_node_defaults_are_minus_one_or_more() -> None:
    assert Settings().log_retention_ms == Settings().log_retention_bytes == -1
    assert ConfigDefaults.from_settings(Settings().with_overrides({"diskless.log.retention.ms": "604800000"})) == (
        ConfigDefaults(604800000, -1)
    )
    for name in ("diskless.log.retention.ms", "diskless.log.retention.bytes"):
        with pytest.raises(SettingsError, match=name):
            validated(Settings().with_overrides({name: "-2"}))
