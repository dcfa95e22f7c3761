"""The metadata log on its own (no server): frames, torn tails, corruption, segments, failed appends."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.base.invariants import InvariantViolation
from coordinator.machine import records
from coordinator.runtime.log import segments as segments_module
from coordinator.runtime.log.frame import HEADER_BYTES, Frame, decode_frame, encode_frame
from coordinator.runtime.log.segments import SEGMENT_SUFFIX, CorruptLogError, LogPosition, MetadataLog, segment_name

BIG_SEGMENT = 2**40  # never rolls


def payload_of(offset: int, size: int = 40) -> bytes:
    """A recognisable payload for the frame at `offset` (real records, padded with a topic name)."""
    record = records.partition_created(offset, bytes(range(1, 17)), f"topic-{offset:06d}-" + "x" * size, 0)
    return records.encode_batch([record])


def append_frames(
    log: MetadataLog, counts: list[int], epoch: int = 1, payload_size: int = 40
) -> list[tuple[int, int, int]]:
    """Appends one frame per count, each in its own group; returns (base, count, epoch) per frame."""
    written = []
    for count in counts:
        base = log.end_offset
        log.append(encode_frame(base, epoch, count, payload_of(base, payload_size)), base + count, epoch)
        written.append((base, count, epoch))
    return written


def described(frames: Iterator[Frame]) -> list[tuple[int, int, int]]:
    return [(f.base_offset, f.record_count, f.leader_epoch) for f in frames]


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{SEGMENT_SUFFIX}"))


def reopen(log: MetadataLog, segment_bytes: int = BIG_SEGMENT) -> MetadataLog:
    log.close()
    return MetadataLog(log.directory, segment_bytes)


# ---------------------------------------------------------------------- frames


def test_frames_round_trip_back_to_back_in_one_buffer() -> None:
    specs = [(0, 1, 1, b"\x01"), (1, 3, 1, payload_of(1)), (4, 2, 7, b"z" * 5000), (6, 1, 2**31 - 1, b"")]
    buffer = b"".join(encode_frame(*spec) for spec in specs)
    position = 0
    for base, epoch, count, payload in specs:
        decoded = decode_frame(buffer, position)
        assert decoded is not None
        frame, next_position = decoded
        assert frame == Frame(base, epoch, count, payload)
        assert frame.end_offset == base + count
        assert next_position - position == HEADER_BYTES + len(payload)
        position = next_position
    assert position == len(buffer)
    assert decode_frame(buffer, position) is None  # the end of the buffer is no frame
    assert decode_frame(memoryview(buffer), 0) == decode_frame(buffer, 0)


def test_frames_that_do_not_verify_decode_as_none() -> None:
    good = encode_frame(10, 3, 2, payload_of(10))
    for cut in (1, HEADER_BYTES - 1, HEADER_BYTES, len(good) - 1):
        assert decode_frame(good[:cut], 0) is None, f"a frame cut at byte {cut} must not decode"
    for index in range(len(good)):
        flipped = bytearray(good)
        flipped[index] ^= 0x40
        assert decode_frame(bytes(flipped), 0) is None, f"a frame with byte {index} flipped must not decode"
    assert decode_frame(encode_frame(-1, 1, 1, b"x"), 0) is None  # negative base offset
    assert decode_frame(encode_frame(0, 1, 0, b"x"), 0) is None  # no records
    assert decode_frame(b"\xff\xff\xff\xff" + good[4:], 0) is None  # absurd length


# ---------------------------------------------------------------------- append, reopen, read


def test_appended_frames_are_read_back_after_reopen(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    assert log.position().end_offset == 0 and log.position().last_epoch == 0
    written = append_frames(log, [1, 2, 5, 1], epoch=3)
    # A group commit: several frames in one append (one write, one fdatasync).
    group = encode_frame(9, 4, 1, payload_of(9)) + encode_frame(10, 4, 3, payload_of(10))
    log.append(group, 13, 4)
    written += [(9, 1, 4), (10, 3, 4)]
    assert log.flush_count == 5
    assert described(log.read(0)) == written
    log = reopen(log)
    position = log.position()
    assert (position.start_offset, position.end_offset, position.last_epoch) == (0, 13, 4)
    assert described(log.read(0)) == written
    assert [f.payload for f in log.read(0)][2] == payload_of(3)
    log.close()


def test_append_that_goes_back_is_refused(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    append_frames(log, [2])
    with pytest.raises(InvariantViolation):
        log.append(encode_frame(0, 1, 1, b"x"), 1, 1)
    assert described(reopen(log).read(0)) == [(0, 2, 1)]


def test_read_starts_at_any_frame_boundary(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 250)  # three frames per segment
    written = append_frames(log, [1, 3, 2, 1, 4, 1, 1, 2, 5, 1, 1, 3])
    assert len(segment_files(log.directory)) > 2
    for index, (base, _, _) in enumerate(written):
        assert described(log.read(base)) == written[index:], f"read from {base}"
    assert described(log.read(log.end_offset)) == []


def test_read_outside_the_log_or_off_a_frame_boundary_is_refused(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    append_frames(log, [1, 3, 2])  # boundaries 0, 1, 4, 6
    with pytest.raises(InvariantViolation):
        list(log.read(7))
    with pytest.raises(InvariantViolation):
        list(log.read(2))  # inside the frame 1..3
    log.close()


# ---------------------------------------------------------------------- torn tails


def _tear_partial_header(data: bytes, last_start: int) -> bytes:
    return data[: last_start + 5]


def _tear_partial_payload(data: bytes, last_start: int) -> bytes:
    return data[:-3]


def _tear_garbage_appended(data: bytes, last_start: int) -> bytes:
    return data + b"\x00\x17garbage that is not a frame" * 3


def _tear_zeros_appended(data: bytes, last_start: int) -> bytes:
    return data + bytes(4096)  # a file extended by a crash before its data reached the disk


def _tear_flipped_payload_byte(data: bytes, last_start: int) -> bytes:
    flipped = bytearray(data)
    flipped[-2] ^= 0x01
    return bytes(flipped)


def _tear_flipped_header_byte(data: bytes, last_start: int) -> bytes:
    flipped = bytearray(data)
    flipped[last_start + HEADER_BYTES - 3] ^= 0x80  # inside the record count
    return bytes(flipped)


def _tear_flipped_length(data: bytes, last_start: int) -> bytes:
    flipped = bytearray(data)
    flipped[last_start] ^= 0x04
    return bytes(flipped)


def _tear_duplicate_of_last_frame(data: bytes, last_start: int) -> bytes:
    return data + data[last_start:]  # verifies, but its base offset does not follow the log


TEARS = {
    "partial-header": (_tear_partial_header, False),
    "partial-payload": (_tear_partial_payload, False),
    "garbage-appended": (_tear_garbage_appended, True),
    "zeros-appended": (_tear_zeros_appended, True),
    "flipped-payload-byte": (_tear_flipped_payload_byte, False),
    "flipped-header-byte": (_tear_flipped_header_byte, False),
    "flipped-length": (_tear_flipped_length, False),
    "last-frame-repeated": (_tear_duplicate_of_last_frame, True),
}


@pytest.mark.parametrize("segment_bytes", [BIG_SEGMENT, 250], ids=["one-segment", "many-segments"])
@pytest.mark.parametrize("tear", TEARS, ids=list(TEARS))
def test_torn_tail_is_truncated_at_open_and_the_log_continues(tmp_path: Path, tear: str, segment_bytes: int) -> None:
    tear_function, last_frame_survives = TEARS[tear]
    log = MetadataLog(tmp_path / "log", segment_bytes)
    written = append_frames(log, [1, 2, 1, 3, 1, 1, 2, 1, 1, 4], epoch=2)
    last_start = log._active_size - (HEADER_BYTES + len(payload_of(written[-1][0])))
    log.close()
    active = segment_files(tmp_path / "log")[-1]
    intact = active.read_bytes()
    active.write_bytes(tear_function(intact, last_start))

    log = MetadataLog(tmp_path / "log", segment_bytes)
    good = written if last_frame_survives else written[:-1]
    good_end = good[-1][0] + good[-1][1]
    assert log.position().end_offset == good_end
    assert log.position().last_epoch == 2
    assert active.read_bytes() == (intact if last_frame_survives else intact[:last_start]), "tail not truncated"
    assert described(log.read(0)) == good

    # The log goes on from the last good frame, in a new epoch, and survives another reopen.
    more = append_frames(log, [2, 1], epoch=3)
    assert more[0][0] == good_end
    log = reopen(log, segment_bytes)
    assert described(log.read(0)) == good + more
    assert log.position().end_offset == more[-1][0] + more[-1][1]
    assert log.position().last_epoch == 3
    log.close()


def test_wholly_torn_active_segment_keeps_the_previous_segments(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 500)
    written = append_frames(log, [1] * 12, epoch=5)
    log.close()
    files = segment_files(tmp_path / "log")
    assert len(files) > 2
    newest_base = int(files[-1].name[: -len(SEGMENT_SUFFIX)])
    files[-1].write_bytes(files[-1].read_bytes()[:7])  # not even one header survives

    log = MetadataLog(tmp_path / "log", 500)
    assert files[-1].stat().st_size == 0
    position = log.position()
    assert (position.end_offset, position.last_epoch) == (newest_base, 5)  # the epoch of the previous segment
    survivors = [w for w in written if w[0] < newest_base]
    assert described(log.read(0)) == survivors
    more = append_frames(log, [1, 1], epoch=6)
    assert described(reopen(log, 500).read(0)) == survivors + more


# ---------------------------------------------------------------------- corruption inside the log


def _rolled_log(directory: Path) -> tuple[MetadataLog, list[tuple[int, int, int]], list[Path]]:
    log = MetadataLog(directory, 250)
    written = append_frames(log, [1, 2, 1, 1, 3, 1, 1, 1, 2, 1, 1, 1, 1, 2])
    files = segment_files(directory)
    assert len(files) >= 3
    return log, written, files


def test_corrupt_frame_in_an_older_segment_raises_on_read(tmp_path: Path) -> None:
    log, written, files = _rolled_log(tmp_path / "log")
    log.close()
    first = bytearray(files[0].read_bytes())
    first[HEADER_BYTES + 2] ^= 0xFF  # the payload of the first frame
    files[0].write_bytes(bytes(first))

    log = MetadataLog(tmp_path / "log", 250)  # open checks only the newest segment's tail
    assert log.position().end_offset == written[-1][0] + written[-1][1]
    with pytest.raises(CorruptLogError):
        list(log.read(0))
    # A reader starting past the damaged segment (replay from an applied offset) is not affected.
    second_base = int(files[1].name[: -len(SEGMENT_SUFFIX)])
    assert described(log.read(second_base)) == [w for w in written if w[0] >= second_base]
    assert files[0].read_bytes() == bytes(first), "an older segment must never be truncated"
    log.close()


def test_torn_end_of_an_older_segment_raises_on_read(tmp_path: Path) -> None:
    log, _, files = _rolled_log(tmp_path / "log")
    log.close()
    files[1].write_bytes(files[1].read_bytes()[:-4])
    log = MetadataLog(tmp_path / "log", 250)
    with pytest.raises(CorruptLogError):
        list(log.read(0))
    log.close()


def test_older_segment_missing_whole_frames_raises_on_read(tmp_path: Path) -> None:
    """A segment cut at a frame boundary verifies frame by frame, but leaves a gap in the offsets."""
    log, _written, files = _rolled_log(tmp_path / "log")
    log.close()
    second_base = int(files[1].name[: -len(SEGMENT_SUFFIX)])
    first_frame_bytes = HEADER_BYTES + len(payload_of(second_base))
    files[1].write_bytes(files[1].read_bytes()[:first_frame_bytes])  # keep only its first frame
    log = MetadataLog(tmp_path / "log", 250)
    with pytest.raises(CorruptLogError):
        list(log.read(0))
    log.close()


def test_missing_middle_segment_raises_on_read(tmp_path: Path) -> None:
    log, _, files = _rolled_log(tmp_path / "log")
    log.close()
    files[1].unlink()
    log = MetadataLog(tmp_path / "log", 250)
    with pytest.raises(CorruptLogError):
        list(log.read(0))
    log.close()


# ---------------------------------------------------------------------- segments


def test_segments_roll_at_segment_bytes_and_reads_cross_them(tmp_path: Path) -> None:
    segment_bytes = 1024
    log = MetadataLog(tmp_path / "log", segment_bytes)
    frame_bytes = HEADER_BYTES + len(payload_of(0, 200))
    counts = [1 + (i % 3) for i in range(30)]
    written = append_frames(log, counts, payload_size=200)
    files = segment_files(tmp_path / "log")
    assert len(files) >= 4
    bases = [int(f.name[: -len(SEGMENT_SUFFIX)]) for f in files]
    assert bases[0] == 0
    frame_bases = {w[0] for w in written}
    for path, base in zip(files, bases, strict=True):
        assert path.name == segment_name(base)
        assert base in frame_bases, f"segment {path.name} does not start at a frame"
    for path in files[:-1]:
        size = path.stat().st_size
        # Rolled once it reached segment.bytes, not earlier: the frame before the roll still fitted under it.
        assert segment_bytes <= size < segment_bytes + frame_bytes, f"{path.name} has {size} bytes"
    assert files[-1].stat().st_size <= segment_bytes + frame_bytes
    assert described(log.read(0)) == written
    for base in bases[1:]:
        assert described(log.read(base)) == [w for w in written if w[0] >= base]

    log = reopen(log, segment_bytes)
    assert log.position().start_offset == 0
    assert log.position().end_offset == written[-1][0] + written[-1][1]
    assert described(log.read(0)) == written
    more = append_frames(log, [1, 1, 1, 1, 1], payload_size=200)
    assert described(reopen(log, segment_bytes).read(0)) == written + more


def test_reopen_with_another_segment_size_keeps_the_log(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 512)
    written = append_frames(log, [1] * 10)
    log = reopen(log, BIG_SEGMENT)
    assert described(log.read(0)) == written
    more = append_frames(log, [1] * 3)
    assert described(reopen(log, 512).read(0)) == written + more


# ---------------------------------------------------------------------- failed appends


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """RLIMIT_FSIZE on this process meanwhile: a write past `limit` bytes is short or fails with EFBIG."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)


