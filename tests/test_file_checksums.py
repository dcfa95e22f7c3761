"""Every small file the node reads back carries its own checksum: any one flipped bit is caught (issue #29, item 1).

Each file is flipped at every bit, one at a time: the reader either refuses it (and the caller does what
docs/design.md's table says: rebuild, skip, start as new) or reads exactly what was written, never a
different value. The SQLite state, its WAL and the log have their own tests (test_page_checksums.py,
test_log_damage*.py); the sweep over every kind of file of a loaded node is tests/test_storage_fault_sweep.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from coordinator.cluster import incarnation
from coordinator.runtime.log.epoch_cache import EpochEntry, _decode, _encode
from snapshot.manifests import MANIFEST_FORMAT, read_manifest
from snapshot.snapshots import (
    SnapshotError,
    SnapshotId,
    SnapshotManifest,
    list_snapshots,
    upgrade_manifests,
)

T = TypeVar("T")


def every_flip(content: bytes) -> list[bytes]:
    flipped = []
    for offset in range(len(content)):
        for bit in range(8):
            changed = bytearray(content)
            changed[offset] ^= 1 << bit
            flipped.append(bytes(changed))
    return flipped


def outcomes(content: bytes, read: Callable[[bytes], T | None], expected: T) -> tuple[int, int]:
    """(refused, read as written) over every one-bit flip of `content`; fails on a flip read as something else."""
    refused = same = 0
    for changed in every_flip(content):
        value = read(changed)
        if value is None:
            refused += 1
        else:
            assert value == expected, f"a flipped bit read as {value!r}, written {expected!r}: {changed!r}"
            same += 1
    return refused, same


def manifest(directory: Path) -> SnapshotManifest:
    snapshot_id = SnapshotId(1234, 7)
    data = directory / f"{snapshot_id.name}.sqlite"
    return SnapshotManifest(snapshot_id, 3, 57344, 0x1A2B3C4D, 1234, 1_700_000_000_123, data)


def test_a_flipped_bit_in_a_snapshot_manifest_is_refused_never_read_as_other_values(tmp_path: Path) -> None:
    written = manifest(tmp_path)
    path = tmp_path / f"{written.snapshot_id.name}.manifest"

    def read(content: bytes) -> SnapshotManifest | None:
        path.write_bytes(content)
        try:
            return read_manifest(path)
        except SnapshotError:
            return None

    refused, same = outcomes(written.encode(), read, written)
    assert refused > 0.95 * (refused + same), (refused, same)  # a flip in JSON's spacing changes nothing
    path.write_bytes(written.encode())
    assert list_snapshots(tmp_path) == [written]


def test_a_manifest_of_format_1_is_read_once_and_upgraded_at_load(tmp_path: Path) -> None:
    written = manifest(tmp_path)
    path = tmp_path / f"{written.snapshot_id.name}.manifest"
    path.write_text(json.dumps({**written.to_json(), "format": 1}))  # as written before format 2
    assert list_snapshots(tmp_path) == [written]
    assert upgrade_manifests(tmp_path) == [path]
    assert json.loads(path.read_bytes())["format"] == MANIFEST_FORMAT
    assert "manifest_crc32" in json.loads(path.read_bytes())
    assert list_snapshots(tmp_path) == [written]
    assert upgrade_manifests(tmp_path) == [], "once"


def test_a_flipped_bit_in_a_leader_epoch_checkpoint_is_refused_never_read_as_other_entries() -> None:
    written = [EpochEntry(1, 0), EpochEntry(3, 120), EpochEntry(12, 4000)]

    def read(content: bytes) -> list[EpochEntry] | None:
        try:
            return _decode(content)
        except (ValueError, UnicodeDecodeError):
            return None

    refused, same = outcomes(_encode(written), read, written)
    assert refused > 0.95 * (refused + same), (refused, same)  # a flip in the trailing newline changes nothing


def test_a_flipped_bit_in_the_incarnation_file_starts_a_new_incarnation_never_another_one(tmp_path: Path) -> None:
    first = incarnation.next_incarnation(tmp_path)
    path = tmp_path / incarnation.FILE_NAME
    content = path.read_bytes()
    directory_id, starts = first.current.split(".")

    def read(changed: bytes) -> tuple[str, int] | None:
        path.write_bytes(changed)
        return incarnation._read(path)

    refused, same = outcomes(content, read, (directory_id, int(starts)))
    assert refused > 0.95 * (refused + same), (refused, same)
