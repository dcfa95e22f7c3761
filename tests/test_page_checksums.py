"""Every page of a coordinator's SQLite state is verified when read (snapshot/page_checksums.py, wal_frames.py).

A bit flipped on disk in a page of the state file, in a page of its WAL, or in a page of a snapshot is
refused when read (SQLITE_IOERR_DATA, naming the file and offset), never served; a checkpoint never copies
a damaged WAL frame into the file. These tests work on the files directly; tests/test_page_damage.py flips
bits under a running node.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import apsw
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.machine import records
from coordinator.machine.records import CommittedBatch
from coordinator.machine.state.integrity import check_integrity
from coordinator.machine.state.store import StateCorrupt, StateStore, open_reader
from coordinator.runtime.log.segments import LogPosition
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.runtime.shard.state_opening import StatePlace, open_state
from snapshot import page_checksums
from snapshot.durable_files import file_checksum
from snapshot.page_checksums import CHECKSUM_BYTES, is_checksum_damage
from snapshot.snapshots import restore_newest, snapshot_directory, take_snapshot
from snapshot.wal_frames import (
    FRAME_HEADER_BYTES,
    WAL_HEADER_BYTES,
    FrameChecksum,
    reference_checksum,
    wal_damage,
)
from tests.lanes import sized

TOPIC = b"\x03" * 16
PARTITIONS = 16


@settings(max_examples=sized(30, 10), deadline=None)
@given(
    page_size=st.sampled_from([512, 1024, 4096, 65536]),
    seed=st.integers(0, 2**32),
    big_endian=st.booleans(),
    start=st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
)
def test_the_closed_form_checksum_is_sqlites_loop(page_size: int, seed: int, big_endian: bool, start: tuple) -> None:
    data = random.Random(seed).randbytes(8 + page_size)
    words = np.frombuffer(data, dtype=">u4" if big_endian else "<u4").astype(np.uint32)
    header = (int(words[0]), int(words[1]))
    assert FrameChecksum(page_size).compute(header, words[2:], *start) == reference_checksum(data, *start, big_endian)


def fill(store: StateStore, files: int, first: int = 0) -> None:
    """One apply per file of one batch per partition: pages all over the batches B-tree."""
    if first == 0:
        created = [records.partition_created(p, TOPIC, "t", p) for p in range(PARTITIONS)]
        store.apply([(store.applied_offset + 1, created)])
    for n in range(first, first + files):
        batch_id = store.load_view().next_batch_id
        batches = [CommittedBatch(batch_id + p, p, 0, 10, n, n, 0, -1, -1, -1, -1, 2, 0) for p in range(PARTITIONS)]
        file = records.file_committed(n, f"wal/{n:08d}-" + "k" * 60, 10, 1, [0], 1000, batches)
        store.apply([(store.applied_offset + 1, [file])])


def read_everything(path: Path) -> list[tuple[object, ...]]:
    """Every row of the batches and files tables, through a new reader (as a reader process would)."""
    reader = open_reader(path)
    try:
        rows = [tuple(row) for row in reader.execute("SELECT * FROM batches ORDER BY partition_key, base_offset")]
        return rows + [tuple(row) for row in reader.execute("SELECT * FROM files ORDER BY file_id")]
    finally:
        reader.close()


def flip_bit(path: Path, offset: int, bit: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        (byte,) = file.read(1)
        file.seek(offset)
        file.write(bytes([byte ^ (1 << bit)]))


def reserved_bytes(path: Path) -> int:
    connection = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY)
    try:
        return page_checksums.reserved_bytes(connection)
    finally:
        connection.close()


def test_a_new_state_reserves_the_checksum_bytes_and_a_flipped_page_bit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=0)
    fill(store, 60)
    store.close()  # the WAL is checkpointed into the file and removed
    assert not path.with_name("state.sqlite-wal").exists()
    assert reserved_bytes(path) == CHECKSUM_BYTES
    expected = read_everything(path)
    page_size = 4096
    pages = path.stat().st_size // page_size
    leaves = batches_leaf_pages(path)
    assert pages > 10 and len(leaves) > 3
    for page in (1, pages // 2, pages - 1, *leaves[::3]):  # any page, any byte of it (free space, checksum)
        offset = page * page_size + random.Random(page).randrange(page_size)
        flip_bit(path, offset, page % 8)
        problem = check_integrity(path).problem  # reads every page
        assert problem is not None and f"the page at offset {page * page_size} fails its checksum" in problem
        if page + 1 in leaves:  # dbstat counts pages from 1
            with pytest.raises(apsw.IOError) as refused:
                read_everything(path)
            assert is_checksum_damage(refused.value)
            assert f"{path}: the page at offset {page * page_size} fails its checksum" in str(refused.value)
        flip_bit(path, offset, page % 8)
        assert read_everything(path) == expected
    assert check_integrity(path).problem is None


def batches_leaf_pages(path: Path) -> list[int]:
    """The 0-based indexes of the batches table's leaf pages."""
    connection = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY)
    try:
        query = "SELECT pageno FROM dbstat WHERE name = 'batches' AND pagetype = 'leaf' ORDER BY pageno"
        return [page - 1 for (page,) in connection.execute(query)]
    finally:
        connection.close()