def _assert_log_unchanged_after_failed_append(log: MetadataLog, before: bytes, written: list, segment: Path) -> None:
    assert segment.read_bytes() == before, "a failed append must leave the segment as it was"
    assert log.end_offset == written[-1][0] + written[-1][1]
    assert log.flush_count == len(written)
    assert described(log.read(0)) == written


@pytest.mark.parametrize("headroom", [0, 10, HEADER_BYTES + 3], ids=["no-room", "short-write", "header-only"])
def test_append_failing_on_a_full_file_leaves_the_log_as_it_was(tmp_path: Path, headroom: int) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    written = append_frames(log, [1, 2, 1])
    segment = segment_files(tmp_path / "log")[-1]
    before = segment.read_bytes()
    group = encode_frame(4, 1, 1, payload_of(4)) + encode_frame(5, 1, 2, payload_of(5))
    with file_size_limit(len(before) + headroom), pytest.raises((OSError, InvariantViolation)):
        log.append(group, 7, 1)
    _assert_log_unchanged_after_failed_append(log, before, written, segment)

    # The same log object goes on at the same offset once there is room, and a reopen sees it all.
    log.append(group, 7, 1)
    written += [(4, 1, 1), (5, 2, 1)]
    assert described(log.read(0)) == written
    assert described(reopen(log).read(0)) == written


