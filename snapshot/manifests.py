"""A snapshot's name and manifest (DESIGN §6; `snapshots.py` takes, lists, verifies and restores them).

Named as in KRaft (KIP-630) by its end offset and the epoch of its last record. The manifest is JSON (id, size,
CRC-32, applied offset) and since format 2 carries `manifest_crc32`, the CRC-32 of its other fields: a flipped bit
in a manifest is caught, never taken for another size, offset or checksum. A format-1 manifest is read once at the
coordinator's load and rewritten as format 2 (`upgrade_manifests`).
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from snapshot.durable_files import write_durably

log = logging.getLogger(__name__)

DATA_SUFFIX = ".sqlite"
MANIFEST_SUFFIX = ".manifest"
MANIFEST_FORMAT = 2
MANIFEST_FORMATS_READ = (1, 2)  # 1: written before manifests had their own checksum, upgraded at load
_NAME = re.compile(r"^(\d{20})-(\d{10})$")


class SnapshotError(Exception):
    """A snapshot cannot be taken or used; the message says which and why."""


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    end_offset: int  # exclusive: the first log offset the snapshot does not hold
    epoch: int  # leader epoch of the last record it holds

    @property
    def name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}"

    @classmethod
    def parse(cls, text: str) -> SnapshotId:
        """From a file stem (`00000000000000001234-0000000003`) or `END-EPOCH` (`1234-3`)."""
        end, separator, epoch = text.partition("-")
        if not separator or not end.isdigit() or not epoch.isdigit():
            raise SnapshotError(f"a snapshot id is END_OFFSET-EPOCH, got {text!r}")
        return cls(int(end), int(epoch))

    def __str__(self) -> str:
        return f"{self.end_offset}-{self.epoch}"


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    snapshot_id: SnapshotId
    coordinator_id: int
    size_bytes: int
    crc32: int
    applied_offset: int  # read inside the copy's read transaction; equals the end offset
    created_at_ms: int
    data_path: Path

    def to_json(self) -> dict[str, object]:
        return {
            "format": MANIFEST_FORMAT,
            "end_offset": self.snapshot_id.end_offset,
            "epoch": self.snapshot_id.epoch,
            "coordinator_id": self.coordinator_id,
            "size_bytes": self.size_bytes,
            "crc32": f"{self.crc32:08x}",
            "applied_offset": self.applied_offset,
            "created_at_ms": self.created_at_ms,
        }

    def encode(self) -> bytes:
        """The manifest's bytes: its fields, then the CRC-32 of their canonical form."""
        fields = self.to_json()
        return json.dumps({**fields, "manifest_crc32": f"{_fields_crc32(fields):08x}"}).encode()


def _fields_crc32(fields: dict[str, object]) -> int:
    """CRC-32 of a manifest's fields (all but `manifest_crc32`) in one canonical form, whatever the spacing."""
    return zlib.crc32(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())


def manifest_path(directory: Path, snapshot_id: SnapshotId) -> Path:
    return directory / f"{snapshot_id.name}{MANIFEST_SUFFIX}"


def data_path(directory: Path, snapshot_id: SnapshotId) -> Path:
    return directory / f"{snapshot_id.name}{DATA_SUFFIX}"


def read_manifest(path: Path) -> SnapshotManifest:
    stem = path.name[: -len(MANIFEST_SUFFIX)]
    if not _NAME.match(stem):
        raise SnapshotError(f"{path}: not a snapshot manifest name")
    snapshot_id = SnapshotId.parse(stem)
    try:
        fields = json.loads(path.read_bytes())
        if not isinstance(fields, dict):
            raise ValueError("not a JSON object")
        manifest_format = fields.get("format")
        if manifest_format == MANIFEST_FORMAT:
            stored = int(fields.pop("manifest_crc32"), 16)
            if stored != _fields_crc32(fields):
                raise ValueError(f"its CRC-32 {stored:08x} does not match its fields ({_fields_crc32(fields):08x})")
        manifest = SnapshotManifest(
            SnapshotId(int(fields["end_offset"]), int(fields["epoch"])),
            int(fields["coordinator_id"]),
            int(fields["size_bytes"]),
            int(fields["crc32"], 16),
            int(fields["applied_offset"]),
            int(fields["created_at_ms"]),
            data_path(path.parent, snapshot_id),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise SnapshotError(f"{path}: unreadable manifest: {error}") from error
    if manifest_format not in MANIFEST_FORMATS_READ or manifest.snapshot_id != snapshot_id:
        raise SnapshotError(f"{path}: format {manifest_format} of snapshot {manifest.snapshot_id}")
    if manifest.applied_offset != snapshot_id.end_offset:
        raise SnapshotError(f"{path}: applied offset {manifest.applied_offset}, its name says {snapshot_id}")
    return manifest


def upgrade_manifests(directory: Path) -> list[Path]:
    """Rewrites the format-1 manifests in `directory` as format 2 (with their own CRC-32); at load, under the lock.

    A format-1 manifest has no checksum of its own: it is read as it is this once (its data file's size and
    CRC-32 still verify the data), the way a state without page checksums is converted once.
    """
    upgraded = []
    for path in sorted(directory.glob(f"*{MANIFEST_SUFFIX}")) if directory.is_dir() else ():
        try:
            if json.loads(path.read_bytes()).get("format") != 1:
                continue
            manifest = read_manifest(path)
        except (SnapshotError, OSError, ValueError, AttributeError):
            continue  # unreadable: list_snapshots skips it and says so
        write_durably(path, manifest.encode())
        upgraded.append(path)
    if upgraded:
        log.info("%s: %d snapshot manifests upgraded to format %d", directory, len(upgraded), MANIFEST_FORMAT)
    return upgraded
