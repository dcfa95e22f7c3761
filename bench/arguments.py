"""Flags the standalone benchmarks share."""

from __future__ import annotations

import argparse
from collections.abc import Iterable


def node_settings(parser: argparse.ArgumentParser, pairs: Iterable[str], base: dict[str, str]) -> dict[str, str]:
    """`base` with each `--set NAME=VALUE` over it; a pair without `=` is the parser's usage error (exit 2)."""
    settings = dict(base)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"--set takes NAME=VALUE, got {pair!r}")
        settings[name] = value
    return settings
