"""The local backend: a directory as object store, keys as '/'-separated paths under it."""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Iterator, Sequence
from typing import final

from coordinator.files.object_store.base import (
    DELETE_BATCH_MAX,
    DeleteOutcome,
    ObjectInfo,
    ObjectStoreError,
    StoreConfig,
)
from coordinator.machine.object_keys import key_problem
from snapshot.durable_files import flush_and_fsync, fsync_directory

# Temporary files of `put` start with this: no WAL key can, and `list` skips them.
TEMP_PREFIX = ".tmp-"
# A concurrent cleanup may remove a parent between its creation and the write of the temp file.
PUT_ATTEMPTS_MAX = 5


@final
class LocalObjectStore:
    """Objects are files under `config.local_root`; a put is atomic and durable once it returns.

    The root is created at open only with `config.create_root` (the embedded default under the
    data dir); a root of its own is like a bucket, it must exist, since creating a root
    that is missing because its volume is away would turn every object into "already
    deleted". A root that is missing makes every call
    raise ObjectStoreError (a volume away), so that missing objects are never mistaken
    for deleted; a call also fails if the root is replaced while it runs. A root that is
    back, or replaced between calls (a volume mounted again over a directory made while
    it was away), is taken as it is found by the next call.
    Empty directories are left in place: WAL keys use a bounded set of fan-out
    directories, and removing them would only make puts race with deletes.
    """

    def __init__(self, config: StoreConfig) -> None:
        if not config.local_root:
            raise ValueError("the local object store needs a root directory")
        self.config = config
        self._root = os.path.abspath(config.local_root)
        self._root_identity = (-1, -1)
        if config.create_root:
            try:
                os.makedirs(self._root, exist_ok=True)
            except OSError as error:
                raise ObjectStoreError(f"cannot create local object store root {self._root}: {error}") from error

    @property
    def root(self) -> str:
        return self._root

    def put(self, key: str, data: bytes) -> None:
        segments = self._segments(key)
        self._pin_root()
        parent = os.path.join(self._root, *segments[:-1])
        for _ in range(PUT_ATTEMPTS_MAX):
            try:
                self._make_directories(segments[:-1])
                temp_path = _write_temp_file(parent, data)
            except FileNotFoundError:
                # A parent vanished under us: an outage if it was the root, else a concurrent cleanup.
                self._check_root()
                continue
            except OSError as error:
                raise self._error("put", key, error) from error
            try:
                os.replace(temp_path, os.path.join(parent, segments[-1]))
                fsync_directory(parent)
            except OSError as error:
                _unlink_quietly(temp_path)
                raise self._error("put", key, error) from error
            return
        raise ObjectStoreError(f"put of {key!r} in {self._root}: its directory kept disappearing")

    def head(self, key: str) -> ObjectInfo | None:
        path = os.path.join(self._root, *self._segments(key))
        self._pin_root()
        try:
            file_stat = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._check_root()  # a vanished root hides every object: that is an outage, not a miss
            return None
        except OSError as error:
            raise self._error("head", key, error) from error
        if not stat.S_ISREG(file_stat.st_mode):
            return None
        return ObjectInfo(key, file_stat.st_size, file_stat.st_mtime_ns // 1_000_000)

    def read_range(self, key: str, start: int, size: int) -> bytes | None:
        if start < 0 or size < 0:
            raise ValueError(f"read of {key!r}: start {start} and size {size} must be >= 0")
        path = os.path.join(self._root, *self._segments(key))
        self._pin_root()
        try:
            with open(path, "rb") as file:
                return os.pread(file.fileno(), size, start)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            self._check_root()  # a vanished root hides every object: an outage, not a miss
            return None
        except OSError as error:
            raise self._error("read", key, error) from error

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        """Objects whose key starts with `prefix`, by key order; only directories that can match are read."""
        self._pin_root()
        directory, separator, name_prefix = prefix.rpartition("/")
        if separator and key_problem(directory) is not None:
            return iter(())  # no valid key lives under such a directory
        return self._list(directory, name_prefix, start_after)

    def delete(self, keys: Sequence[str]) -> DeleteOutcome:
        if len(keys) > DELETE_BATCH_MAX:
            raise ValueError(f"cannot delete {len(keys)} objects in one call (at most {DELETE_BATCH_MAX})")
        paths = [os.path.join(self._root, *self._segments(key)) for key in keys]
        self._pin_root()
        outcome = DeleteOutcome()
        unlinked_by_parent: dict[str, list[str]] = {}
        for key, path in zip(keys, paths, strict=True):
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError):
                outcome.deleted.append(key)
            except OSError as error:
                outcome.failed[key] = f"cannot delete {path}: {error.strerror or error}"
            else:
                outcome.deleted.append(key)
                unlinked_by_parent.setdefault(os.path.dirname(path), []).append(key)
        for parent, parent_keys in unlinked_by_parent.items():
            try:
                fsync_directory(parent)
            except OSError as error:
                # The unlink may not survive a crash: report failure so the caller retries (then finds it missing).
                for key in parent_keys:
                    outcome.deleted.remove(key)
                    outcome.failed[key] = f"cannot sync directory {parent}: {error.strerror or error}"
        # Checked last: "missing counts as deleted" holds only if the root was there all along.
        self._check_root()
        return outcome

    def close(self) -> None:
        pass

    def _segments(self, key: str) -> Sequence[str]:
        problem = key_problem(key)
        if problem is None and any(segment.startswith(TEMP_PREFIX) for segment in key.split("/")):
            problem = f"object key {key!r} must not have a segment starting with {TEMP_PREFIX!r} (temporary files)"
        if problem is not None:
            raise ValueError(problem)
        return key.split("/")

    def _pin_root(self) -> None:
        """At the start of a call: the root must exist; the call then holds on to this directory."""
        try:
            root_stat = os.stat(self._root)
        except OSError as error:
            raise ObjectStoreError(f"local object store root {self._root} is unavailable: {error}") from error
        if not stat.S_ISDIR(root_stat.st_mode):
            raise ObjectStoreError(f"local object store root {self._root} is not a directory")
        self._root_identity = (root_stat.st_dev, root_stat.st_ino)

    def _check_root(self) -> None:
        try:
            root_stat = os.stat(self._root)
        except OSError as error:
            raise ObjectStoreError(f"local object store root {self._root} is unavailable: {error}") from error
        if (root_stat.st_dev, root_stat.st_ino) != self._root_identity:
            raise ObjectStoreError(
                f"local object store root {self._root} was replaced during the call (unmounted or mounted?)"
            )

    def _error(self, operation: str, key: str, error: OSError) -> ObjectStoreError:
        self._check_root()  # prefer the root's own failure: it explains every other one
        return ObjectStoreError(f"{operation} of {key!r} in local object store {self._root} failed: {error}")

    def _make_directories(self, segments: Sequence[str]) -> None:
        """Creates the key's parents one by one under the root, never the root itself (it may be unmounted)."""
        directory = self._root
        for segment in segments:
            parent, directory = directory, os.path.join(directory, segment)
            try:
                os.mkdir(directory)
            except FileExistsError:
                continue
            fsync_directory(parent)  # the new entry must survive a crash with the object under it

    def _list(self, directory: str, name_prefix: str, start_after: str) -> Iterator[ObjectInfo]:
        yield from self._walk(directory, name_prefix, start_after)
        # A root that vanished mid-walk makes the listing incomplete: say so rather than end quietly.
        self._check_root()

    def _walk(self, directory: str, name_prefix: str, start_after: str) -> Iterator[ObjectInfo]:
        """Keys under `directory` ('' is the root) whose first segment starts with `name_prefix`, in order."""
        path = os.path.join(self._root, directory) if directory else self._root
        key_base = f"{directory}/" if directory else ""
        try:
            with os.scandir(path) as scan:
                entries = [
                    entry
                    for entry in scan
                    if entry.name.startswith(name_prefix) and not entry.name.startswith(TEMP_PREFIX)
                ]
        except (FileNotFoundError, NotADirectoryError):
            self._check_root()  # a missing subdirectory holds nothing; a missing root is an outage
            return
        except OSError as error:
            raise self._error("list", directory, error) from error
        # Each entry's sort key is the start of every key under it ('/' ends a directory's), and none is a
        # proper prefix of another's unless it is a whole key, so sorting them gives the full keys' order:
        # the file 'a-b' (0x2D) comes before the directory 'a/' (0x2F), as S3 would list them.
        children: list[tuple[str, os.DirEntry[str], bool]] = []
        for entry in entries:
            try:
                is_directory = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            children.append((key_base + entry.name + ("/" if is_directory else ""), entry, is_directory))
        children.sort(key=lambda child: child[0])
        for sort_key, entry, is_directory in children:
            if is_directory:
                # Every key under it starts with sort_key: skip it if all of them are <= start_after.
                if sort_key <= start_after and not start_after.startswith(sort_key):
                    continue
                yield from self._walk(sort_key[:-1], "", start_after)
                continue
            if sort_key <= start_after:
                continue
            try:
                file_stat = entry.stat()
            except FileNotFoundError:
                continue  # deleted while we listed
            except OSError as error:
                raise self._error("list", sort_key, error) from error
            if stat.S_ISREG(file_stat.st_mode):
                yield ObjectInfo(sort_key, file_stat.st_size, file_stat.st_mtime_ns // 1_000_000)


def _write_temp_file(directory: str, data: bytes) -> str:
    """Writes and fsyncs `data` to a fresh temporary file in `directory`; returns its path."""
    path = os.path.join(directory, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        with open(fd, "wb", closefd=True) as file:
            file.write(data)
            flush_and_fsync(file)
    except BaseException:
        _unlink_quietly(path)
        raise
    return path


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):  # best effort: a leftover temp file is never listed
        os.unlink(path)
