"""SQLite is a cache of the log (DESIGN §6): deleted, corrupt or stale state is rebuilt; a torn log tail is cut.

Each test fills a fresh node, records its answers (FindBatches, ListOffsets, DescribeCoordinators),
damages something while the node is stopped, restarts it, and checks that the answers are the same
(every start appends one LeaderChange to each coordinator's log: log end and epoch move by one) and
that each coordinator's state equals a rebuild from its log (I1).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import pytest

from coordinator.machine.state import time_index
from coordinator.machine.state.schema import SCHEMA_VERSION
from coordinator.runtime.log.frame import decode_frame, encode_frame
from coordinator.runtime.log.segments import SEGMENT_SUFFIX, MetadataLog
from coordinator.runtime.shard.log_replay import logical_dump
from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    assert_state_equals_log_rebuild,
    batch,
    coordinator_state_files,
    coordinators_of,
    describe_coordinators,
    fetch_all_batches,
    laid_out,
)
from tests.in_process import InProcessNode

COORDINATORS = 4
SETTINGS = {"diskless.coordinator.log.segment.bytes": "2048"}  # several segments per coordinator
BASE_TIME = 1_700_000_000_000
LIST_OFFSETS_TIMESTAMPS = (-1, -2, -3, -4, -5, 0, BASE_TIME + 7_500, BASE_TIME + 14_000, 2**62)
PRODUCER_ID = 77


@dataclass
class Filled:
    """A node filled with data, and the topics it knows (topic id -> partition count)."""

    server: InProcessNode
    topics: dict[bytes, int]
    commits: int = 0


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[Filled]:
    server = InProcessNode(tmp_path / "data", coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        yield fill(server)
    finally:
        if server.is_running():
            server.stop()


def fill(server: InProcessNode) -> Filled:
    """Two topics over every coordinator, files spanning partitions, idempotent and LOG_APPEND_TIME batches,
    and DeleteRecords (one straddling a batch, one to the high watermark). Every file keeps live batches on
    every coordinator it has batches on, so no file is handed over or deleted while the tests compare."""
    broker = Broker(server.stub, COORDINATORS)
    a = broker.create_topic("rebuild-a", 8)  # partitions p and p + 4 share a coordinator
    b = broker.create_topic("rebuild-b", 3)
    filled = Filled(server, {a: 8, b: 3})
    assert set(coordinators_of(server.stub, filled.topics).values()) == set(range(COORDINATORS))
    rng = random.Random(42)
    sequences = [0] * 8
    for k in range(16):
        batches = []
        for p in range(8):
            records = rng.randint(1, 4)
            append_time = pb.LOG_APPEND_TIME if (k + p) % 5 == 0 else pb.CREATE_TIME
            max_timestamp = BASE_TIME + 1000 * k + p
            if p < 4:  # an idempotent producer on partitions 0..3
                batches.append(
                    batch(a, p, records, size=rng.randint(100, 700), producer_id=PRODUCER_ID, epoch=0,
                          sequence=sequences[p], timestamp_type=append_time, max_timestamp=max_timestamp)
                )  # fmt: skip
                sequences[p] += records
            else:
                batches.append(
                    batch(a, p, records, size=rng.randint(100, 700), timestamp_type=append_time,
                          max_timestamp=max_timestamp)
                )  # fmt: skip
        commit_all(filled, laid_out(batches))
    for k in range(10):
        batches = [batch(b, (k + i) % 3, rng.randint(1, 3), size=rng.randint(50, 300)) for i in range(2)]
        if k % 3 == 0:
            batches.append(batch(b, k % 3, 1, size=80, magic=0, timestamp_type=pb.NO_TIMESTAMP_TYPE, max_timestamp=-1))
        commit_all(filled, laid_out(batches))
    first_batches, _, _ = fetch_all_batches(server.stub, a, 0)
    straddled = first_batches[5]
    assert straddled.last_offset > straddled.base_offset or first_batches[6].last_offset > first_batches[6].base_offset
    target = straddled.base_offset + 1 if straddled.last_offset > straddled.base_offset else straddled.base_offset
    delete_records(server, a, 0, target)
    delete_records(server, a, 1, -1)
    return filled


def commit_all(filled: Filled, batches: list[pb.CommitFileRequest.Batch]) -> None:
    response = Broker(filled.server.stub, COORDINATORS).commit(batches)
    assert [r.error_code for r in response.batches] == [pb.NONE] * len(batches), response
    assert not any(r.is_duplicate for r in response.batches)
    filled.commits += 1


def delete_records(server: InProcessNode, topic_id: bytes, partition: int, offset: int) -> None:
    response = server.stub.DeleteRecords(
        pb.DeleteRecordsRequest(
            topics=[
                pb.DeleteRecordsRequest.Topic(
                    topic_id=topic_id,
                    partitions=[pb.DeleteRecordsRequest.Partition(partition=partition, offset=offset)],
                )
            ]
        ),
        timeout=30,
    )
    assert response.topics[0].partitions[0].error_code == pb.NONE, response


# ---------------------------------------------------------------------- what the node answers


def answers(filled: Filled) -> dict[str, Any]:
    """Everything a broker or operator can see of the data, which a rebuild must not change."""
    stub = filled.server.stub
    found = {}
    for topic_id, count in filled.topics.items():
        for partition in range(count):
            batches, log_start, high_watermark = fetch_all_batches(stub, topic_id, partition)
            found[(topic_id, partition)] = (log_start, high_watermark, [b.SerializeToString() for b in batches])
    request = pb.ListOffsetsRequest(
        topics=[
            pb.ListOffsetsRequest.Topic(
                topic_id=topic_id,
                partitions=[
                    pb.ListOffsetsRequest.Partition(partition=p, timestamp=t)
                    for p in range(count)
                    for t in LIST_OFFSETS_TIMESTAMPS
                ],
            )
            for topic_id, count in filled.topics.items()
        ]
    )
    listed = [
        (t.topic_id, p.partition, p.error_code, p.timestamp, p.offset)
        for t in stub.ListOffsets(request, timeout=30).topics
        for p in t.partitions
    ]
    assert all(item[2] == pb.NONE for item in listed), listed
    counts = {
        c.coordinator_id: (
            c.error_code, c.partition_count, c.live_file_count, c.live_batch_count, c.oldest_live_file_timestamp,
            c.files_awaiting_deletion, c.files_awaiting_handover, c.log_start_offset,
        )
        for c in describe_coordinators(stub).values()
    }  # fmt: skip
    return {"find_batches": found, "list_offsets": listed, "coordinators": counts}


def log_positions(filled: Filled) -> dict[int, tuple[int, int, int, int]]:
    """Per coordinator: (log end, high watermark, applied offset, leader epoch)."""
    return {
        c.coordinator_id: (c.log_end_offset, c.high_watermark, c.applied_offset, c.leader.leader_epoch)
        for c in describe_coordinators(filled.server.stub).values()
    }


def assert_one_start_later(before: dict[int, tuple[int, int, int, int]], after: dict[int, tuple[int, int, int, int]]):
    """Each start appends exactly one LeaderChange: one more offset, one more epoch, all of it applied."""
    for coordinator_id, (end, high_watermark, applied, epoch) in before.items():
        assert end == high_watermark == applied
        assert after[coordinator_id] == (end + 1, end + 1, end + 1, epoch + 1), (coordinator_id, after)


def assert_dumps_equal_but_for_one_start(before: dict[int, dict], after: dict[int, dict]) -> None:
    """The logical dumps are equal, except the applied offset and leader epoch, one start further."""
    for coordinator_id, dump in before.items():
        for table, rows in dump.items():
            if table != "meta":
                assert after[coordinator_id][table] == rows, f"coordinator {coordinator_id}: table {table} changed"
        meta_before, meta_after = dict(dump["meta"]), dict(after[coordinator_id]["meta"])
        for name in ("applied_offset", "leader_epoch"):
            assert meta_after.pop(name) == meta_before.pop(name) + 1, (coordinator_id, name)
        assert meta_after == meta_before, f"coordinator {coordinator_id}: meta changed"


def stopped_dumps(filled: Filled, scratch: Path) -> dict[int, dict]:
    """Stops the node cleanly and checks I1 for every coordinator; returns the logical dumps."""
    assert filled.server.stop() == 0, "".join(filled.server.output[-40:])
    return assert_state_equals_log_rebuild(filled.server.data_dir, COORDINATORS, scratch)


def coordinator_dir(filled: Filled, coordinator_id: int) -> Path:
    return filled.server.data_dir / f"coordinator-{coordinator_id}"


def remove_state(filled: Filled, coordinator_id: int) -> None:
    for path in coordinator_state_files(filled.server.data_dir, coordinator_id):
        path.unlink(missing_ok=True)


def assert_still_writable(filled: Filled) -> None:
    """After a rebuild new commits continue the offsets, and batch ids stay unique."""
    a = next(iter(filled.topics))
    before = {p: fetch_all_batches(filled.server.stub, a, p)[2] for p in range(8)}
    response = Broker(filled.server.stub, COORDINATORS).commit(laid_out([batch(a, p, 2) for p in range(4, 8)]))
    assert [r.error_code for r in response.batches] == [pb.NONE] * 4, response
    assert [r.assigned_base_offset for r in response.batches] == [before[p] for p in range(4, 8)]
    ids = [
        b.batch_id
        for topic_id, count in filled.topics.items()
        for p in range(count)
        for b in fetch_all_batches(filled.server.stub, topic_id, p)[0]
    ]
    assert len(ids) == len(set(ids)), "batch ids collide after a rebuild"


# ---------------------------------------------------------------------- the tests


def test_deleted_state_is_rebuilt_from_the_log_with_the_same_answers(filled: Filled, tmp_path: Path) -> None:
    seen, positions = answers(filled), log_positions(filled)
    dumps = stopped_dumps(filled, tmp_path / "before")
    for coordinator_id in (1, 3):
        remove_state(filled, coordinator_id)
        assert not (coordinator_dir(filled, coordinator_id) / "state.sqlite").exists()

    filled.server.start()
    assert answers(filled) == seen
    assert_one_start_later(positions, log_positions(filled))
    for coordinator_id in (1, 3):
        assert (coordinator_dir(filled, coordinator_id) / "state.sqlite").exists()
    assert_dumps_equal_but_for_one_start(dumps, stopped_dumps(filled, tmp_path / "after"))

    filled.server.start()
    assert_still_writable(filled)
    stopped_dumps(filled, tmp_path / "written")


def test_every_state_deleted_is_rebuilt_from_the_logs(filled: Filled, tmp_path: Path) -> None:
    seen, positions = answers(filled), log_positions(filled)
    dumps = stopped_dumps(filled, tmp_path / "before")
    for coordinator_id in range(COORDINATORS):
        remove_state(filled, coordinator_id)
    filled.server.start()
    assert answers(filled) == seen
    assert_one_start_later(positions, log_positions(filled))
    assert_dumps_equal_but_for_one_start(dumps, stopped_dumps(filled, tmp_path / "after"))


def _garbage(state: Path, other: Path) -> bool:
    state.write_bytes(random.Random(7).randbytes(64 * 1024))
    return True


def _garbage_header(state: Path, other: Path) -> bool:
    data = bytearray(state.read_bytes())
    data[:100] = random.Random(8).randbytes(100)  # the SQLite header, not the pages
    state.write_bytes(bytes(data))
    return True


def _another_coordinators_state(state: Path, other: Path) -> bool:
    shutil.copyfile(other, state)
    return True


def _truncated(state: Path, other: Path) -> bool:
    data = state.read_bytes()
    assert len(data) > 8192
    state.write_bytes(data[: len(data) // 2])
    return True


def _empty(state: Path, other: Path) -> bool:
    state.write_bytes(b"")
    return False  # an empty file is an empty database: rebuilt by replay, nothing to set aside


DAMAGES = {
    "garbage": _garbage,
    "garbage-header": _garbage_header,
    "another-coordinators-state": _another_coordinators_state,
    "truncated": _truncated,
    "empty": _empty,
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_corrupt_state_is_set_aside_and_rebuilt_from_the_log(filled: Filled, tmp_path: Path, damage: str) -> None:
    victim = 2
    seen, positions = answers(filled), log_positions(filled)
    dumps = stopped_dumps(filled, tmp_path / "before")
    state = coordinator_dir(filled, victim) / "state.sqlite"
    for companion in coordinator_state_files(filled.server.data_dir, victim)[1:]:
        companion.unlink(missing_ok=True)
    set_aside_expected = DAMAGES[damage](state, coordinator_dir(filled, 0) / "state.sqlite")
    damaged = state.read_bytes()

    filled.server.start()
    assert answers(filled) == seen
    assert_one_start_later(positions, log_positions(filled))
    aside = sorted(coordinator_dir(filled, victim).glob("state.sqlite.corrupt-*"))
    if set_aside_expected:
        assert len(aside) == 1, sorted(p.name for p in coordinator_dir(filled, victim).iterdir())
        assert aside[0].read_bytes() == damaged, "the damaged file is kept as it was, for the operator"
    assert_dumps_equal_but_for_one_start(dumps, stopped_dumps(filled, tmp_path / "after"))


def _segments(filled: Filled, coordinator_id: int) -> list[Path]:
    return sorted((coordinator_dir(filled, coordinator_id) / "log").glob(f"*{SEGMENT_SUFFIX}"))


def _tail_garbage(log_end: int, epoch: int) -> bytes:
    return b"\x13\x00\x00\x00 half-written garbage \xff\xfe" * 7


def _tail_torn_frame(log_end: int, epoch: int) -> bytes:
    """The next frame, as a crash in the middle of its write leaves it."""
    frame = encode_frame(log_end, epoch, 3, b"\x0a\x10" + bytes(range(200)))
    return frame[: len(frame) - 17]


def _tail_corrupt_frame(log_end: int, epoch: int) -> bytes:
    """The next frame whole, but with a byte that never made it to disk."""
    frame = bytearray(encode_frame(log_end, epoch, 1, b"\x0a\x05hello"))
    frame[-1] ^= 0x55
    return bytes(frame)


TAILS = {"garbage": _tail_garbage, "torn-frame": _tail_torn_frame, "corrupt-frame": _tail_corrupt_frame}


@pytest.mark.parametrize("tail", TAILS, ids=list(TAILS))
def test_torn_log_tail_is_truncated_and_everything_acknowledged_is_served(
    filled: Filled, tmp_path: Path, tail: str
) -> None:
    seen, positions = answers(filled), log_positions(filled)
    dumps = stopped_dumps(filled, tmp_path / "before")
    victim = max(range(COORDINATORS), key=lambda c: len(_segments(filled, c)))
    segments = _segments(filled, victim)
    assert len(segments) > 1, "the log should span segments"
    newest = segments[-1]
    intact = newest.read_bytes()
    end, epoch = positions[victim][0], positions[victim][3]  # the torn frame would have been the next one
    newest.write_bytes(intact + TAILS[tail](end, epoch))

    filled.server.start()
    assert answers(filled) == seen
    assert_one_start_later(positions, log_positions(filled))
    assert_dumps_equal_but_for_one_start(dumps, stopped_dumps(filled, tmp_path / "after"))

    # The damaged tail is gone: the segment holds its old frames, then only the new LeaderChange frame(s).
    after = newest.read_bytes()
    assert after[: len(intact)] == intact
    position = len(intact)
    while position < len(after):
        decoded = decode_frame(after, position)
        assert decoded is not None, f"bytes at {position} of {newest.name} do not verify: the tail was not cut"
        position = decoded[1]
    metadata_log = MetadataLog(newest.parent, 2**40)
    try:
        assert sum(1 for _ in metadata_log.read(0)) > 0  # every segment verifies from the start
        assert metadata_log.end_offset == end + 1
    finally:
        metadata_log.close()


def test_stale_state_catches_up_from_the_log(filled: Filled, tmp_path: Path) -> None:
    """A state older than the log (as after a crash between fsync and apply) is replayed forward."""
    victim = 0
    stopped_dumps(filled, tmp_path / "first")
    saved = tmp_path / "saved-state"
    saved.mkdir()
    for path in coordinator_state_files(filled.server.data_dir, victim):
        if path.exists():
            shutil.copyfile(path, saved / path.name)

    filled.server.start()
    a = next(iter(filled.topics))
    for _ in range(5):
        commit_all(filled, laid_out([batch(a, p, 2, size=120) for p in range(8)]))
    seen, positions = answers(filled), log_positions(filled)
    dumps = stopped_dumps(filled, tmp_path / "before")
    stale_applied = dict(logical_dump(saved / "state.sqlite")["meta"])["applied_offset"]
    assert stale_applied < positions[victim][0]
    remove_state(filled, victim)
    for path in saved.iterdir():
        shutil.copyfile(path, coordinator_dir(filled, victim) / path.name)

    filled.server.start()
    assert answers(filled) == seen
    assert_one_start_later(positions, log_positions(filled))
    assert_dumps_equal_but_for_one_start(dumps, stopped_dumps(filled, tmp_path / "after"))


def test_a_schema_2_state_is_migrated_in_place_and_answers_the_same(filled: Filled) -> None:
    """Schema 3 stores each batch's FindBatches entry, schema 4 each file's part batches, schema 5 each producer's
    last batch's timestamp, schema 6 each partition's local log start and remote timestamp, schema 7 the time index; a
    schema 2 file gains the columns (its files counting their live batches, its producers taking their last batch's
    append time, its partitions holding everything locally) and the index, its rows answer as before."""
    seen = answers(filled)
    assert filled.server.stop() == 0
    for coordinator_id in range(COORDINATORS):
        path = coordinator_dir(filled, coordinator_id) / "state.sqlite"
        db = apsw.Connection(str(path))
        with db:  # back to schema 2: no entry column, no part_batches column, no last_timestamp column
            db.execute("ALTER TABLE batches DROP COLUMN entry")
            db.execute("ALTER TABLE files DROP COLUMN part_batches")
            db.execute("ALTER TABLE producers DROP COLUMN last_timestamp")
            db.execute("ALTER TABLE partitions DROP COLUMN local_log_start_offset")
            db.execute("ALTER TABLE partitions DROP COLUMN remote_max_timestamp")
            for column in ("classic_log_start_offset", "seal_offset", "switch_leader_epoch", "switch_producers"):
                db.execute(f"ALTER TABLE partitions DROP COLUMN {column}")  # schema 9's switch
            db.execute("DROP TABLE time_index")
            db.execute("UPDATE meta SET value = 2 WHERE name = 'schema_version'")
        db.close()

    filled.server.start()
    assert answers(filled) == seen  # the rows without an entry are answered from their columns
    assert_still_writable(filled)
    assert filled.server.stop() == 0
    stored_without, stored_with = 0, 0
    for coordinator_id in range(COORDINATORS):
        db = apsw.Connection(str(coordinator_dir(filled, coordinator_id) / "state.sqlite"))
        assert db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchall() == [(SCHEMA_VERSION,)]
        assert db.execute("SELECT count(*) FROM partitions WHERE seal_offset != -1").fetchall() == [(0,)]  # unswitched
        assert db.execute("SELECT count(*) FROM time_index").fetchall()[0][0] > 0
        assert time_index.index_problems(db) == []  # built at open from the held batches, then kept
        assert db.execute(
            "SELECT count(*) FROM partitions "
            "WHERE local_log_start_offset != log_start_offset OR remote_max_timestamp != -1"
        ).fetchall() == [(0,)]
        assert db.execute("SELECT count(*) FROM files WHERE part_batches < live_batches").fetchall() == [(0,)]
        assert db.execute("SELECT count(*) FROM producers WHERE last_timestamp < 0").fetchall() == [(0,)]
        without, with_entry = db.execute("SELECT count(*) - count(entry), count(entry) FROM batches").fetchall()[0]
        stored_without, stored_with = stored_without + without, stored_with + with_entry
        db.close()
    assert stored_without > 0, "the migration filled old rows: nothing tested the rows without an entry"
    assert stored_with == 4, "the batches committed after the migration carry their entry"