def test_append_whose_fdatasync_fails_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bytes reached the file but were never made durable: they must not stay in the log."""
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    written = append_frames(log, [2, 1])
    segment = segment_files(tmp_path / "log")[-1]
    before = segment.read_bytes()
    seen_sizes = []

    def failing_fdatasync(fd: int) -> None:
        seen_sizes.append(os.fstat(fd).st_size)
        raise OSError(5, "Input/output error (injected)")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    with pytest.raises(OSError):
        log.append(encode_frame(3, 1, 1, payload_of(3)), 4, 1)
    monkeypatch.undo()
    assert seen_sizes and seen_sizes[0] > len(before), "the write reached the file before the failing fdatasync"
    _assert_log_unchanged_after_failed_append(log, before, written, segment)
    log.append(encode_frame(3, 1, 1, payload_of(3)), 4, 1)
    assert described(reopen(log).read(0)) == [*written, (3, 1, 1)]


def test_append_failing_right_after_a_roll_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 400)
    written = append_frames(log, [1] * 3)
    while log._active_size < 400:
        written += append_frames(log, [1])
    before = {p.name: p.read_bytes() for p in segment_files(tmp_path / "log")}
    base = log.end_offset
    with file_size_limit(0), pytest.raises((OSError, InvariantViolation)):
        log.append(encode_frame(base, 1, 1, payload_of(base)), base + 1, 1)
    after = {p.name: p.read_bytes() for p in segment_files(tmp_path / "log")}
    # The roll may have left a new, empty segment; nothing else may change.
    assert {name: data for name, data in after.items() if data or name in before} == before
    assert log.end_offset == base
    assert described(log.read(0)) == written
    log.append(encode_frame(base, 1, 1, payload_of(base)), base + 1, 1)
    written.append((base, 1, 1))
    assert described(reopen(log, 400).read(0)) == written


# ---------------------------------------------------------------------- truncation (KIP-101), frames for followers


def _epoch_frames(log: MetadataLog, counts: list[int], first_epoch: int = 1) -> list[tuple[int, int, int]]:
    """Appends one frame per count, the epoch going up every third frame."""
    written = []
    for index, count in enumerate(counts):
        written += append_frames(log, [count], epoch=first_epoch + index // 3)
    return written


def _end_and_epoch(written: list[tuple[int, int, int]]) -> tuple[int, int]:
    return (written[-1][0] + written[-1][1], written[-1][2]) if written else (0, 0)


def _check_truncated(log: MetadataLog, offset: int, written: list[tuple[int, int, int]], segment_bytes: int) -> None:
    kept = [w for w in written if w[0] < offset]
    expected_end, expected_epoch = _end_and_epoch(kept) if kept else (offset, 0)
    for current in (log, reopen(log, segment_bytes)):
        position = current.position()
        assert (position.end_offset, position.last_epoch) == (expected_end, expected_epoch), f"cut to {offset}"
        assert described(current.read(0)) == kept
        log = current
    more = append_frames(log, [2], epoch=50)
    assert described(reopen(log, segment_bytes).read(0)) == [*kept, *more]
    log.close()


@pytest.mark.parametrize("cut_index", [1, 3, 5])
def test_truncate_to_a_frame_boundary_in_the_active_segment(tmp_path: Path, cut_index: int) -> None:
    log = MetadataLog(tmp_path / "log", BIG_SEGMENT)
    written = _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1])
    cut = written[cut_index][0]
    log.truncate_to(cut)
    assert segment_files(tmp_path / "log")[-1].stat().st_size == log._active_size
    _check_truncated(log, cut, written, BIG_SEGMENT)


def test_truncate_to_the_log_start_keeps_one_empty_segment(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 250)
    written = _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1, 1, 1])
    assert len(segment_files(tmp_path / "log")) > 2
    log.truncate_to(0)
    assert [p.name for p in segment_files(tmp_path / "log")] == [segment_name(0)]
    assert segment_files(tmp_path / "log")[0].stat().st_size == 0
    _check_truncated(log, 0, written, 250)


def test_truncate_to_a_segment_base_makes_the_segment_before_it_active(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 250)
    written = _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1, 1, 1, 2, 2])
    files = segment_files(tmp_path / "log")
    assert len(files) >= 3
    second_base = int(files[1].name[: -len(SEGMENT_SUFFIX)])
    log.truncate_to(second_base)
    assert segment_files(tmp_path / "log") == files[:1]
    assert log._active_size == files[0].stat().st_size
    _check_truncated(log, second_base, written, 250)


@pytest.mark.parametrize("frames_from_end", [1, 4, 7, 10])
def test_truncate_to_across_several_segments(tmp_path: Path, frames_from_end: int) -> None:
    log = MetadataLog(tmp_path / "log", 250)
    written = _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1, 1, 1, 2, 2, 1])
    before = segment_files(tmp_path / "log")
    cut = written[-frames_from_end][0]
    log.truncate_to(cut)
    after = segment_files(tmp_path / "log")
    assert after == before[: len(after)], "only the newest segments may go"
    assert all(int(p.name[: -len(SEGMENT_SUFFIX)]) < cut for p in after[1:])
    _check_truncated(log, cut, written, 250)


def test_truncate_to_the_end_is_a_no_op_and_bad_offsets_are_refused(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 250)
    written = _epoch_frames(log, [1, 3, 2, 1, 1, 1, 1])
    before = {p.name: p.read_bytes() for p in segment_files(tmp_path / "log")}
    log.truncate_to(log.end_offset)
    for bad in (log.end_offset + 1, 2, 3):  # past the end; inside the frame 1..3
        with pytest.raises(InvariantViolation):
            log.truncate_to(bad)
    assert {p.name: p.read_bytes() for p in segment_files(tmp_path / "log")} == before
    assert described(log.read(0)) == written
    log.delete_segments_below(log.end_offset)
    with pytest.raises(InvariantViolation):
        log.truncate_to(0)  # below the log start
    log.close()


def test_truncate_to_leaves_a_prefix_of_the_log_at_every_crash_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after each directory fsync: a reopen finds a contiguous prefix of the log, never a hole."""
    probe = MetadataLog(tmp_path / "probe", 250)
    written = _epoch_frames(probe, [1, 2, 1, 3, 1, 2, 1, 1, 1, 2, 2, 1])
    probe.close()
    cut = written[2][0]
    real_fsync_directory = segments_module.fsync_directory
    for crash_after in range(1, 10):
        directory = tmp_path / f"log-{crash_after}"
        log = MetadataLog(directory, 250)
        _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1, 1, 1, 2, 2, 1])
        calls = [0]

        def crashing_fsync_directory(path: Path, calls: list[int] = calls, crash_after: int = crash_after) -> None:
            real_fsync_directory(path)
            calls[0] += 1
            if calls[0] == crash_after:
                raise KeyboardInterrupt("crash")

        monkeypatch.setattr(segments_module, "fsync_directory", crashing_fsync_directory)
        with contextlib.suppress(KeyboardInterrupt):
            log.truncate_to(cut)
        monkeypatch.undo()
        log.close()
        reopened = MetadataLog(directory, 250)
        found = described(reopened.read(0))
        assert found == written[: len(found)] and len(found) >= 2, f"crash after fsync {crash_after}"
        assert reopened.position().end_offset == _end_and_epoch(found)[0]
        reopened.truncate_to(cut)  # what the caller does again after the restart
        assert described(reopened.read(0)) == written[:2]
        reopened.close()


