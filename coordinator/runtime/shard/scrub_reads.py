"""What one scrub pass reads (TigerBeetle's grid scrubber): every byte a coordinator keeps at rest, verified.

A read verifies what it reads, but some bytes are read only on a bad day: a sealed log segment below the applied
offset (read again only by a replay or a follower far behind), an older snapshot (read only when a restore skips
the newer one), a page of the state no query touches. Damage there waits, unreported, until the day it is
needed. A pass reads them all, in steps of at most `step_bytes` each, so that its caller paces it (a rate bound)
and runs each step off the event loop; memory is one step, plus one log frame split across two steps.

- Sealed log segments (all but the newest, which the writer appends to and a load reads whole): every frame's
  CRC, each frame continuing the offsets of the one before, the segment ending where the next one starts.
- Snapshots: the data file's size and CRC-32 against its manifest. The CRC covers every byte, so a flipped bit
  anywhere fails it; the pages' own checksums were verified when the copy read the state.
- The state: every page of `state.sqlite` read through the checksum VFS as SQLite reads a database file
  (`apsw.VFSFile`: apsw's SQLite has no `sqlite_dbpage`), so each page's cksumvfs checksum is verified; a
  mismatch is read again a moment later before it counts (a checkpoint may be writing that page). Every page of
  the file carries a valid checksum at any time, whether or not a newer copy is in the WAL. The WAL itself is
  not scrubbed: each of its committed pages is read and verified by the next checkpoint (at most
  `diskless.coordinator.state.checkpoint.pages` later), and a WAL a crash left is checked whole at load.

A step yields what it read and at most one finding; the pass goes on to the next file after a finding.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw

from coordinator.machine.state.reads import StateDamaged
from coordinator.runtime.log.damage import CorruptLogError, find_damage
from coordinator.runtime.log.frame import HEADER_BYTES, decode_frame
from coordinator.runtime.log.segment_files import segment_bases, segment_name
from coordinator.runtime.shard.loading import is_state_damage
from snapshot import page_checksums
from snapshot.manifests import manifest_path
from snapshot.snapshots import SnapshotManifest, list_snapshots, snapshot_directory

LOG = "log segment"
SNAPSHOT = "snapshot"
STATE = "state"
_HEADER_BYTES = 100  # SQLite's database header, its page size at bytes 16-17
_REREAD_DELAY_S = 0.01


@dataclass(frozen=True, slots=True)
class ScrubFinding:
    """Damage a pass found: in what kind of file, where, and the error a read meeting it would have raised."""

    kind: str  # LOG, SNAPSHOT or STATE
    path: Path
    problem: str
    error: Exception  # CorruptLogError (a log segment), StateDamaged (the state), or the snapshot's mismatch
    manifest: SnapshotManifest | None = None  # the damaged snapshot's


@dataclass(frozen=True, slots=True)
class ScrubStep:
    read_bytes: int
    finding: ScrubFinding | None = None


def scrub_pass(directory: Path, step_bytes: int, checksums: bool = True) -> Generator[ScrubStep, None, None]:
    """One pass over a coordinator's directory, step by step (blocking: call `next` off the event loop)."""
    log_directory = directory / "log"
    bases = segment_bases(log_directory) if log_directory.is_dir() else []
    for index, base in enumerate(bases[:-1]):
        yield from _segment(log_directory, base, bases[index + 1], step_bytes)
    for manifest in list_snapshots(snapshot_directory(directory)):
        yield from _snapshot(manifest, step_bytes)
    state = directory / "state.sqlite"
    if checksums and state.exists():
        yield from _state(state, step_bytes)


# ---------------------------------------------------------------------- log segments


def _segment(log_directory: Path, base: int, next_base: int, step_bytes: int) -> Iterator[ScrubStep]:
    """A sealed segment's frames, walked across steps: a frame split between two steps waits for the second."""
    path = log_directory / segment_name(base)
    try:
        file = open(path, "rb")  # noqa: SIM115 (held across the steps, closed below)
    except FileNotFoundError:
        return  # pruned since the pass listed it
    with file:
        pending = b""
        consumed = 0  # bytes of the segment before `pending`
        expected = base
        while chunk := file.read(step_bytes):
            pending += chunk
            position = 0
            while True:
                decoded = decode_frame(pending, position)
                if decoded is None or decoded[0].base_offset != expected:
                    break
                frame, position = decoded
                expected = frame.end_offset
            if decoded is not None or _complete(pending, position):  # a whole frame there, and it is wrong
                yield ScrubStep(len(chunk), _log_damage(log_directory, path, consumed + position, expected))
                return
            pending, consumed = pending[position:], consumed + position
            yield ScrubStep(len(chunk))
        if pending or expected != next_base:  # bytes that are no frame at the end, or offsets missing
            yield ScrubStep(0, _log_damage(log_directory, path, consumed, expected))


def _complete(buffer: bytes, position: int) -> bool:
    """Whether the bytes from `position` hold as much as the frame there says it takes (else: read on)."""
    if position + HEADER_BYTES > len(buffer):
        return False
    length = int.from_bytes(buffer[position : position + 4], "little")
    return position + 4 + length <= len(buffer)