def test_a_flipped_bit_in_the_reserve_byte_of_the_header_is_refused_not_a_file_without_checksums(
    tmp_path: Path,
) -> None:
    """cksumvfs learns from the header whether to check: a handle that saw 8 reserved bytes never stops checking."""
    path = tmp_path / "header.sqlite"
    writer = page_checksums.connect(path, apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
    page_checksums.reserve_page_checksums(writer)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    with writer:
        writer.executemany("INSERT INTO t VALUES (?, ?)", [(k, "v" * 40) for k in range(500)])
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # the first page is read from the file again
    reader = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY)
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (500,)
    flip_bit(path, 20, 0)  # 8 -> 9: the pages would no longer be checked
    with writer:
        writer.execute("UPDATE t SET v = 'w' WHERE k = 7")  # a change: the reader reads the first page again
    with pytest.raises(apsw.IOError) as refused:
        reader.execute("SELECT count(*) FROM t").fetchone()
    assert is_checksum_damage(refused.value) and "reserve 9 bytes" in str(refused.value)
    reader.close()
    writer.close()

    state = tmp_path / "state.sqlite"
    store = StateStore(state, 0)
    fill(store, 2)
    store.close()
    flip_bit(state, 20, 2)  # 8 -> 12
    with pytest.raises(StateCorrupt, match="reserve 12 bytes"):
        StateStore(state, 0)  # opened again: refused as damaged, so the load sets it aside and rebuilds it


def wal_page_offsets(wal: Path, page_size: int = 4096) -> list[int]:
    """Where the page of each frame that holds its page's newest copy starts (what reads and checkpoints read)."""
    data = wal.read_bytes()
    frames = (len(data) - WAL_HEADER_BYTES) // (FRAME_HEADER_BYTES + page_size)
    newest: dict[int, int] = {}
    for k in range(frames):
        header = WAL_HEADER_BYTES + k * (FRAME_HEADER_BYTES + page_size)
        if data[header + 8 : header + 16] != data[16:24]:
            break  # the WAL's salts end its current frames: what follows is left from before it started over
        newest[int.from_bytes(data[header : header + 4], "big")] = header + FRAME_HEADER_BYTES
    return sorted(newest.values())


