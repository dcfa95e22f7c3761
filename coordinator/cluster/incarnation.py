"""A node's incarnation (Kafka's KIP-903 broker epoch, KIP-966's clean-or-not): which data directory it runs on and
how many times it started on it, so that the ISR can tell the replica it knew from one that lost its disk.

`<data dir>/node.incarnation` holds the directory's random id and its start count, with a CRC-32. Each start reads
it (the previous incarnation; "" when the file is missing or damaged: an emptied directory, a new one, or one we
cannot vouch for) and writes the next durably before the node registers. An emptied directory holds none, so it is
never taken for the replica that was in sync.

A directory restored from a copy, or rolled back, may have lost acknowledged records; KIP-966 makes such a log a new
replica. A copy taken while the node ran holds the very incarnation the ISR recorded, so the file also holds a mark,
`<directory id>.<generation>`, that moves on at each start, every `diskless.node.incarnation.mark.interval.ms` and at
a clean stop: written durably here first, then recorded in etcd (a key of the node's own, outliving its session).
At the next start, a directory whose mark is behind the one etcd recorded went back in time: it starts as a new
directory (a new id, no previous incarnation), which every ISR takes for a new replica. The file may be one mark
ahead of etcd (a stop between the two writes), never behind. A copy taken less than one interval before the node
crashed cannot be told from the crash itself.
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
    mark: str = ""  # "<directory id>.<generation>" as written at this start, for etcd to record


def _text(directory_id: str, starts: int) -> str:
    return f"{directory_id}.{starts}"


def _checked_text(directory_id: str, starts: int, generation: int | None) -> str:
    """What the CRC-32 covers (a file of before marks has no generation)."""
    base = _text(directory_id, starts)
    return base if generation is None else f"{base}.{generation}"


def _read_all(path: Path) -> tuple[str, int, int] | None:
    """(directory id, starts, generation) from the file; None when it is missing, or damaged (logged)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(raw)
        directory_id, starts, crc = str(value["directory_id"]), int(value["starts"]), int(value["crc32"])
        generation = int(value["generation"]) if "generation" in value else None
        if crc != zlib.crc32(_checked_text(directory_id, starts, generation).encode()) or starts < 0:
            raise ValueError(f"CRC-32 {crc} does not match its content")
    except (ValueError, KeyError, TypeError) as error:
        log.warning("%s is damaged (%s): this node starts as a new incarnation", path, error)
        return None
    return directory_id, starts, generation or 0


def _read(path: Path) -> tuple[str, int] | None:
    """(directory id, starts) from the file; None when it is missing, or damaged (logged)."""
    found = _read_all(path)
    return None if found is None else (found[0], found[1])


def mark_of(directory_id: str, generation: int) -> str:
    return f"{directory_id}.{generation}"


def went_back(directory_id: str, generation: int, recorded_mark: str) -> bool:
    """Whether the directory holds an earlier mark of itself than etcd recorded: restored from a copy, rolled back."""
    recorded_id, _, recorded_generation = recorded_mark.rpartition(".")
    return recorded_id == directory_id and recorded_generation.isdigit() and generation < int(recorded_generation)


def _write(path: Path, directory_id: str, starts: int, generation: int) -> None:
    content = {"directory_id": directory_id, "starts": starts, "generation": generation,
               "crc32": zlib.crc32(_checked_text(directory_id, starts, generation).encode())}  # fmt: skip
    write_durably(path, json.dumps(content).encode())


def next_incarnation(data_dir: Path, recorded_mark: str = "") -> Incarnation:
    """Reads the previous incarnation and durably writes this start's (a new directory id when none was read, or
    when the directory went back behind `recorded_mark`, the mark etcd last recorded for this node)."""
    path = data_dir / FILE_NAME
    found = _read_all(path)
    if found is not None and went_back(found[0], found[2], recorded_mark):
        log.warning(
            "%s holds mark %s, behind the %s etcd recorded: the directory was restored from a copy or rolled back, "
            "and may have lost acknowledged records: this node starts as a new replica (KIP-966)",
            path, mark_of(found[0], found[2]), recorded_mark,
        )  # fmt: skip
        found = None
    directory_id, starts, generation = found if found is not None else (uuid.uuid4().hex, 0, 0)
    previous = _text(directory_id, starts) if found is not None else ""
    current = _text(directory_id, starts + 1)
    data_dir.mkdir(parents=True, exist_ok=True)
    _write(path, directory_id, starts + 1, generation + 1)
    return Incarnation(previous, current, mark_of(directory_id, generation + 1))


def next_mark(data_dir: Path, incarnation: Incarnation) -> str:
    """Moves the directory's mark on, durably, and returns it (for etcd to record after). The file is this run's:
    its directory id and starts are the incarnation's."""
    directory_id, _, generation = incarnation.mark.rpartition(".")
    path = data_dir / FILE_NAME
    found = _read_all(path)
    current = found[2] if found is not None and found[0] == directory_id else int(generation)
    starts = int(incarnation.current.rpartition(".")[2])
    _write(path, directory_id, starts, current + 1)
    return mark_of(directory_id, current + 1)
