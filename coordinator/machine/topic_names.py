"""Topic identity rules shared by every RPC (Kafka's naming and UUID rules)."""

from __future__ import annotations

import re
import zlib

TOPIC_ID_BYTES = 16
TOPIC_NAME_MAX_CHARS = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def topic_id_problem(topic_id: bytes) -> str | None:
    """Why a topic id is malformed (INVALID_REQUEST), or None when it is a valid UUID."""
    if len(topic_id) != TOPIC_ID_BYTES:
        return f"topic_id must be {TOPIC_ID_BYTES} bytes, got {len(topic_id)}"
    if not any(topic_id):
        return "topic_id must not be all zeros"
    return None


def topic_name_problem(name: str) -> str | None:
    """Why a topic name breaks Kafka's rules (INVALID_TOPIC_EXCEPTION), or None."""
    if not name:
        return "topic name must not be empty"
    if len(name) > TOPIC_NAME_MAX_CHARS:
        return f"topic name is {len(name)} characters, more than {TOPIC_NAME_MAX_CHARS}"
    if name in (".", ".."):
        return f"topic name must not be {name!r}"
    if not _LEGAL_NAME.fullmatch(name):
        return f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
    return None


def first_coordinator_of(topic_id: bytes, coordinators: int) -> int:
    """The coordinator of partition 0; partition p goes to the (p)th one after it.

    Used only when a partition is created: the assignment is then stored, never
    recomputed, so the coordinator count may change later.
    """
    return zlib.crc32(topic_id) % coordinators


def coordinator_for_new_partition(topic_id: bytes, partition: int, coordinators: int) -> int:
    return (first_coordinator_of(topic_id, coordinators) + partition) % coordinators
