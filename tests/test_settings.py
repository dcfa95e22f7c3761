from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.config.loading import load_settings, read_properties
from coordinator.config.rules import validated
from coordinator.config.settings import Settings, SettingsError


def test_properties_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "node.properties"
    path.write_text("# comment\n! also a comment\n\ndiskless.node.id = 3\ndiskless.listen: 127.0.0.1:9\n")
    assert read_properties(path) == {"diskless.node.id": "3", "diskless.listen": "127.0.0.1:9"}


def test_precedence_defaults_file_environment_flags(tmp_path: Path) -> None:
    path = tmp_path / "node.properties"
    path.write_text("diskless.node.id=1\ndiskless.coordinator.queue.max.operations=10\ndiskless.listen=127.0.0.1:1\n")
    settings = load_settings(
        path,
        {"diskless.listen": "127.0.0.1:2", "diskless.metadata.topic.num.partitions": None},
        {"DISKLESS_NODE_ID": "2", "DISKLESS_LISTEN": "127.0.0.1:3"},
    )
    assert settings.node_id == 2
    assert settings.queue_max_operations == 10
    assert settings.listen == "127.0.0.1:2"
    assert settings.coordinators == Settings().coordinators


@pytest.mark.parametrize(
    "overrides",
    [
        {"diskless.metadata.topic.num.partitions": "0"},
        {"diskless.coordinator.request.timeout.ms": "999999", "diskless.coordinator.request.timeout.max.ms": "1000"},
        {"diskless.coordinator.log.segment.bytes": "100"},
        {"diskless.node.id": "-1"},
        {"diskless.listen": "127.0.0.1:99999"},
        {"diskless.coordinator.producer.id.expiration.ms": "0"},
        {"diskless.coordinator.producer.id.expiration.check.interval.ms": "-5"},
        {"diskless.coordinator.producer.id.expiration.batch.max": "0"},
        {"diskless.coordinator.producer.id.expiration.batch.max": "100001"},
    ],
)
def test_nonsense_is_refused_with_the_setting_named(overrides: dict[str, str]) -> None:
    with pytest.raises(SettingsError) as refused:
        validated(Settings().with_overrides(overrides))
    assert any(name in str(refused.value) for name in overrides)


def test_docs_settings_is_the_generated_table() -> None:
    repository = Path(__file__).resolve().parent.parent
    generated = subprocess.run(
        [sys.executable, "-m", "coordinator", "settings", "--markdown"],
        cwd=repository, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert (repository / "docs" / "settings.md").read_text() == generated, (
        "docs/settings.md is stale: regenerate it with `diskless settings --markdown > docs/settings.md`"
    )


def test_the_table_lists_every_setting_with_its_default() -> None:
    from coordinator.config.settings import describe_settings

    table = (Path(__file__).resolve().parent.parent / "docs" / "settings.md").read_text()
    for name, default, doc in describe_settings():
        assert f"| `{name}` | `{default}` | {doc} |" in table, f"docs/settings.md is stale for {name}"


def test_booleans_are_true_or_false() -> None:
    assert Settings().with_overrides({"diskless.coordinator.pipeline.enable": "false"}).pipeline_enable is False
    with pytest.raises(SettingsError):
        Settings().with_overrides({"diskless.coordinator.pipeline.enable": "maybe"})


def test_a_retired_setting_is_ignored_with_a_warning_and_a_typo_is_still_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A properties file written for an earlier release starts the node; a name never known does not."""
    from coordinator.config.settings import RETIRED_SETTINGS

    retired = "diskless.coordinator.snapshot.retry.backoff.max.ms"
    assert retired in RETIRED_SETTINGS
    with caplog.at_level("WARNING"):
        assert Settings().with_overrides({retired: "5000"}) == Settings()
    assert retired in caplog.text and "no longer used" in caplog.text
    with pytest.raises(SettingsError, match="unknown setting"):
        Settings().with_overrides({"diskless.coordinator.snapshot.retry.backof.max.ms": "5000"})
    known = {f.metadata["name"] for f in dataclasses.fields(Settings)}
    assert not known & set(RETIRED_SETTINGS), "a retired name must not be a setting again"
