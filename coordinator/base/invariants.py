"""Always-on invariant checks (a bare `assert` vanishes under `python -O`)."""

from __future__ import annotations


class InvariantViolation(AssertionError):
    """A broken invariant: the shard fails and reloads from SQLite plus the log."""


def check_invariant(condition: bool, message: str) -> None:
    """Raises InvariantViolation with `message` (which should carry the values) when false."""
    if not condition:
        raise InvariantViolation(message)