def _log_damage(log_directory: Path, path: Path, position: int, expected: int) -> ScrubFinding | None:
    """The damage as a read meeting it describes it (the segment read again whole); None if the segment is no
    longer a sealed one (pruned, or the log truncated back into it meanwhile)."""
    bases = segment_bases(log_directory)
    base = int(path.name.removesuffix(".log"))
    if base not in bases or base == bases[-1]:
        return None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    damage = find_damage(path, data, position, expected)
    where = (
        f"{damage.segment_path}, byte {damage.byte_position} of {damage.segment_size_bytes}, where log offset "
        f"{damage.expected_offset} was expected: {damage.problem}"
    )
    return ScrubFinding(LOG, path, where, CorruptLogError(damage.describe(), damage))


# ---------------------------------------------------------------------- snapshots


def _snapshot(manifest: SnapshotManifest, step_bytes: int) -> Iterator[ScrubStep]:
    path = manifest.data_path
    try:
        file = open(path, "rb")  # noqa: SIM115 (held across the steps, closed below)
    except FileNotFoundError:
        problem: str | None = f"{path}: missing"
        size = crc = 0
    else:
        size, crc = 0, 0
        with file:
            while chunk := file.read(step_bytes):
                size, crc = size + len(chunk), zlib.crc32(chunk, crc)
                yield ScrubStep(len(chunk))
        problem = None
        if size != manifest.size_bytes:
            problem = f"{path}: {size} bytes, the manifest says {manifest.size_bytes}"
        elif crc != manifest.crc32:
            problem = f"{path}: CRC-32 {crc:08x}, the manifest says {manifest.crc32:08x}"
    if problem is not None and manifest_file(manifest).exists():  # not pruned meanwhile
        yield ScrubStep(0, ScrubFinding(SNAPSHOT, path, problem, ValueError(problem), manifest))


def manifest_file(manifest: SnapshotManifest) -> Path:
    return manifest_path(manifest.data_path.parent, manifest.snapshot_id)


# ---------------------------------------------------------------------- the state


def _state(path: Path, step_bytes: int) -> Iterator[ScrubStep]:
    """Every page of the file, a step's worth at a time, each step through a file handle of its own (a rebuild
    may replace the file between steps; the caller keeps a step and a reload apart)."""
    page = 0
    while True:
        try:
            pages, page_size, problem = _state_pages(path, page, step_bytes)
        except (apsw.Error, OSError):
            return  # gone or replaced meanwhile (not damage): the next pass reads the new one
        if problem is not None:
            finding = ScrubFinding(STATE, path, problem, StateDamaged(f"the scrub read {problem}"))
            yield ScrubStep(pages * page_size, finding)
            return
        if pages == 0:
            return
        yield ScrubStep(pages * page_size)
        page += pages


def _open_pages(path: Path) -> tuple[apsw.VFSFile, int]:
    """The file through the checksum VFS, as SQLite opens a database, with its page size; page 1 read whole first
    (verified, and it tells the VFS that the file's pages carry checksums)."""
    file = apsw.VFSFile(
        page_checksums.vfs_name(True), str(path), [apsw.SQLITE_OPEN_MAIN_DB | apsw.SQLITE_OPEN_READONLY, 0]
    )
    size = int.from_bytes(file.xRead(_HEADER_BYTES, 0)[16:18], "big")
    page_size = 65536 if size == 1 else size
    file.xRead(page_size, 0)
    return file, page_size


def _state_pages(path: Path, first_page: int, step_bytes: int) -> tuple[int, int, str | None]:
    """Reads pages from `first_page` (0-based) for about `step_bytes`: (pages read, page size, the damage met).

    A page that fails its checksum is read again through a new handle before it counts as damage: the state's
    checkpoint may be writing that very page, and a read racing a write may see half of each."""
    try:
        file, page_size = _open_pages(path)
    except apsw.Error as error:
        if is_state_damage(error) and is_state_damage(_read_again(path, 0)):
            return 0, 0, f"{type(error).__name__}: {error}"
        raise
    try:
        end = min(file.xFileSize() // page_size, first_page + max(1, step_bytes // page_size))
        for page in range(first_page, end):
            try:
                file.xRead(page_size, page * page_size)
            except apsw.Error as error:
                if not is_state_damage(error) or not is_state_damage(_read_again(path, page)):
                    raise
                return page - first_page, page_size, f"{type(error).__name__}: {error}"
        return max(0, end - first_page), page_size, None
    finally:
        file.xClose()


def _read_again(path: Path, page: int) -> BaseException:
    """The same page read again a moment later through a new handle: what it raises (an empty Exception if the
    page now verifies)."""
    time.sleep(_REREAD_DELAY_S)
    try:
        file, page_size = _open_pages(path)
        try:
            file.xRead(page_size, page * page_size)
        finally:
            file.xClose()
    except apsw.Error as error:
        return error
    return Exception()
