"""Fault points: named steps of the product code where a test can make the process fail, or hold it there.

Product code calls `reach(step)` at each step a crash test must be able to stop at; it does nothing
unless a test installed a hook. Only tests install one, in the process they start
(tests/crashing_serve.py ends the process at a step named on its command line; a test of an in-process
node may hold a step until it lets it go): nothing in the environment or the settings turns a fault
point on.
"""

from __future__ import annotations

from collections.abc import Callable

# Every step that product code reaches, with where it is.
STEPS = {
    "snapshot.copy": "a snapshot's copy, after its first step",
    "snapshot.before_rename": "a snapshot's files written and fsynced, not renamed",
    "snapshot.after_rename": "a snapshot renamed into place, the log not pruned",
    "prune.midway": "pruning, one log segment deleted and the rest not",
    "handover.after_peer": "a WAL-file hand-over the receiver recorded and the sender did not",
    "log.append": "a group of checked operations about to be written to the metadata log, on the writer's thread",
}

Hook = Callable[[str], None]
_hook: Hook | None = None


def reach(step: str) -> None:
    """Passes `step`: the installed hook sees it (and may end the process); without one, nothing happens."""
    hook = _hook
    if hook is not None:
        if step not in STEPS:
            raise AssertionError(f"fault point {step!r} is not in fault_points.STEPS")
        hook(step)


def install(hook: Hook | None) -> None:
    """Sets the hook every `reach` calls (None: none). For tests only."""
    global _hook
    _hook = hook
