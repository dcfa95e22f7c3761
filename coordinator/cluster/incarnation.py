"""A node's incarnation (Kafka's KIP-903 broker epoch, KIP-966's clean-or-not): which data directory it runs on and
how many times it started on it, so that the ISR can tell the replica it knew from one that lost its disk.

`<data dir>/node.incarnation` holds the directory's random id and its start count, with a CRC-32. Each start reads
it (the previous incarnation; "" when the file is missing or damaged: an emptied directory, a new one, or one we
cannot vouch for) and writes the next durably before the node registers. A restored backup holds an earlier count
than the ISR recorded, an emptied directory none: neither is taken for the replica that was in sync.
"""

from __future__ import annotations

import json
import logging
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from snapshot.durable_files import write_durably

log = logging.getLogger(__name__)
FILE_NAME = "node.incarnation"


@dataclass(frozen=True, slots=True)
class Incarnation:
    previous: str  # the incarnation the directory held; "" when none could be read
    current: str  # this start's


def _text(directory_id: str, starts: int) -> str:
    return f"{directory_id}.{starts}"


def _read(path: Path) -> tuple[str, int] | None:
    """(directory id, starts) from the file; None when it is missing, or damaged (logged)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(raw)
        directory_id, starts, crc = str(value["directory_id"]), int(value["starts"]), int(value["crc32"])
        if crc != zlib.crc32(_text(directory_id, starts).encode()) or starts < 0:
            raise ValueError(f"CRC-32 {crc} does not match its content")
    except (ValueError, KeyError, TypeError) as error:
        log.warning("%s is damaged (%s): this node starts as a new incarnation", path, error)
        return None
    return directory_id, starts


def next_incarnation(data_dir: Path) -> Incarnation:
    """Reads the previous incarnation and durably writes this start's (a new directory id when none was read)."""
    path = data_dir / FILE_NAME
    found = _read(path)
    directory_id, starts = found if found is not None else (uuid.uuid4().hex, 0)
    previous = _text(directory_id, starts) if found is not None else ""
    current = _text(directory_id, starts + 1)
    data_dir.mkdir(parents=True, exist_ok=True)
    content = {"directory_id": directory_id, "starts": starts + 1,
               "crc32": zlib.crc32(current.encode())}  # fmt: skip
    write_durably(path, json.dumps(content).encode())
    return Incarnation(previous, current)