def test_read_frame_bytes_returns_the_frames_on_disk_up_to_a_limit(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "log", 250)
    written = _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1, 1, 1, 2])
    on_disk = b"".join(p.read_bytes() for p in segment_files(tmp_path / "log"))
    frame_sizes = [HEADER_BYTES + len(payload_of(base)) for base, _, _ in written]
    starts = [sum(frame_sizes[:index]) for index in range(len(written))]
    assert log.read_frame_bytes(0, 2**30) == on_disk
    for index, (base, _, _) in enumerate(written):
        assert log.read_frame_bytes(base, 2**30) == on_disk[starts[index] :]
        assert log.read_frame_bytes(base, 0) == on_disk[starts[index] : starts[index] + frame_sizes[index]]
        two = frame_sizes[index] + (frame_sizes[index + 1] if index + 1 < len(written) else 0)
        assert log.read_frame_bytes(base, two) == on_disk[starts[index] : starts[index] + two]
        assert log.read_frame_bytes(base, two - 1) == on_disk[starts[index] : starts[index] + frame_sizes[index]]
    assert log.read_frame_bytes(log.end_offset, 2**30) == b""
    with pytest.raises(InvariantViolation):
        log.read_frame_bytes(2, 2**30)  # inside the frame 1..2
    # A follower appends what it was sent and holds the same log.
    follower = MetadataLog(tmp_path / "follower", 250)
    while follower.end_offset < log.end_offset:
        sent = log.read_frame_bytes(follower.end_offset, 300)
        frames = []
        position = 0
        while (decoded := decode_frame(sent, position)) is not None:
            frames.append(decoded[0])
            position = decoded[1]
        assert position == len(sent)
        follower.append(sent, frames[-1].end_offset, frames[-1].leader_epoch)
    assert described(follower.read(0)) == written
    log.close()
    follower.close()


