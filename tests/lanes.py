"""Which lane runs, for the tests that size their random examples or simulated steps by it.

The fast lane (`pytest -n 2 -m "not slow"`, about a minute) runs every rule's test, the randomized ones with fewer
examples or steps; the whole suite (the README's test command, CI) runs them at full size. tests/conftest.py sets
`FAST` when pytest starts, before any test module is imported, so module-level sizes may read it.
"""

from __future__ import annotations

import re

FAST = False


def is_fast_lane(mark_expression: str) -> bool:
    """The fast lane is any run whose `-m` expression leaves the slow tests out."""
    return re.search(r"\bnot\s+slow\b", mark_expression) is not None


def sized(whole: int, fast: int) -> int:
    """`whole` in the whole suite, `fast` in the fast lane (where a test's rule must still show at that size)."""
    assert 0 < fast <= whole, (fast, whole)
    return fast if FAST else whole
