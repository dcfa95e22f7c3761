"""How a setting is declared: a dataclass field carrying its Kafka-style name and meaning (`settings.py`)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

STATE_VERIFY_MODES = ("unclean", "always", "never")


def setting(name: str, default: Any, doc: str) -> Any:
    return field(default=default, metadata={"name": name, "doc": doc})
