"""The naming pattern of WAL objects (what brokers write and what the orphan scan looks for).

A WAL object's key is `<prefix>wal/<xx>/<uuid>.wal`: `<uuid>` is a random
UUID as 32 lowercase hex digits and `<xx>` its first two, so that keys spread
evenly over 256 fan-out prefixes that a scan lists in parallel. `<prefix>` is
`diskless.storage.s3.prefix` on S3 and empty on the local backend.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

# Matched in full against the key after the storage prefix (the orphan scan's default pattern).
WAL_KEY_PATTERN = r"wal/[0-9a-f]{2}/[0-9a-f]{32}\.wal"
WAL_FANOUT_DIGITS = 2
OBJECT_KEY_MAX_BYTES = 1024
WRITE_AHEAD_MULTI_SEGMENT = 1  # the one object format CommitFile and ReplaceBatches accept (the contract's)


def new_wal_key(prefix: str = "", file_uuid: uuid.UUID | None = None) -> str:
    """A fresh WAL object key under `prefix`."""
    name = (file_uuid or uuid.uuid4()).hex
    return f"{prefix}wal/{name[:WAL_FANOUT_DIGITS]}/{name}.wal"


def wal_fanout_prefixes(prefix: str = "") -> list[str]:
    """The 256 key prefixes WAL objects are spread over, in key order."""
    return [f"{prefix}wal/{i:02x}/" for i in range(16**WAL_FANOUT_DIGITS)]


def key_problem(key: str) -> str | None:
    """Why `key` cannot name an object in either backend, or None.

    Keys are relative, '/'-separated paths: nothing a local root could be
    escaped with, nothing S3 and a filesystem would read differently.
    """
    if not key:
        return "object key must not be empty"
    if key.startswith("/"):
        return f"object key {key!r} must be relative (no leading '/')"
    if "\\" in key or "\x00" in key:
        return f"object key {key!r} must not contain '\\' or NUL"
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"object key {key!r} must not have empty, '.' or '..' path segments"
    return None


def object_key_problem(object_key: str) -> str | None:
    size = len(object_key.encode("utf-8"))
    if not 1 <= size <= OBJECT_KEY_MAX_BYTES:
        return f"object_key must be 1..{OBJECT_KEY_MAX_BYTES} bytes, got {size}"
    # The coordinator deletes the object one day: the key must name one object in either backend.
    return key_problem(object_key)


def uploaded_object_problem(
    object_key: str,
    object_format: int,
    file_size: int,
    uploader_broker_id: int,
    owner_ids: Sequence[int],
    coordinators: int,
) -> str | None:
    """Why an uploaded object as a CommitFile or a ReplaceBatches names it cannot be taken (the whole call is then
    INVALID_REQUEST), or None: its key, format, size, uploader and owners (coordinators 0..`coordinators` - 1)."""
    problem = object_key_problem(object_key)
    if problem:
        return problem
    if object_format != WRITE_AHEAD_MULTI_SEGMENT:
        return f"object_format must be {WRITE_AHEAD_MULTI_SEGMENT} (WRITE_AHEAD_MULTI_SEGMENT), got {object_format}"
    if file_size <= 0:
        return f"file_size must be > 0, got {file_size}"
    if uploader_broker_id < 0:
        return f"uploader_broker_id must be >= 0, got {uploader_broker_id}"
    owners = list(owner_ids)
    if not owners:
        return "owner_ids must not be empty"
    if len(set(owners)) != len(owners):
        return f"owner_ids must not repeat a coordinator: {owners}"
    foreign = [o for o in owners if not 0 <= o < coordinators]
    if foreign:
        return f"owner_ids {foreign} are not coordinators (0..{coordinators - 1})"
    return None
