"""A torn tail is cut; damage inside the log is refused, kept, and recovered only by an operator (issue 12).

On the log alone (MetadataLog, scan_log, plan/apply of `diskless log recover`) and through a real
`diskless serve` process: a flipped byte in the middle of a coordinator's newest segment keeps that
coordinator out of service with the segment byte for byte as it was, even with its state deleted;
`diskless log recover` says what is lost, then recovers from a snapshot plus the log before the
damage, and every acknowledged batch before the damage is served again.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2

import coordinator.runtime.log.frame as frame_module
from coordinator.cli.log_recovery.apply import apply_recovery
from coordinator.cli.log_recovery.plan import RecoveryRefused, plan_recovery
from coordinator.machine import records
from coordinator.runtime.log.frame import HEADER_BYTES, Frame, decode_frame, encode_frame
from coordinator.runtime.log.inspection import scan_log, scan_position
from coordinator.runtime.log.segments import SEGMENT_SUFFIX, CorruptLogError, MetadataLog
from coordinator.runtime.shard.log_replay import rebuild_from_log
from protos import coordinator_pb2 as pb
from tests.harness import (
    REPO,
    Broker,
    ServerProcess,
    batch,
    coordinator_state_files,
    coordinators_of,
    describe_coordinators,
    fetch_all_batches,
)
from tests.snapshot_helpers import create_snapshots
from tests.test_metadata_log import BIG_SEGMENT, append_frames, described, payload_of, segment_files

# ---------------------------------------------------------------------- the log alone


def frames_in(data: bytes) -> list[tuple[int, Frame]]:
    """(byte position, frame) of every frame of an intact segment."""
    found, position = [], 0
    while position < len(data):
        decoded = decode_frame(data, position)
        assert decoded is not None, f"not intact at byte {position}"
        found.append((position, decoded[0]))
        position = decoded[1]
    return found


def one_segment_log(directory: Path, frames: int = 12) -> tuple[Path, bytes, list[tuple[int, Frame]]]:
    log = MetadataLog(directory, BIG_SEGMENT)
    append_frames(log, [1 + i % 3 for i in range(frames)], epoch=4)
    log.close()
    [segment] = segment_files(directory)
    data = segment.read_bytes()
    return segment, data, frames_in(data)


def _flip(data: bytes, index: int, mask: int = 0x01) -> bytes:
    flipped = bytearray(data)
    flipped[index] ^= mask
    return bytes(flipped)


# Damage to the frame at `position` (the middle one); each leaves frames after it that verify.
MIDDLE_DAMAGES: dict[str, Callable[[bytes, int, Frame], bytes]] = {
    "payload-byte": lambda data, position, frame: _flip(data, position + HEADER_BYTES + 5),
    "crc-byte": lambda data, position, frame: _flip(data, position + 5),
    "base-offset-byte": lambda data, position, frame: _flip(data, position + 8),
    "length-slightly-off": lambda data, position, frame: _flip(data, position, 0x10),
    "length-past-the-end": lambda data, position, frame: _flip(data, position + 2, 0x01),
    "length-absurd": lambda data, position, frame: _flip(data, position + 3, 0x80),
    "zeroed-block": lambda data, position, frame: data[:position] + bytes(40) + data[position + 40 :],
    "verifies-but-skips-offsets": lambda data, position, frame: (
        data[:position]
        + encode_frame(frame.base_offset + 100, frame.leader_epoch, frame.record_count, frame.payload)
        + data[position + HEADER_BYTES + len(frame.payload) :]
    ),
    "frame-missing": lambda data, position, frame: (
        data[:position] + data[position + HEADER_BYTES + len(frame.payload) :]
    ),
}


@pytest.mark.parametrize("damage", MIDDLE_DAMAGES, ids=list(MIDDLE_DAMAGES))
def test_damage_inside_the_newest_segment_is_refused_and_left_as_it_was(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "data" / "coordinator-3" / "log"
    segment, data, frames = one_segment_log(directory)
    middle = len(frames) // 2
    position, frame = frames[middle]
    damaged = MIDDLE_DAMAGES[damage](data, position, frame)
    segment.write_bytes(damaged)

    with pytest.raises(CorruptLogError) as raised:
        MetadataLog(directory, BIG_SEGMENT)
    assert segment.read_bytes() == damaged, "a log damaged inside must never be cut or written"
    found = raised.value.damage
    assert found is not None
    assert (found.segment_path, found.byte_position) == (segment.absolute(), position)
    assert found.expected_offset == frame.base_offset
    assert found.following_frame_count >= 1 and found.search_complete
    skipped_end = frame.end_offset + 100 if damage == "verifies-but-skips-offsets" else 0
    assert found.following_end_offset == max(frames[-1][1].end_offset, skipped_end)
    message = str(raised.value)
    for expected in (str(segment.absolute()), f"byte {position} of {len(damaged)}", f"log offset {frame.base_offset}"):
        assert expected in message, message
    assert f"diskless log recover --data-dir {tmp_path / 'data'} --coordinator 3" in message, message
    assert "Nothing was truncated" in message

    # Inspection says the same, and changes nothing either.
    with pytest.raises(CorruptLogError):
        scan_position(directory)
    scan = scan_log(directory)
    assert scan.damage == found and scan.position.end_offset == frame.base_offset
    assert segment.read_bytes() == damaged


def test_a_frame_missing_in_the_middle_names_the_missing_offsets(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    segment, data, frames = one_segment_log(directory)
    position, frame = frames[5]
    segment.write_bytes(MIDDLE_DAMAGES["frame-missing"](data, position, frame))
    with pytest.raises(CorruptLogError, match=f"offsets {frame.base_offset}..{frame.end_offset - 1} are missing"):
        MetadataLog(directory, BIG_SEGMENT)


def _torn_partial_write(data: bytes, last: int) -> bytes:
    return data[: last + HEADER_BYTES + 3]


def _torn_header_only(data: bytes, last: int) -> bytes:
    return data[: last + 9]


def _torn_zeros(data: bytes, last: int) -> bytes:
    return data[:last] + bytes(len(data) - last + 4096)


def _torn_garbage(data: bytes, last: int) -> bytes:
    return data[:last] + b"\x17\x00\x00\x00 not a frame \xff" * 20


def _torn_last_payload_byte(data: bytes, last: int) -> bytes:
    return _flip(data, len(data) - 3)


def _torn_last_length(data: bytes, last: int) -> bytes:
    return _flip(data, last + 1, 0x02)


TORN_TAILS = {
    "partial-write": _torn_partial_write,
    "header-only": _torn_header_only,
    "trailing-zeros": _torn_zeros,
    "trailing-garbage": _torn_garbage,
    "last-frame-payload-flipped": _torn_last_payload_byte,
    "last-frame-length-flipped": _torn_last_length,
}


@pytest.mark.parametrize("tear", TORN_TAILS, ids=list(TORN_TAILS))
def test_torn_tail_is_cut_and_the_log_reopens_at_the_previous_end(
    tmp_path: Path, tear: str, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "log"
    segment, data, frames = one_segment_log(directory)
    last_position, last = frames[-1]
    torn = TORN_TAILS[tear](data, last_position)
    segment.write_bytes(torn)
    assert scan_log(directory).torn_tail_bytes == len(torn) - last_position  # inspection reports, does not cut
    assert segment.read_bytes() == torn

    with caplog.at_level(logging.WARNING, logger="coordinator.runtime.log.segments"):
        log = MetadataLog(directory, BIG_SEGMENT)
    assert log.end_offset == last.base_offset
    assert segment.read_bytes() == data[:last_position]
    assert f"truncating {len(torn) - last_position} bytes" in caplog.text
    assert described(log.read(0)) == [(f.base_offset, f.record_count, f.leader_epoch) for _, f in frames[:-1]]
    more = append_frames(log, [2], epoch=5)
    assert more == [(last.base_offset, 2, 5)]
    log.close()


def test_a_torn_group_write_of_several_frames_is_cut(tmp_path: Path) -> None:
    """A crash mid group write: the first frames complete, the next one cut, nothing after."""
    directory = tmp_path / "log"
    log = MetadataLog(directory, BIG_SEGMENT)
    append_frames(log, [1, 1, 1])
    log.close()
    [segment] = segment_files(directory)
    intact = segment.read_bytes()
    group = b"".join(encode_frame(3 + i, 1, 1, payload_of(3 + i)) for i in range(3))
    segment.write_bytes(intact + group[: len(group) - 30])
    log = MetadataLog(directory, BIG_SEGMENT)
    assert log.end_offset == 5  # two whole frames of the group survive: written, never acknowledged, harmless
    log.close()


def test_an_exhausted_search_refuses_rather_than_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames that parse but fail their CRC cost a CRC each; past the budget the log cannot tell, so it refuses."""
    directory = tmp_path / "log"
    segment, data, frames = one_segment_log(directory)
    damaged = data
    for position, _ in frames[4:]:
        damaged = _flip(damaged, position + 5)  # every frame from the fifth on fails its CRC
    segment.write_bytes(damaged)
    monkeypatch.setattr(frame_module, "SEARCH_FAILED_CRC_BYTES_MAX", 100)
    with pytest.raises(CorruptLogError, match="stopped at its budget"):
        MetadataLog(directory, BIG_SEGMENT)
    assert segment.read_bytes() == damaged
    monkeypatch.undo()
    log = MetadataLog(directory, BIG_SEGMENT)  # with the real budget: nothing verifies after, a torn tail
    assert log.end_offset == frames[4][1].base_offset
    log.close()


