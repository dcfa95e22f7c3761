"""The naming pattern of WAL objects (what brokers write and what the orphan scan looks for).

A WAL object's key is `<prefix>wal/<xx>/<uuid>.wal`: `<uuid>` is a random
UUID as 32 lowercase hex digits and `<xx>` its first two, so that keys spread
evenly over 256 fan-out prefixes that a scan lists in parallel. `<prefix>` is
`diskless.storage.s3.prefix` on S3 and empty on the local backend.
"""

from __future__ import annotations

import uuid

# Matched in full against the key after the storage prefix (the orphan scan's default pattern).
WAL_KEY_PATTERN = r"wal/[0-9a-f]{2}/[0-9a-f]{32}\.wal"
WAL_FANOUT_DIGITS = 2


def new_wal_key(prefix: str = "", file_uuid: uuid.UUID | None = None) -> str:
    """A fresh WAL object key under `prefix`."""
    name = (file_uuid or uuid.uuid4()).hex
    return f"{prefix}wal/{name[:WAL_FANOUT_DIGITS]}/{name}.wal"


def wal_fanout_prefixes(prefix: str = "") -> list[str]:
    """The 256 key prefixes WAL objects are spread over, in key order."""
    return [f"{prefix}wal/{i:02x}/" for i in range(16**WAL_FANOUT_DIGITS)]
