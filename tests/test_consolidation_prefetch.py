"""ReplaceBatches' prefetch (coordinator/consolidation/prefetch.py): off the loop, it reads the state pages that the
check and the apply of the same call then read, so that those find them in the OS cache and never wait for the disk
on the node's loop. Measured by recording every read SQLite makes of the state file and its WAL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from coordinator.base.errors import ErrorCode
from coordinator.consolidation import replace_batches, rules
from coordinator.consolidation.prefetch import prefetch_replace_part
from coordinator.consolidation.rules import Extent, ReplacePart
from coordinator.files.object_store import StoreConfig, open_object_store
from coordinator.machine.state.store import StateStore
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb
from snapshot import page_checksums
from tests.harness import Broker, batch, coordinator_of, topic_name
from tests.in_process import InProcessNode
from tests.test_consolidation import MIN_AGE_MS, merged_request, plan, upload_and_commit
from tests.test_producer_expiry_core import TOPIC, Coordinator, _commit

NOW = 10_000
FILES = 400  # each holding one batch of each of the two partitions
RUN = 150  # batches of partition 0 the call moves: from 150 old files
SIZE = 100
RECORDING_VFS = "recording-reads"
Page = tuple[str, int]  # (which file: the database or its WAL, byte offset read)


class _RecordingFile(apsw.VFSFile):
    def __init__(self, vfs: _RecordingVfs, name: apsw.URIFilename | str | None, flags: list[int]) -> None:
        super().__init__("unix", name, flags)
        self._vfs = vfs
        self._kind = (
            "wal" if str(name.filename() if isinstance(name, apsw.URIFilename) else name).endswith("-wal") else "db"
        )

    def xRead(self, amount: int, offset: int) -> bytes:
        if self._vfs.recording is not None:
            self._vfs.recording.add((self._kind, offset))
        return super().xRead(amount, offset)


class _RecordingVfs(apsw.VFS):
    """SQLite's own unix VFS, with every read of a state file or WAL recorded while `recording`. The state is made
    without page checksums: their VFS is a C one that a Python one cannot wrap, and they change no page read."""

    def __init__(self) -> None:
        super().__init__(RECORDING_VFS, "unix")
        self.recording: set[Page] | None = None

    def xOpen(self, name: apsw.URIFilename | str | None, flags: list[int]) -> apsw.VFSFile:
        return _RecordingFile(self, name, flags)


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[_RecordingVfs]:
    vfs = _RecordingVfs()
    monkeypatch.setattr(page_checksums, "vfs_name", lambda checksums: RECORDING_VFS)
    yield vfs
    vfs.unregister()


def _opened(path: Path) -> Coordinator:
    store = StateStore(path, 0, checksums=False)
    return Coordinator(store, store.load_view(), store.applied_offset)


def _state_of_many_files(directory: Path) -> Path:
    made = _opened(directory / "state.sqlite")
    request = partition_checks.CreatePartitions(TOPIC, "orders", (0, 1))
    made.append(partition_checks.check_create_partitions(made.view, request, 0))
    made.apply()
    for number in range(FILES):
        batches = [batch(TOPIC, partition, 2, byte_offset=partition * SIZE, size=SIZE) for partition in (0, 1)]
        assert _commit(made, batches, f"wal/{number:05}", NOW) == [ErrorCode.NONE, ErrorCode.NONE]
        made.apply()
    made.store.close()
    return directory / "state.sqlite"


def _part(first_file: int) -> ReplacePart:
    """Partition 0's batches of RUN old files from `first_file` on (two offsets each), into one new object."""
    extents = (Extent(TOPIC, 0, 2 * first_file, 2 * (first_file + RUN) - 1, 0, RUN * SIZE),)
    return ReplacePart("wal/merged/1", RUN * SIZE, 7, (0,), extents, (None,), 1000)


def _check_and_apply(coordinator: Coordinator, part: ReplacePart) -> None:
    result = rules.check_replace_part(coordinator.view, part, NOW + 5)
    assert [outcome.error_code for outcome in result.response] == [ErrorCode.NONE]
    coordinator.append(result)
    coordinator.apply()


