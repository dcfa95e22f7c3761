"""The speculative view a coordinator checks operations against (DESIGN §3 step 1).

It is the committed state plus every record appended but not yet applied to
SQLite: partitions' high watermarks and log starts, producer windows, id
counters, and the object keys of pending files. `replay(record)` is its only
mutation; checks read it and never write. Committed object keys stay in
SQLite (looked up once per commit, not per batch) so memory does not grow
with the number of files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from coordinator.invariants import InvariantViolation, check_invariant
from coordinator.producers import ProducerWindow, WindowEntry, advance_window
from coordinator.records import BATCH_LAYOUT
from protos import records_pb2 as rec


@dataclass(slots=True)
class PartitionView:
    key: int
    topic_id: bytes
    topic_name: str
    partition: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class FileFacts:
    """A WAL file as one coordinator's committed state holds it."""

    file_id: int
    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: tuple[int, ...]
    committed_at_ms: int
    live_batches: int
    is_last_owner: bool
    owned: bool  # this coordinator is the file's current owner
    delete_after_ms: int  # -1 until the last owner schedules the deletion


class CoordinatorView:
    def __init__(
        self,
        coordinator_id: int,
        committed_file: Callable[[str], FileFacts | None],
        *,
        next_partition_key: int = 0,
        next_batch_id: int = 0,
        next_file_id: int = 0,
        leader_epoch: int = 0,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._committed_file = committed_file
        self.next_partition_key = next_partition_key
        self.next_batch_id = next_batch_id
        self.next_file_id = next_file_id
        self.leader_epoch = leader_epoch
        self._partitions: dict[int, PartitionView] = {}
        # (topic id, partition) -> partition: the commit path's lookup, one dict access per batch.
        self.partition_index: dict[tuple[bytes, int], PartitionView] = {}
        self._producers: dict[int, dict[int, ProducerWindow]] = {}
        # object key -> log end offset of the batch that recorded it; dropped once applied.
        self._pending_file_keys: dict[str, int] = {}

    # ------------------------------------------------------------------ reads

    def partition(self, topic_id: bytes, partition: int) -> PartitionView | None:
        return self.partition_index.get((topic_id, partition))

    def partitions(self) -> Iterator[PartitionView]:
        return iter(self._partitions.values())

    def partitions_of_topic(self, topic_id: bytes) -> list[PartitionView]:
        return [p for p in self._partitions.values() if p.topic_id == topic_id]

    def producer_window(self, partition_key: int, producer_id: int) -> ProducerWindow | None:
        windows = self._producers.get(partition_key)
        return None if windows is None else windows.get(producer_id)

    def file_known(self, object_key: str) -> bool:
        return object_key in self._pending_file_keys or self._committed_file(object_key) is not None

    def file_pending(self, object_key: str) -> bool:
        """Whether a record not yet applied adds a file with this key."""
        return object_key in self._pending_file_keys

    def committed_file(self, object_key: str) -> FileFacts | None:
        return self._committed_file(object_key)

    # ------------------------------------------------------------------ loading

    def load_partition(self, partition: PartitionView) -> None:
        self._partitions[partition.key] = partition
        self.partition_index[(partition.topic_id, partition.partition)] = partition

    def load_producer(self, partition_key: int, producer_id: int, window: ProducerWindow) -> None:
        self._producers.setdefault(partition_key, {})[producer_id] = window

    # ------------------------------------------------------------------ the only mutation

    def replay(self, record: rec.MetadataRecord, end_offset: int) -> None:
        """Applies one record appended at a log batch ending at `end_offset` (exclusive)."""
        kind = record.WhichOneof("record")
        if kind == "file_committed":
            self._replay_file_committed(record.file_committed, end_offset)
        elif kind == "records_deleted":
            deleted = record.records_deleted
            partition = self._partitions[deleted.partition_key]
            check_invariant(
                partition.log_start_offset < deleted.log_start_offset <= partition.high_watermark,
                f"log start of partition {deleted.partition_key} moves from {partition.log_start_offset} to "
                f"{deleted.log_start_offset} (high watermark {partition.high_watermark})",
            )
            partition.log_start_offset = deleted.log_start_offset
        elif kind == "partition_created":
            created = record.partition_created
            check_invariant(
                created.partition_key == self.next_partition_key,
                f"partition key {created.partition_key} != next {self.next_partition_key}",
            )
            self.next_partition_key += 1
            self.load_partition(
                PartitionView(created.partition_key, created.topic_id, created.topic_name, created.partition, 0, 0)
            )
        elif kind == "topic_deleted":
            for partition in self.partitions_of_topic(record.topic_deleted.topic_id):
                del self._partitions[partition.key]
                del self.partition_index[(partition.topic_id, partition.partition)]
                self._producers.pop(partition.key, None)
        elif kind == "file_ownership_taken":
            taken = record.file_ownership_taken
            if taken.new_file:
                check_invariant(
                    taken.file_id == self.next_file_id, f"file id {taken.file_id} != next {self.next_file_id}"
                )
                self.next_file_id += 1
                self._pending_file_keys[taken.object_key] = end_offset
        elif kind in ("file_handed_over", "file_deletion_scheduled", "file_deleted"):
            pass  # only the committed state holds a file's ownership and deletion time
        elif kind == "leader_change":
            check_invariant(
                record.leader_change.leader_epoch > self.leader_epoch,
                f"leader epoch goes from {self.leader_epoch} to {record.leader_change.leader_epoch}",
            )
            self.leader_epoch = record.leader_change.leader_epoch
        else:
            raise AssertionError(f"unknown metadata record {kind!r}")

    def _replay_file_committed(self, committed: rec.FileCommitted, end_offset: int) -> None:
        check_invariant(
            committed.file_id == self.next_file_id, f"file id {committed.file_id} != next {self.next_file_id}"
        )
        self.next_file_id += 1
        self._pending_file_keys[committed.object_key] = end_offset
        append_time = committed.append_time_ms
        partitions = self._partitions
        producers = self._producers
        next_batch_id = self.next_batch_id
        # Fields unpacked into locals, the invariant checked inline: this loop runs once per batch.
        for (batch_id, key, _, _, base_offset, last_offset, _, producer_id, producer_epoch, base_sequence,
             last_sequence, _, timestamp_type) in BATCH_LAYOUT.iter_unpack(committed.packed_batches):  # fmt: skip
            partition = partitions[key]
            if batch_id != next_batch_id or base_offset != partition.high_watermark or last_offset < base_offset:
                raise InvariantViolation(
                    f"batch {batch_id} (expected id {next_batch_id}) at {base_offset}..{last_offset} does not "
                    f"continue partition {key} at {partition.high_watermark}"
                )
            next_batch_id += 1
            partition.high_watermark = last_offset + 1
            if producer_id >= 0:
                windows = producers.get(key)
                if windows is None:
                    windows = producers[key] = {}
                windows[producer_id] = advance_window(
                    windows.get(producer_id),
                    producer_epoch,
                    WindowEntry(base_sequence, last_sequence, base_offset, append_time, timestamp_type),
                )
        self.next_batch_id = next_batch_id

    def forget_applied_files(self, applied_offset: int) -> None:
        """Drops pending object keys whose records SQLite now holds."""
        if self._pending_file_keys:
            self._pending_file_keys = {k: v for k, v in self._pending_file_keys.items() if v > applied_offset}