def rolled_log(directory: Path) -> tuple[list[tuple[int, int, int]], list[Path]]:
    log = MetadataLog(directory, 250)
    written = append_frames(log, [1, 2, 1, 1, 3, 1, 1, 1, 2, 1, 1, 1, 1, 2, 1, 1])
    log.close()
    files = segment_files(directory)
    assert len(files) >= 4
    return written, files


def _segment_base(path: Path) -> int:
    return int(path.name[: -len(SEGMENT_SUFFIX)])


def test_damage_in_an_older_segment_refuses_on_read_and_counts_what_follows(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    written, files = rolled_log(directory)
    older = files[1]
    frames = frames_in(older.read_bytes())
    damaged = _flip(older.read_bytes(), frames[1][0] + HEADER_BYTES + 4)
    older.write_bytes(damaged)
    before = {p.name: p.read_bytes() for p in files}

    log = MetadataLog(directory, 250)  # an open reads only the newest segment
    with pytest.raises(CorruptLogError) as raised:
        list(log.read(0))
    log.close()
    found = raised.value.damage
    assert found is not None and found.segment_path == older.absolute()
    after = [w for w in written if w[0] > frames[1][1].base_offset]
    assert found.following_frame_count == len(after), "frames after it here and in every later segment"
    assert found.following_end_offset == written[-1][0] + written[-1][1]
    assert {p.name: p.read_bytes() for p in files} == before
    assert scan_log(directory, 0).damage == found


def test_a_frame_that_verifies_but_does_not_continue_in_an_older_segment_is_damage(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    _, files = rolled_log(directory)
    older = files[1]
    data = older.read_bytes()
    position, frame = frames_in(data)[1]
    older.write_bytes(MIDDLE_DAMAGES["verifies-but-skips-offsets"](data, position, frame))
    log = MetadataLog(directory, 250)
    with pytest.raises(CorruptLogError, match=f"offsets {frame.base_offset}\\.\\.{frame.base_offset + 99} are missing"):
        list(log.read(0))
    log.close()


def test_a_missing_middle_segment_refuses_and_is_named(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    _, files = rolled_log(directory)
    files[2].unlink()
    log = MetadataLog(directory, 250)
    with pytest.raises(CorruptLogError, match="a segment file is missing"):
        list(log.read(0))
    log.close()
    scan = scan_log(directory, 0)
    assert scan.damage is not None and scan.damage.segment_path == files[3].absolute()
    assert scan.position.end_offset == _segment_base(files[2])


# ---------------------------------------------------------------------- recovery on the log alone


def test_recovery_of_a_log_alone_keeps_the_prefix_and_sets_everything_aside(tmp_path: Path) -> None:
    coordinator_directory = tmp_path / "data" / "coordinator-0"
    segment, data, frames = one_segment_log(coordinator_directory / "log")
    position, frame = frames[6]
    damaged = _flip(data, position + HEADER_BYTES + 2)
    segment.write_bytes(damaged)

    plan = plan_recovery(coordinator_directory, 0)
    assert segment.read_bytes() == damaged, "a plan changes nothing"
    assert (plan.kept_end_offset, plan.prefix_bytes) == (frame.base_offset, position)
    assert [f.base_offset for f in plan.lost_frames] == [f.base_offset for _, f in frames[7:]]
    assert plan.lost_end_offset == frames[-1][1].end_offset
    assert plan.undecodable_offsets == ((frame.base_offset, frame.end_offset - 1),)
    assert plan.snapshot is None and plan.moved_segments == (segment.name,)
    assert all("partition created: topic-" in f.records[0].summary for f in plan.lost_frames)

    assert plan.leader_epoch_after == 5  # above the lost frames' epoch 4

    outcome = apply_recovery(plan, 1234)
    kept = outcome.recovery_directory / "log" / segment.name
    assert kept.read_bytes() == damaged, "the damaged segment is kept byte for byte"
    leader_change = encode_frame(frame.base_offset, 5, 1, records.encode_batch([records.leader_change(5, 0)]))
    assert segment.read_bytes() == data[:position] + leader_change
    report = json.loads((outcome.recovery_directory / "report.json").read_text())
    assert report["action"] == "recovered" and report["kept_end_offset"] == frame.base_offset
    log = MetadataLog(coordinator_directory / "log", BIG_SEGMENT)
    assert log.position().end_offset == frame.base_offset + 1 and log.position().last_epoch == 5
    assert len(list(log.read(0))) == 7
    log.close()
    assert plan_recovery(coordinator_directory, 0).damage is None


def test_recovery_of_a_missing_middle_segment_moves_the_segments_after_it(tmp_path: Path) -> None:
    coordinator_directory = tmp_path / "coordinator-1"
    _, files = rolled_log(coordinator_directory / "log")
    files[2].unlink()
    plan = plan_recovery(coordinator_directory, 1)
    assert plan.prefix_bytes == -1 and plan.kept_end_offset == _segment_base(files[2])
    assert plan.moved_segments == tuple(p.name for p in files[3:])
    outcome = apply_recovery(plan, 99)
    assert sorted(p.name for p in (outcome.recovery_directory / "log").iterdir()) == [p.name for p in files[3:]]
    log = MetadataLog(coordinator_directory / "log", 250)
    assert log.end_offset == _segment_base(files[2]) + 1 and list(log.read(0))
    log.close()


def test_recovery_is_refused_when_nothing_before_the_damage_can_rebuild_the_state(tmp_path: Path) -> None:
    coordinator_directory = tmp_path / "coordinator-0"
    _, files = rolled_log(coordinator_directory / "log")
    files[0].unlink()  # pruned as below a snapshot, and no snapshot survives
    older = files[-2]
    damaged = _flip(older.read_bytes(), HEADER_BYTES + 1)
    older.write_bytes(damaged)
    with pytest.raises(RecoveryRefused, match="cannot be rebuilt"):
        plan_recovery(coordinator_directory, 0)
    assert older.read_bytes() == damaged


def test_recovery_refuses_a_log_that_changed_since_its_plan(tmp_path: Path) -> None:
    coordinator_directory = tmp_path / "coordinator-0"
    segment, data, frames = one_segment_log(coordinator_directory / "log")
    segment.write_bytes(_flip(data, frames[3][0] + HEADER_BYTES + 2))
    plan = plan_recovery(coordinator_directory, 0)
    changed = _flip(segment.read_bytes(), len(data) - 1)
    segment.write_bytes(changed)
    with pytest.raises(RecoveryRefused, match="changed since"):
        apply_recovery(plan, 1)
    assert segment.read_bytes() == changed
    assert not list(coordinator_directory.glob("log-recovery-*"))


# ---------------------------------------------------------------------- through a real node

COORDINATORS = 4
PARTITIONS = 8
# One segment per coordinator (the default 64 MiB), snapshots only when a test takes them.
NODE_SETTINGS = {"diskless.coordinator.snapshot.interval.bytes": "0", "diskless.coordinator.snapshot.interval.ms": "0"}
LOAD_TIMEOUT_S = 60


class UncheckedServer(ServerProcess):
    """A node whose start waits until every coordinator has loaded or failed, not for SERVING."""

    def wait_serving(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                states = {c.state for c in describe_coordinators(self.stub).values()}
                if states and states <= {"ACTIVE", "FAILED"}:
                    return
            except grpc.RpcError:
                pass
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"coordinators not loaded in time:\n{''.join(self.output)}")


@dataclass
class Acknowledged:
    """A batch the node acknowledged: where it was put."""

    object_key: str
    partition: int
    base_offset: int
    last_offset: int


@dataclass
class Node:
    server: ServerProcess
    topic_id: bytes
    owners: dict[int, int]  # partition -> coordinator
    acknowledged: list[Acknowledged] = field(default_factory=list)
    sequences: dict[int, int] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.server.data_dir

    def commit(self, count: int) -> None:
        """One batch per file from an idempotent producer per partition, round robin over the partitions."""
        broker = Broker(self.server.stub, COORDINATORS)
        for _ in range(count):
            partition = len(self.acknowledged) % PARTITIONS
            records_in_batch = 1 + len(self.acknowledged) % 3
            sequence = self.sequences.get(partition, 0)
            key = f"wal/damage-{len(self.acknowledged):04d}"
            sent = batch(
                self.topic_id, partition, records_in_batch, producer_id=500 + partition, epoch=0, sequence=sequence
            )
            answer = broker.commit([sent], object_key=key).batches[0]
            assert answer.error_code == pb.NONE, answer
            self.sequences[partition] = sequence + records_in_batch
            self.acknowledged.append(
                Acknowledged(
                    key, partition, answer.assigned_base_offset, answer.assigned_base_offset + records_in_batch - 1
                )
            )

    def segment(self, coordinator_id: int) -> Path:
        [segment] = segment_files(self.data_dir / f"coordinator-{coordinator_id}" / "log")
        return segment


def start_node(tmp_path: Path) -> Node:
    server = ServerProcess(tmp_path / "data", coordinators=COORDINATORS, settings=NODE_SETTINGS).start()
    topic_id = Broker(server.stub, COORDINATORS).create_topic("damage", PARTITIONS)
    owners = {p: c for (_, p), c in coordinators_of(server.stub, {topic_id: PARTITIONS}).items()}
    return Node(server, topic_id, owners)


@pytest.fixture
def node(tmp_path: Path) -> Any:
    started = start_node(tmp_path)
    yield started
    if started.server.process is not None and started.server.process.poll() is None:
        started.server.kill()


def object_keys_of(frames: list[tuple[int, Frame]]) -> list[str]:
    keys = []
    for _, frame in frames:
        for record in records.decode_batch(frame.payload):
            if record.WhichOneof("record") == "file_committed":
                keys.append(record.file_committed.object_key)
    return keys


@dataclass
class Damage:
    coordinator_id: int
    segment: Path
    damaged: bytes
    frame: Frame  # the damaged frame as it was
    keys_before: list[str]  # files committed in frames before the damaged one
    keys_lost: list[str]  # in the damaged frame and after it


def damage_middle_frame(node: Node, coordinator_id: int, after_offset: int = 0) -> Damage:
    """Flips one payload byte of a FileCommitted frame halfway through the coordinator's newest segment."""
    segment = node.segment(coordinator_id)
    data = segment.read_bytes()
    frames = frames_in(data)
    committed = [i for i, (_, f) in enumerate(frames) if object_keys_of([(0, f)]) and f.base_offset >= after_offset]
    index = committed[len(committed) // 2]
    position, frame = frames[index]
    damaged = _flip(data, position + HEADER_BYTES + 12)
    segment.write_bytes(damaged)
    return Damage(
        coordinator_id, segment, damaged, frame, object_keys_of(frames[:index]), object_keys_of(frames[index:])
    )


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def assert_refused_with_others_serving(server: UncheckedServer, node: Node, damage: Damage) -> None:
    """The damaged coordinator stays out of service, the node NOT_SERVING; the other coordinators answer."""
    described = describe_coordinators(server.stub)
    assert described[damage.coordinator_id].state == "FAILED", described[damage.coordinator_id]
    assert {c.state for i, c in described.items() if i != damage.coordinator_id} == {"ACTIVE"}
    assert server.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    for partition, owner in node.owners.items():
        if owner == damage.coordinator_id:
            continue
        found = {b.base_offset: b.object_key for b in fetch_all_batches(server.stub, node.topic_id, partition)[0]}
        for ack in node.acknowledged:
            if ack.partition == partition:
                assert found.get(ack.base_offset) == ack.object_key
    assert "damaged inside" in "".join(server.output), "the node's log says what is damaged"
    assert damage.segment.read_bytes() == damage.damaged, "the damaged segment is left byte for byte"


def assert_description_names_the_damage(server: ServerProcess, damage: Damage) -> None:
    """DescribeCoordinators carries the whole statement (the lead's shard change puts it there)."""
    described = describe_coordinators(server.stub)[damage.coordinator_id]
    assert described.error_code == pb.COORDINATOR_NOT_AVAILABLE, described
    assert "damaged inside" in described.error_message, described.error_message
    assert str(damage.segment.absolute()) in described.error_message
    assert "diskless log recover" in described.error_message


def assert_served_after_recovery(node: Node, damage: Damage, report: dict[str, Any]) -> None:
    """Every acknowledged batch before the damage is served where it was; offsets go back as the report said."""
    stub = node.server.stub
    reused = {entry["partition"]: entry for entry in report["reused"]}
    lost_keys = set(damage.keys_lost)
    for partition, owner in node.owners.items():
        batches, _, high_watermark = fetch_all_batches(stub, node.topic_id, partition)
        found = {b.base_offset: b.object_key for b in batches}
        kept = [a for a in node.acknowledged if a.partition == partition and a.object_key not in lost_keys]
        for ack in kept:
            assert found.get(ack.base_offset) == ack.object_key, f"acknowledged {ack} is not served"
        lost = [a for a in node.acknowledged if a.partition == partition and a.object_key in lost_keys]
        if owner != damage.coordinator_id or not lost:
            assert partition not in reused
            continue
        assert all(a.object_key not in found.values() for a in lost)
        entry = reused[partition]
        assert entry["first_offset"] == min(a.base_offset for a in lost) == high_watermark, entry
        assert entry["end_offset"] == max(a.last_offset for a in lost) + 1, entry


def recover(node: Node, coordinator_id: int, *flags: str) -> subprocess.CompletedProcess[str]:
    return diskless("log", "recover", "--data-dir", str(node.data_dir), "--coordinator", str(coordinator_id), *flags)


def restart_unchecked(node: Node) -> UncheckedServer:
    server = UncheckedServer(node.data_dir, coordinators=COORDINATORS, settings=NODE_SETTINGS)
    node.server = server
    return server.start()


@pytest.mark.slow
def test_a_node_refuses_a_damaged_coordinator_and_recovers_it_from_the_whole_log(node: Node) -> None:
    node.commit(96)
    assert node.server.stop() == 0
    damage = damage_middle_frame(node, node.owners[0])

    server = restart_unchecked(node)
    wait_for(lambda: describe_coordinators(server.stub)[damage.coordinator_id].state == "FAILED", "the refusal")
    assert_refused_with_others_serving(server, node, damage)
    assert server.stop() == 0

    described = diskless("describe", "--data-dir", str(node.data_dir), "--json")
    assert described.returncode == 1, described.stderr
    row = {c["coordinator_id"]: c for c in json.loads(described.stdout)["coordinators"]}[damage.coordinator_id]
    assert row["log_end_offset"] == -1 and "damaged inside" in row["error"], row

    dry_run = recover(node, damage.coordinator_id)
    assert dry_run.returncode == 0, dry_run.stderr
    assert "dry run, nothing changed" in dry_run.stdout
    for key in damage.keys_lost[1:]:  # the damaged frame's own file cannot be decoded
        assert key in dry_run.stdout, f"the dry run does not name the lost file {key}"
    assert damage.segment.read_bytes() == damage.damaged

    done = recover(node, damage.coordinator_id, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["action"] == "recovered" and report["kept_end_offset"] == damage.frame.base_offset
    lost_keys = [
        r["fields"]["object_key"] for f in report["lost_frames"] for r in f["records"] if r["kind"] == "file_committed"
    ]
    assert lost_keys == damage.keys_lost[1:]
    assert report["undecodable_offsets"][0][0] == damage.frame.base_offset
    assert report["snapshot"] is None and report["state_files"], "no snapshot: the state goes, the log rebuilds it"
    aside = Path(report["recovery_directory"])
    assert (aside / "log" / damage.segment.name).read_bytes() == damage.damaged
    assert (aside / "state.sqlite").exists()

    node.server = ServerProcess(node.data_dir, coordinators=COORDINATORS, settings=NODE_SETTINGS).start()
    assert_served_after_recovery(node, damage, report)
    # The report said the lost offsets are handed out again: the next batch gets the first of them.
    partition, expected = report["reused"][0]["partition"], report["reused"][0]["first_offset"]
    answer = Broker(node.server.stub, COORDINATORS).commit([batch(node.topic_id, partition, 1)]).batches[0]
    assert (answer.error_code, answer.assigned_base_offset) == (pb.NONE, expected)


@pytest.mark.slow
def test_a_damaged_coordinator_without_state_still_refuses_then_recovers_from_a_snapshot(node: Node) -> None:
    node.commit(40)
    create_snapshots(node.server)
    victim = node.owners[1]
    snapshot_end = describe_coordinators(node.server.stub)[victim].last_snapshot_end_offset
    node.commit(56)
    create_snapshots(node.server)  # a second snapshot, past the damage to come
    assert node.server.stop() == 0
    damage = damage_middle_frame(node, victim, after_offset=snapshot_end)
    for path in coordinator_state_files(node.data_dir, victim):
        path.unlink(missing_ok=True)

    # Without its state the coordinator used to serve the history cut at the damage; it refuses instead.
    server = restart_unchecked(node)
    wait_for(lambda: describe_coordinators(server.stub)[victim].state == "FAILED", "the refusal")
    assert_refused_with_others_serving(server, node, damage)
    assert server.stop() == 0

    done = recover(node, victim, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["snapshot"]["snapshot_id"]["end_offset"] == snapshot_end <= damage.frame.base_offset
    assert len(report["moved_snapshots"]) == 1 and report["state_files"] == []
    aside = Path(report["recovery_directory"])
    assert len(list((aside / "snapshots").glob("*.manifest"))) == 1, "the snapshot past the damage is set aside"

    node.server = ServerProcess(node.data_dir, coordinators=COORDINATORS, settings=NODE_SETTINGS).start()
    assert_served_after_recovery(node, damage, report)


@pytest.mark.slow
def test_describe_coordinators_names_the_damage(node: Node) -> None:
    node.commit(24)
    assert node.server.stop() == 0
    damage = damage_middle_frame(node, node.owners[2])
    server = restart_unchecked(node)
    wait_for(lambda: describe_coordinators(server.stub)[damage.coordinator_id].state == "FAILED", "the refusal")
    try:
        assert_description_names_the_damage(server, damage)
    finally:
        server.stop()


@pytest.mark.slow
def test_recover_refuses_a_running_node_and_wants_one_coordinator(node: Node) -> None:
    done = recover(node, 0)
    assert done.returncode == 2 and "in use" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert node.server.stop() == 0
    done = diskless("log", "recover", "--data-dir", str(node.data_dir))
    assert done.returncode == 2 and "one --coordinator" in done.stderr
    done = recover(node, 0)
    assert done.returncode == 0 and "nothing to recover" in done.stdout, done


def _log_with_state(coordinator_directory: Path) -> tuple[Path, bytes, list[tuple[int, Frame]]]:
    """12 frames, each creating a partition of its own topic, and the state they build."""
    log = MetadataLog(coordinator_directory / "log", BIG_SEGMENT)
    for offset in range(12):
        created = records.partition_created(offset, offset.to_bytes(16, "big"), f"topic-{offset}", 0)
        log.append(encode_frame(offset, 3, 1, records.encode_batch([created])), offset + 1, 3)
    log.close()
    rebuild_from_log(coordinator_directory, 0, coordinator_directory / "state.sqlite")
    [segment] = segment_files(coordinator_directory / "log")
    data = segment.read_bytes()
    return segment, data, frames_in(data)


def test_a_state_ahead_of_its_log_is_recovered_too(tmp_path: Path) -> None:
    """The log verifies but lost its end; the state set aside, the log rebuilds it (the shard refused to load)."""
    coordinator_directory = tmp_path / "coordinator-0"
    segment, data, frames = _log_with_state(coordinator_directory)
    end, cut = 8, frames[8][0]
    segment.write_bytes(data[:cut])  # a segment cut short at a frame boundary: every frame left verifies
    plan = plan_recovery(coordinator_directory, 0)
    assert plan.damage is not None and "missing from the log" in plan.damage.problem
    assert (plan.kept_end_offset, plan.lost_end_offset, plan.prefix_bytes) == (end, 12, cut)
    assert plan.undecodable_offsets == ((8, 11),) and plan.lost_frames == ()
    outcome = apply_recovery(plan, 7)
    assert (outcome.recovery_directory / "state.sqlite").exists()
    assert not (coordinator_directory / "state.sqlite").exists()
    assert plan_recovery(coordinator_directory, 0).damage is None


def test_a_recovery_interrupted_before_the_state_moved_is_finished_by_running_it_again(tmp_path: Path) -> None:
    coordinator_directory = tmp_path / "coordinator-0"
    segment, data, frames = _log_with_state(coordinator_directory)
    segment.write_bytes(_flip(data, frames[5][0] + HEADER_BYTES + 1))
    first = apply_recovery(plan_recovery(coordinator_directory, 0), 1)
    # As if the process died before it set the state aside: the log is cut, the state still ahead of it.
    (first.recovery_directory / "state.sqlite").rename(coordinator_directory / "state.sqlite")

    again = plan_recovery(coordinator_directory, 0)
    assert again.damage is not None and again.kept_end_offset == frames[5][1].base_offset + 1
    second = apply_recovery(again, 2)
    assert (second.recovery_directory / "state.sqlite").exists()
    assert plan_recovery(coordinator_directory, 0).damage is None