def test_the_check_and_apply_of_a_replace_read_only_pages_its_prefetch_read_but_the_new_files_own(
    tmp_path: Path, recording: _RecordingVfs
) -> None:
    path = _state_of_many_files(tmp_path)
    part = _part(first_file=100)
    coordinator = _opened(path)  # afresh: its writer's cache holds none of the batches' or files' pages
    try:
        reader = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY, False)  # a fresh connection, as the prefetch's
        prefetched: set[Page] = set()
        recording.recording = prefetched
        with reader:
            rows = prefetch_replace_part(reader, part)
        reader.close()
        applied: set[Page] = set()
        recording.recording = applied
        _check_and_apply(coordinator, part)
        recording.recording = None
    finally:
        coordinator.store.close()
    # Each batch, its entry in batches_by_file, its old file's row and that file's entry in files_live_by_time (one
    # batch of partition 0 per file), and the batch after the run.
    assert rows == 4 * RUN + 1
    missed = applied - prefetched
    # What the apply reads beyond the prefetch: only the pages where the new file's rows go (the right edge of
    # files, file_replacements and batches_by_file): 3 of 18 here. Without the prefetch's reads of batches_by_file
    # 6 were missed, without those of files_live_by_time 4.
    assert len(applied) >= 15, f"the apply read only {len(applied)} pages from the OS: the test's state is too small"
    assert len(missed) <= 3, f"{len(missed)} of the {len(applied)} pages the apply read were not prefetched: {missed}"


def test_a_prefetch_of_a_part_the_check_refuses_reads_nothing_of_the_refused_extents(tmp_path: Path) -> None:
    path = _state_of_many_files(tmp_path)
    good = _part(first_file=0).extents[0]
    unknown = Extent(TOPIC, 9, 0, 1, RUN * SIZE, SIZE)  # no such partition
    refused = Extent(TOPIC, 1, 0, 1, RUN * SIZE + SIZE, SIZE)  # refused at the router
    size = RUN * SIZE + 2 * SIZE
    part = ReplacePart("wal/merged/2", size, 7, (0,), (good, unknown, refused), (None, None, "bad"), 1000)
    coordinator = _opened(path)  # its writer open, as on a node (a reader of a WAL file needs its shared memory)
    reader = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY, False)
    try:
        with reader:
            both = prefetch_replace_part(reader, part)
            alone = prefetch_replace_part(reader, ReplacePart("wal/merged/2", size, 7, (0,), (good,), (None,), 1000))
    finally:
        reader.close()
        coordinator.store.close()
    assert both == alone


def test_a_replace_through_the_socket_runs_its_prefetch_off_the_loop_before_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefetches: list[tuple[bool, str, int]] = []  # (a loop runs on the thread, the part's key, rows read)

    def watched(db: apsw.Connection, part: ReplacePart) -> int:
        rows = prefetch_replace_part(db, part)
        try:
            asyncio.get_running_loop()
            on_a_loop = True
        except RuntimeError:
            on_a_loop = False
        prefetches.append((on_a_loop, part.object_key, rows))
        return rows

    monkeypatch.setattr(replace_batches, "prefetch_replace_part", watched)
    root = tmp_path / "objects"
    root.mkdir()
    node = InProcessNode(tmp_path / "data", coordinators=2, settings={"diskless.storage.local.root": str(root)})
    node.start()
    try:
        store = open_object_store(StoreConfig("local", local_root=str(root)))
        broker = Broker(node.stub, node.coordinators)
        topic_id = broker.create_topic(topic_name("prefetch"), 1)
        owner = coordinator_of(node.stub, topic_id, 0)
        for number in range(3):
            upload_and_commit(broker, store, topic_id, 0, f"wal/0{number}/{number:032x}.wal")
        node.advance(MIN_AGE_MS)
        merged_key = "wal/ff/" + "f" * 32 + ".wal"
        request = merged_request(merged_key, list(plan(node, owner).files), owner)
        store.put(merged_key, b"m" * request.file_size)
        assert prefetches == []
        assert [e.error_code for e in node.stub.ReplaceBatches(request).extents] == [pb.NONE]
        # The six batches, each with its entry in batches_by_file, and the three files' rows and entries by time.
        assert prefetches == [(False, merged_key, 6 + 6 + 3 + 3)]
    finally:
        assert node.stop() == 0, "".join(node.output)