def test_a_flipped_bit_in_a_wal_page_is_refused_and_never_checkpointed_into_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=1_000_000)  # everything stays in the WAL
    fill(store, 40)
    wal = path.with_name("state.sqlite-wal")
    expected = read_everything(path)
    offsets = wal_page_offsets(wal)
    # The last frames hold the newest copy of the pages every read goes through.
    target = offsets[-3] + 1000
    flip_bit(wal, target, 6)
    with pytest.raises(apsw.IOError) as refused:
        read_everything(path)
    assert is_checksum_damage(refused.value) and "fails its checksum" in str(refused.value), refused.value
    assert str(wal) in str(refused.value)
    checkpointer = page_checksums.connect(path, apsw.SQLITE_OPEN_READWRITE)
    with pytest.raises(apsw.IOError) as refused:
        checkpointer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    assert is_checksum_damage(refused.value)
    checkpointer.close()
    flip_bit(wal, target, 6)  # undone: the WAL verifies again, nothing was copied meanwhile
    assert read_everything(path) == expected
    store.close()
    assert read_everything(path) == expected


def test_a_wal_frame_header_flip_is_refused_too(tmp_path: Path) -> None:
    """A frame's page number and checksum are checked with its page; so is the chain from the frame before."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=1_000_000)
    fill(store, 20)
    wal = path.with_name("state.sqlite-wal")
    last_header = wal_page_offsets(wal)[-1] - FRAME_HEADER_BYTES
    for offset in (last_header + 2, last_header + 18):  # its page number, its checksum
        flip_bit(wal, offset, 1)
        with pytest.raises(apsw.IOError):
            read_everything(path)
        flip_bit(wal, offset, 1)
    read_everything(path)
    store.close()


def test_a_damaged_wal_frame_met_by_the_checkpoint_thread_fails_the_next_apply(tmp_path: Path) -> None:
    # The damaged frame is met only if the thread's checkpoint reads it: when the thread gets its turn only after
    # a later frame holds a newer copy of that page (a loaded machine), the checkpoint copies that one and the WAL
    # starts over, the damage gone with it. That is no fault of the node, so a run where it happens is tried again
    # on a fresh state; one of five must meet the damage.
    for attempt in range(5):
        path = tmp_path / f"attempt-{attempt}" / "state.sqlite"
        path.parent.mkdir()
        store = StateStore(path, 0, checkpoint_pages=50)
        fill(store, 3)
        wal = path.with_name("state.sqlite-wal")
        flip_bit(wal, wal_page_offsets(wal)[0] + 100, 2)
        try:
            for n in range(3, 200):  # until the thread's checkpoint met the frame, and an apply after it saw that
                fill(store, 1, first=n)
        except apsw.IOError as error:
            assert is_checksum_damage(error)
            # The last connection's checkpoint meets the frame too and stops there (SQLite keeps the WAL when the
            # checkpoint at close fails): the WAL stays, the damage with it, for the next load to find.
            store.close()
            assert path.with_name("state.sqlite-wal").exists()
            assert wal_damage(path.with_name("state.sqlite-wal")) is not None
            return
        assert store.checkpoints_completed > 0, "no checkpoint ran: the frame was never read"
        store.close()
    pytest.fail("in five runs the checkpoint thread never met the damaged frame, nor did an apply refuse")


def test_pages_written_twice_in_one_transaction_are_not_taken_for_damage(tmp_path: Path) -> None:
    """A page spilled to the WAL and written again is overwritten in its frame: the checksums are rewritten
    only at the commit, and the writer reading it back meanwhile must not be refused."""
    path = tmp_path / "spill.sqlite"
    connection = page_checksums.connect(path, apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
    page_checksums.reserve_page_checksums(connection)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA wal_autocheckpoint=0")
    connection.execute("PRAGMA cache_size=10")  # a tiny cache: pages spill to the WAL mid-transaction
    connection.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    rng = random.Random(5)
    model: dict[int, bytes] = {}
    for _ in range(4):
        with connection:
            for _ in range(2000):
                key, value = rng.randrange(3000), rng.randbytes(150)
                connection.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (key, value))
                model[key] = value
            assert dict(connection.execute("SELECT k, v FROM t")) == model
        reader = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY)
        assert dict(reader.execute("SELECT k, v FROM t")) == model
        reader.close()
    connection.close()


def test_a_state_without_page_checksums_is_converted_when_it_opens_and_holds_the_same(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checksums=False)
    fill(store, 30)
    store.close()
    assert reserved_bytes(path) == 0
    before = logical_dump(path)
    store = StateStore(path, 0)
    fill(store, 1, first=30)
    store.close()
    assert reserved_bytes(path) == CHECKSUM_BYTES
    after = logical_dump(path)
    assert after["batches"][: len(before["batches"])] == before["batches"]
    assert len(after["batches"]) == len(before["batches"]) + PARTITIONS


def test_a_snapshot_keeps_the_page_checksums_and_a_page_flip_in_it_is_refused_on_restore(tmp_path: Path) -> None:
    """The file CRC would refuse the copy too; here it is recomputed, so that only the page checksums can."""
    path = tmp_path / "coordinator-0" / "state.sqlite"
    path.parent.mkdir()
    store = StateStore(path, 0)
    fill(store, 30)
    snapshots = snapshot_directory(path.parent)
    manifest = take_snapshot(path, snapshots, 50, 1)
    applied = store.applied_offset
    store.close()
    assert reserved_bytes(manifest.data_path) == CHECKSUM_BYTES
    flip_bit(manifest.data_path, manifest.size_bytes // 2 + 7, 3)
    _, crc = file_checksum(manifest.data_path)
    text = manifest.data_path.with_suffix(".manifest").read_text().replace(f"{manifest.crc32:08x}", f"{crc:08x}")
    manifest.data_path.with_suffix(".manifest").write_text(text)

    restored_to = tmp_path / "restored.sqlite"
    assert restore_newest(snapshots, restored_to, 0, applied, lambda p: check_integrity(p).problem) is None
    assert not restored_to.exists(), "a snapshot whose page fails its checksum is not installed"
    shutil.rmtree(snapshots)


def test_a_snapshot_of_a_state_larger_than_the_copy_page_cache_keeps_every_page_checksum(tmp_path: Path) -> None:
    """The copy spills pages before it writes the first one once the state outgrows its page cache (about 2 MB):
    they carry their checksums too, and the snapshot restores (found by the retention soak: such a snapshot failed
    with a disk I/O error when read back, and the coordinator took it for damage of its state)."""
    path = tmp_path / "coordinator-0" / "state.sqlite"
    path.parent.mkdir()
    store = StateStore(path, 0)
    fill(store, 900)
    assert path.stat().st_size > 2 * 1024 * 1024
    snapshots = snapshot_directory(path.parent)
    manifest = take_snapshot(path, snapshots, 1024, 1)
    applied = store.applied_offset
    store.close()
    expected = read_everything(path)
    assert reserved_bytes(manifest.data_path) == CHECKSUM_BYTES
    restored_to = tmp_path / "restored.sqlite"
    assert restore_newest(snapshots, restored_to, 0, applied, lambda p: check_integrity(p).problem) is not None
    assert read_everything(restored_to) == expected
    copy = page_checksums.connect(restored_to, apsw.SQLITE_OPEN_READONLY)
    tables = {row[0] for row in copy.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    copy.close()
    assert "reserve_written" not in tables, "the first page written before the copy leaves nothing in it"


def test_checksums_off_creates_files_without_them_and_keeps_those_that_have_them(tmp_path: Path) -> None:
    plain = tmp_path / "plain.sqlite"
    store = StateStore(plain, 0, checksums=False)
    fill(store, 3)
    store.close()
    assert reserved_bytes(plain) == 0
    checked = tmp_path / "checked.sqlite"
    store = StateStore(checked, 0)
    fill(store, 3)
    store.close()
    store = StateStore(checked, 0, checksums=False)  # cksumvfs alone: still writes and verifies its checksums
    fill(store, 3, first=3)
    store.close()
    assert reserved_bytes(checked) == CHECKSUM_BYTES
    assert len(read_everything(checked)) == 6 * PARTITIONS + 6


def test_an_empty_file_left_by_a_crash_gets_checksums_too(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    path.touch()
    os.sync()
    store = StateStore(path, 0)
    store.close()
    assert reserved_bytes(path) == CHECKSUM_BYTES


def crash_image(store_path: Path, into: Path) -> Path:
    """The state file and its WAL as a crash would leave them (copied while the store is open)."""
    into.mkdir()
    for suffix in ("", "-wal"):
        shutil.copyfile(store_path.with_name(store_path.name + suffix), into / f"state.sqlite{suffix}")
    return into / "state.sqlite"


def test_a_wal_left_by_a_crash_is_checked_before_sqlite_recovers_it(tmp_path: Path) -> None:
    """SQLite's recovery would silently drop every frame from a damaged one on; a torn tail it may drop."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, 0, checkpoint_pages=1_000_000)
    fill(store, 30)
    sound = crash_image(path, tmp_path / "sound")
    assert wal_damage(sound.with_name("state.sqlite-wal")) is None
    inside = crash_image(path, tmp_path / "inside")
    frames = sorted(wal_page_offsets(inside.with_name("state.sqlite-wal")))
    flip_bit(inside.with_name("state.sqlite-wal"), frames[len(frames) // 2] + 77, 0)
    problem = wal_damage(inside.with_name("state.sqlite-wal"))
    assert problem is not None and "fails its checksum, and frame" in problem
    torn = crash_image(path, tmp_path / "torn")
    wal = torn.with_name("state.sqlite-wal")
    with open(wal, "r+b") as file:  # the last frame cut short, the one before it garbled: a torn tail
        file.truncate(wal.stat().st_size - 1000)
    flip_bit(wal, wal.stat().st_size - 5000, 3)
    assert wal_damage(wal) is None
    header = crash_image(path, tmp_path / "header")
    flip_bit(header.with_name("state.sqlite-wal"), 17, 0)  # a salt of the header
    assert "header does not verify" in (wal_damage(header.with_name("state.sqlite-wal")) or "")
    store.close()

    # At load, a damaged WAL sets the state aside (rebuilt from snapshots and the log), as a damaged file does.
    place = StatePlace(0, inside.parent, 1 << 20, 1000, check_restored=True)
    reopened = open_state(place, LogPosition(0, 1000, 1), verify=False, rebuild_reason="")
    assert reopened.applied_offset == 0, "rebuilt: the whole log replays into a new state"
    reopened.close()
    assert list(inside.parent.glob("state.sqlite.corrupt-*"))


def test_values_over_many_pages_are_read_whole_pages_and_checked(tmp_path: Path) -> None:
    """SQLite reads overflow content straight from the file, part of a page at a time, where the VFS allows it: the
    checksum VFS does not, so a value spread over overflow pages reads back and a flipped bit in one is refused."""
    path = tmp_path / "overflow.sqlite"
    writer = page_checksums.connect(path, apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
    page_checksums.reserve_page_checksums(writer)
    writer.execute("PRAGMA journal_mode=WAL").fetchall()
    value = random.Random(7).randbytes(20_000)  # about five overflow pages, each read by a reader of its own
    writer.execute("CREATE TABLE t (v BLOB)")
    writer.execute("INSERT INTO t VALUES (?)", (value,))
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    reader = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY)
    assert reader.execute("SELECT v FROM t").fetchall() == [(value,)]
    reader.close()
    writer.close()
    data = path.read_bytes()
    flip_bit(path, data.index(value[8000:8100]) + 50, 3)
    reader = page_checksums.connect(path, apsw.SQLITE_OPEN_READONLY)
    with pytest.raises(apsw.IOError) as refused:
        reader.execute("SELECT v FROM t").fetchall()
    assert is_checksum_damage(refused.value) and "fails its checksum" in str(refused.value), refused.value
    reader.close()
