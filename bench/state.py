"""Large prebuilt states (1M, 10M live batches) without committing them one by one through gRPC.

For the coordinator, the harness writes each coordinator's metadata log as a
node would have written it (a leader change, the topic's PartitionCreated
records, then one FileCommitted frame per WAL file, built by
`coordinator.machine.records`) and replays it into SQLite with the coordinator's own
`replay_log`, whose invariant checks (contiguous offsets, ids, producer
windows) hold the generated log to what a real node produces. The server then
starts on a state applied up to its log end. The raw-apsw baseline gets the
same rows by replaying the same records into its own file.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from coordinator.config.loading import load_settings
from coordinator.machine import records
from coordinator.machine.state.store import BATCH_ID_SPACE, StateStore
from coordinator.machine.topic_names import coordinator_for_new_partition
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.shard.log_replay import replay_log

PREFILL_TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-00000000beef").bytes
PREFILL_TOPIC_NAME = "prefill"
PREFILL_PARTITIONS = 1000
PREFILL_BATCHES_PER_FILE = 100
PREFILL_PRODUCER_BASE = 900_000_000
FRAMES_PER_WRITE = 1000  # frames per log append (one fdatasync each)
APPEND_TIME_MS = 1_700_000_000_000


def _coordinator_frames(
    coordinator_id: int, partitions: list[int], batches: int
) -> Iterator[list[records.MetadataRecord]]:
    """The operations' records of one coordinator, in log order: each item is one frame's records."""
    yield [records.leader_change(1, 0)]
    yield [records.partition_created(key, PREFILL_TOPIC_ID, PREFILL_TOPIC_NAME, p) for key, p in enumerate(partitions)]
    high_watermarks = [0] * len(partitions)
    sequences = [0] * len(partitions)
    batch_id = coordinator_id * BATCH_ID_SPACE
    written = 0
    file_id = 0
    cursor = 0
    while written < batches:
        count = min(PREFILL_BATCHES_PER_FILE, batches - written)
        keys = sorted((cursor + i) % len(partitions) for i in range(count))
        cursor = (cursor + count) % len(partitions)
        committed: list[records.CommittedBatch] = []
        for index, key in enumerate(keys):
            base = high_watermarks[key]
            sequence = sequences[key]
            committed.append(records.CommittedBatch(
                batch_id, key, index * 1000, 1000, base, base + 9, APPEND_TIME_MS,
                PREFILL_PRODUCER_BASE + partitions[key], 0, sequence, sequence + 9, 2, 0,
            ))  # fmt: skip
            high_watermarks[key] = base + 10
            sequences[key] = sequence + 10
            batch_id += 1
        yield [records.file_committed(file_id, f"prefill/{coordinator_id}/{file_id}", count * 1000, 1,
                                      [coordinator_id], APPEND_TIME_MS + file_id, committed)]  # fmt: skip
        file_id += 1
        written += count


def _write_log(directory: Path, frames: Iterator[list[records.MetadataRecord]], segment_bytes: int) -> None:
    metadata_log = MetadataLog(directory / "log", segment_bytes)
    try:
        if metadata_log.end_offset != 0:
            raise FileExistsError(f"{directory / 'log'} is not empty")
        offset = 0
        pending: list[bytes] = []
        epoch = 1
        for frame_records in frames:
            pending.append(encode_frame(offset, epoch, len(frame_records), records.encode_batch(frame_records)))
            offset += len(frame_records)
            if len(pending) >= FRAMES_PER_WRITE:
                metadata_log.append(b"".join(pending), offset, epoch)
                pending = []
        if pending:
            metadata_log.append(b"".join(pending), offset, epoch)
    finally:
        metadata_log.close()


def build_coordinator_state(
    data_dir: Path, coordinators: int, live_batches: int, progress: Callable[[str], None] = print
) -> None:
    """A node's data dir holding `live_batches` committed batches of the prefill topic (1000 partitions)."""
    settings = load_settings(None, {})
    assignment: dict[int, list[int]] = {c: [] for c in range(coordinators)}
    for partition in range(PREFILL_PARTITIONS):
        assignment[coordinator_for_new_partition(PREFILL_TOPIC_ID, partition, coordinators)].append(partition)
    for coordinator_id, partitions in assignment.items():
        share = live_batches * len(partitions) // PREFILL_PARTITIONS
        directory = data_dir / f"coordinator-{coordinator_id}"
        directory.mkdir(parents=True, exist_ok=True)
        _write_log(directory, _coordinator_frames(coordinator_id, partitions, share), settings.log_segment_bytes)
        replay_into(directory / "state.sqlite", directory, coordinator_id, settings.replay_batch_operations)
        progress(f"  coordinator {coordinator_id}: {share:,} batches written and replayed")


def replay_into(state: Path, directory: Path, coordinator_id: int, chunk_frames: int) -> None:
    metadata_log = MetadataLog(directory / "log", 2**62)
    store = StateStore(state, coordinator_id)
    try:
        replay_log(store, metadata_log, chunk_frames)
    finally:
        store.close()
        metadata_log.close()


def build_raw_state(path: Path, scratch: Path, live_batches: int) -> None:
    """The same rows for the raw-apsw baseline: one coordinator's worth of records over every partition."""
    settings = load_settings(None, {})
    scratch.mkdir(parents=True, exist_ok=True)
    frames = _coordinator_frames(0, list(range(PREFILL_PARTITIONS)), live_batches)
    _write_log(scratch, frames, settings.log_segment_bytes)
    replay_into(path, scratch, 0, settings.replay_batch_operations)