@pytest.mark.parametrize("new_start", [0, 6, 11, 500], ids=["at-start", "inside", "at-end", "past-end"])
def test_replace_with_empty_then_append_at_the_new_start_and_reopen(tmp_path: Path, new_start: int) -> None:
    log = MetadataLog(tmp_path / "log", 250)
    _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1])  # ends at 11
    assert len(segment_files(tmp_path / "log")) > 1
    log.replace_with_empty(new_start)
    assert [p.name for p in segment_files(tmp_path / "log")] == [segment_name(new_start)]
    assert log.position() == LogPosition(new_start, new_start, 0)
    log = reopen(log, 250)
    assert log.position() == LogPosition(new_start, new_start, 0)
    assert described(log.read(new_start)) == []
    more = append_frames(log, [2, 1], epoch=9)
    assert more[0][0] == new_start
    log = reopen(log, 250)
    assert log.position() == LogPosition(new_start, new_start + 3, 9)
    assert described(log.read(new_start)) == more
    log.close()


def test_replace_with_empty_interrupted_leaves_the_new_segment_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash window the docstring names: older segments remain, the log ends at the new start."""
    log = MetadataLog(tmp_path / "log", 250)
    written = _epoch_frames(log, [1, 2, 1, 3, 1, 2, 1])
    real_unlink = Path.unlink
    seen = [0]

    def crashing_unlink(path: Path, missing_ok: bool = False) -> None:
        seen[0] += 1
        if seen[0] == 2:
            raise KeyboardInterrupt("crash")
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", crashing_unlink)
    with pytest.raises(KeyboardInterrupt):
        log.replace_with_empty(100)
    monkeypatch.undo()
    log.close()
    log = MetadataLog(tmp_path / "log", 250)
    older = described(log.read(0))  # the oldest segments, not continued by the empty one
    assert older and older == written[: len(older)] and len(older) < len(written)
    assert log.position() == LogPosition(0, 100, older[-1][2])
    assert described(log.read(100)) == []
    log.delete_segments_below(100)  # how the caller finishes the job
    assert [p.name for p in segment_files(tmp_path / "log")] == [segment_name(100)]
    more = append_frames(log, [1], epoch=9)
    assert described(reopen(log, 250).read(100)) == more
