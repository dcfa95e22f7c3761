"""A node's settings as it starts: defaults, then the properties file, the environment and the flags, then checked."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinator.config.rules import validated
from coordinator.config.settings import Settings, SettingsError


def read_properties(path: Path) -> dict[str, str]:
    """Parses a Java-style properties file (`name=value` or `name: value`, `#`/`!` comments)."""
    result: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        separators = [i for i in (text.find("="), text.find(":")) if i > 0]
        if not separators:
            raise SettingsError(f"{path}:{number}: expected name=value, got {text!r}")
        cut = min(separators)
        result[text[:cut].strip()] = text[cut + 1 :].strip()
    return result


def environment_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """Settings given as environment variables (DISKLESS_...)."""
    result = {}
    for f in dataclasses.fields(Settings):
        variable = f.metadata["name"].upper().replace(".", "_")
        if variable in environ:
            result[f.metadata["name"]] = environ[variable]
    return result


def load_settings(config: Path | None, flags: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
    """Defaults, then the properties file, then the environment, then flags (by property name)."""
    settings = Settings()
    if config is not None:
        settings = settings.with_overrides(read_properties(config))
    settings = settings.with_overrides(environment_overrides(os.environ if environ is None else environ))
    settings = settings.with_overrides({k: v for k, v in flags.items() if v is not None})
    return validated(settings)
