"""A damaged replica's files, set aside for the operator before it repairs from a healthy replica (DESIGN §6a),
and a damaged snapshot the scrub found (scrubber.py).

Evidence is never deleted on the spot (SQLite's corruption guidance: keep the damaged file for analysis): the
coordinator's log, state, snapshots and checkpoints move into `damaged-<ms>/` inside its directory, one rename
each, and the directory is then empty for a fresh replica. Only the newest
`diskless.coordinator.damaged.retained.count` such folders are kept, so a disk that keeps failing cannot fill up.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from snapshot.durable_files import fsync_directory

log = logging.getLogger(__name__)

DAMAGED_PREFIX = "damaged-"
_DAMAGED = re.compile(r"^damaged-(\d+)(?:-(\d+))?$")
_KEPT_IN_PLACE = frozenset({"lock"})  # the directory lock the running node holds


def damaged_folders(directory: Path) -> list[Path]:
    """The folders of damaged files in a coordinator's directory, oldest first."""
    found = []
    for path in directory.iterdir() if directory.is_dir() else ():
        match = _DAMAGED.match(path.name)
        if match is not None and path.is_dir():
            found.append(((int(match.group(1)), int(match.group(2) or 0)), path))
    return [path for _, path in sorted(found)]


def set_aside(directory: Path, now_ms: int, keep: int) -> Path:
    """Moves every file of the coordinator's directory (but its lock and earlier folders) into `damaged-<now_ms>/`,
    then deletes the oldest folders past `keep`; returns the new folder (blocking: on the coordinator's thread)."""
    target = directory / f"{DAMAGED_PREFIX}{now_ms}"
    suffix = 0
    while target.exists():  # two repairs in one millisecond of a simulated clock
        suffix += 1
        target = directory / f"{DAMAGED_PREFIX}{now_ms}-{suffix}"
    target.mkdir()
    for path in sorted(directory.iterdir()):
        if path.name in _KEPT_IN_PLACE or path == target or _DAMAGED.match(path.name):
            continue
        path.rename(target / path.name)
    fsync_directory(target)
    fsync_directory(directory)
    for old in damaged_folders(directory)[: -max(keep, 1)]:
        log.warning("%s: deleting %s, past the %d folders of damaged files kept", directory, old.name, keep)
        shutil.rmtree(old, ignore_errors=True)
    return target


def set_snapshot_aside(directory: Path, snapshot_files: list[Path], now_ms: int, keep: int) -> Path:
    """Moves a damaged snapshot's files (data first: a manifest left alone verifies as missing and is skipped)
    into `damaged-<now_ms>/`, so that no restore tries it again; returns the folder (blocking)."""
    target = directory / f"{DAMAGED_PREFIX}{now_ms}"
    suffix = 0
    while target.exists():
        suffix += 1
        target = directory / f"{DAMAGED_PREFIX}{now_ms}-{suffix}"
    target.mkdir()
    for path in snapshot_files:
        if path.exists():
            path.rename(target / path.name)
    fsync_directory(target)
    for parent in {path.parent for path in snapshot_files}:
        fsync_directory(parent)
    fsync_directory(directory)
    for old in damaged_folders(directory)[: -max(keep, 1)]:
        log.warning("%s: deleting %s, past the %d folders of damaged files kept", directory, old.name, keep)
        shutil.rmtree(old, ignore_errors=True)
    return target
