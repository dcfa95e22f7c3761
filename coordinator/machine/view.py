"""The speculative view a coordinator checks operations against (DESIGN §3 step 1).

It is the committed state plus every record appended but not yet applied to
SQLite: partitions' high watermarks and log starts, producer windows, id
counters, and the object keys of pending files. `coordinator.machine.kinds.replay`
is the only thing that changes it, one record at a time; checks read it and
never write. Committed object keys stay in
SQLite (looked up once per commit, not per batch) so memory does not grow
with the number of files; a pending file keeps its record until applied, so
a retried commit of it can be answered from the view (DESIGN §6a).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from coordinator.machine.producers import ProducerWindow, last_stable_offset
from coordinator.machine.records import CommittedBatch, unpack_batches
from protos import records_pb2 as rec

_NO_CONFIGS: Mapping[str, str] = {}

# (file id, partition keys) -> the file's committed batches on those partitions, in batch id order.
CommittedBatches = Callable[[int, Collection[int]], list[CommittedBatch]]
# (partition key, from offset, below offset, limit) -> the last offsets of the committed batches whose last offset is
# in [from, below), ascending, at most `limit`.
CommittedLastOffsets = Callable[[int, int, int, int], list[int]]
# (partition key, from offset, to offset, limit) -> (base offset, last offset, size) of the committed batches holding
# an offset in [from, to], in offset order, at most `limit` (consolidation's check, DESIGN §4c).
CommittedRun = Callable[[int, int, int, int], list[tuple[int, int, int]]]
# file id -> the extents of the ReplaceBatches that recorded the file (a BatchesReplaced's, serialized), or None.
CommittedReplacement = Callable[[int], bytes | None]


@dataclass(slots=True)
class PartitionView:
    key: int
    topic_id: bytes
    topic_name: str
    partition: int
    log_start_offset: int  # the earliest offset anywhere, remote storage included
    high_watermark: int
    # The first offset whose batch the coordinator still holds (DESIGN §4a): below it, down to the log start, the
    # records are in remote log segments. Equal to the log start while nothing is remote.
    local_log_start_offset: int
    # The classic -> diskless switch (design §4d): the seal (the first diskless offset, -1 for a partition born
    # diskless), the sealing leader's epoch and the classic log start as the switch carried them.
    seal_offset: int = -1
    switch_leader_epoch: int = -1
    classic_log_start_offset: int = -1
    # A partition move (design §5a): the target while the partition is frozen here (its writes answer
    # NOT_COORDINATOR), -1 otherwise; and the move's id.
    moving_to: int = -1
    move_id: int = -1
    # The move's catch-up (design §5a): commits go on here while the batches are copied; only what would change
    # copied batches' positions (consolidation, offloads, log starts) is refused. False once frozen.
    catching_up: bool = False

    @property
    def diskless_start_offset(self) -> int:
        """The first offset diskless commits assigned or will assign: the seal, 0 for a partition born diskless."""
        return max(self.seal_offset, 0)

    @property
    def remote_log_end_offset(self) -> int:
        """The last offset held remotely; -1 when nothing is."""
        return self.local_log_start_offset - 1 if self.log_start_offset < self.local_log_start_offset else -1


@dataclass(slots=True)
class StagedMove:
    """A partition move whose batches this coordinator, its target, is staging (design §5a): PartitionAdoptionChunk
    records so far, speculative like the rest of the view."""

    from_coordinator: int
    move_id: int
    partition_key: int  # the staged key: no partition row names it yet
    topic_id: bytes
    partition: int
    chunks: int  # recorded so far
    next_offset: int  # where the next chunk's batches start; -1 while none is staged
    # object key -> this coordinator's file id, for each file the staged batches live in: a later chunk naming one
    # adds to that row (which its staged batches keep live), whether or not its record is applied yet.
    files: dict[str, int]


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
    # The well-formed batches of its commit here, stored or rejected then (0 for a file taken by hand-over).
    part_batches: int
    # -1 for a row of the file's owner chain; else a loan row's lender (design §5a, coordinator/files/loans.py).
    lender_id: int = -1
    # Borrowers holding a loan row of this row's file, not returned yet (design §5a): while any, the row is not idle.
    borrowers: tuple[int, ...] = ()
    # A loan row's move (the lender's move id that made it; -1 for a chain row): its drop lends it.
    loan_move_id: int = -1

    @property
    def loans_out(self) -> int:
        return len(self.borrowers)


class CoordinatorView:
    def __init__(
        self,
        coordinator_id: int,
        committed_file: Callable[[str], FileFacts | None],
        committed_batches: CommittedBatches | None = None,
        committed_last_offsets: CommittedLastOffsets | None = None,
        *,
        next_partition_key: int = 0,
        next_batch_id: int = 0,
        next_file_id: int = 0,
        leader_epoch: int = 0,
        committed_run: CommittedRun | None = None,
        committed_replacement: CommittedReplacement | None = None,
        file_is_committed: Callable[[str], bool] | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        self._committed_file = committed_file
        # Whether a committed file has the key, asked once per commit part (a retry?): without its row, which a
        # lookup by the key's unique index alone answers.
        self._file_is_committed = file_is_committed or (lambda object_key: committed_file(object_key) is not None)
        self._committed_batches = committed_batches
        self._committed_last_offsets = committed_last_offsets
        self._committed_run = committed_run
        self._committed_replacement = committed_replacement
        self.next_partition_key = next_partition_key
        self.next_batch_id = next_batch_id
        self.next_file_id = next_file_id
        self.leader_epoch = leader_epoch
        # The interpreter's loops read and change these dicts directly: they run once per batch.
        self.partitions_by_key: dict[int, PartitionView] = {}
        # (topic id, partition) -> partition: the commit path's lookup, one dict access per batch.
        self.partition_index: dict[tuple[bytes, int], PartitionView] = {}
        self.producer_windows: dict[int, dict[int, ProducerWindow]] = {}  # partition key -> producer id -> window
        # Transactions (DESIGN §4b), only for partitions that have had one: partition key -> producer id -> the first
        # offset of its open transaction, and -> the coordinator epoch of its last marker.
        self.open_transactions: dict[int, dict[int, int]] = {}
        self.coordinator_epochs: dict[int, dict[int, int]] = {}
        # topic id -> the configurations set on the topic (canonical values; coordinator/topics/topic_configs.py).
        # Only topics with a partition here that set some: the others are at their defaults.
        self._topic_configs: dict[bytes, dict[str, str]] = {}
        # (source coordinator, move id) -> a partition move staged here, its target (design §5a).
        self.staged_moves: dict[tuple[int, int], StagedMove] = {}
        self.adopted_moves: set[tuple[int, int]] = set()  # (source, move id) of the moves adopted here
        # partition key -> its source, for each partition adopted here (a commit naming older owners: design §5a).
        self.adopted_keys: dict[int, int] = {}
        self.abandoned_moves: set[tuple[int, int]] = set()  # (source, move id) of the moves abandoned here
        # move id -> its target, for each move whose partition left this coordinator, its source (design §5a).
        self.moved_out: dict[int, int] = {}
        # (object key, borrower) -> log end offset of the drop that lent it, until SQLite holds the loan: a return
        # arriving meanwhile settles it (the record is applied after the drop's).
        self._pending_loans: dict[tuple[str, int], int] = {}
        # object key -> (log end offset of the batch that recorded it, its FileCommitted or None when the
        # file came by hand-over); dropped once applied.
        self._pending_files: dict[str, tuple[int, rec.FileCommitted | None]] = {}
        # object key -> (log end offset, its BatchesReplaced) for files recorded by consolidation, not yet applied.
        self._pending_replacements: dict[str, tuple[int, rec.BatchesReplaced]] = {}

    # ------------------------------------------------------------------ reads

    def partition(self, topic_id: bytes, partition: int) -> PartitionView | None:
        return self.partition_index.get((topic_id, partition))

    def partitions(self) -> Iterator[PartitionView]:
        return iter(self.partitions_by_key.values())

    def partitions_of_topic(self, topic_id: bytes) -> list[PartitionView]:
        return [p for p in self.partitions_by_key.values() if p.topic_id == topic_id]

    def producer_window(self, partition_key: int, producer_id: int) -> ProducerWindow | None:
        windows = self.producer_windows.get(partition_key)
        return None if windows is None else windows.get(producer_id)

    def open_transaction(self, partition_key: int, producer_id: int) -> int:
        """The first offset of the producer's open transaction in the partition, -1 if none."""
        transactions = self.open_transactions.get(partition_key)
        return -1 if transactions is None else transactions.get(producer_id, -1)

    def coordinator_epoch(self, partition_key: int, producer_id: int) -> int:
        """The coordinator epoch of the producer's last marker in the partition, -1 if none."""
        epochs = self.coordinator_epochs.get(partition_key)
        return -1 if epochs is None else epochs.get(producer_id, -1)

    def last_stable_offset(self, partition: PartitionView) -> int:
        """DESIGN §4b, on the speculative state (the offload check's bound)."""
        transactions = self.open_transactions.get(partition.key)
        return last_stable_offset(
            min(transactions.values()) if transactions else -1, partition.log_start_offset, partition.high_watermark
        )

    def topic_configs(self, topic_id: bytes) -> Mapping[str, str]:
        """The configurations set on a topic here (empty: every one at its default), pending changes included."""
        return self._topic_configs.get(topic_id, _NO_CONFIGS)

    def file_known(self, object_key: str) -> bool:
        return object_key in self._pending_files or self._file_is_committed(object_key)

    def file_pending(self, object_key: str) -> bool:
        """Whether a record not yet applied adds a file with this key."""
        return object_key in self._pending_files

    def pending_commit(self, object_key: str) -> rec.FileCommitted | None:
        """The FileCommitted not yet applied that added this key, if one did."""
        pending = self._pending_files.get(object_key)
        return None if pending is None else pending[1]

    def committed_file(self, object_key: str) -> FileFacts | None:
        return self._committed_file(object_key)

    def loan_pending(self, object_key: str, borrower: int) -> bool:
        """Whether a drop not yet applied lends this file to `borrower` (design §5a)."""
        return (object_key, borrower) in self._pending_loans

    def pending_replacement(self, object_key: str) -> rec.BatchesReplaced | None:
        """The BatchesReplaced not yet applied that added this key, if one did."""
        pending = self._pending_replacements.get(object_key)
        return None if pending is None else pending[1]

    def committed_replacement(self, file_id: int) -> rec.BatchesReplaced | None:
        """The extents (with their answers) of the ReplaceBatches that recorded a committed file; None for a file
        recorded otherwise."""
        stored = None if self._committed_replacement is None else self._committed_replacement(file_id)
        return None if stored is None else rec.BatchesReplaced.FromString(stored)

    def committed_run(
        self, partition_key: int, from_offset: int, to_offset: int, limit: int
    ) -> list[tuple[int, int, int]]:
        """(base offset, last offset, size) of the committed batches holding offsets in [from, to], in offset order,
        at most `limit`. Batches not yet applied are not among them (consolidation names applied batches)."""
        if self._committed_run is None:
            return []
        return self._committed_run(partition_key, from_offset, to_offset, limit)

    def committed_batches(self, file_id: int, partition_keys: Collection[int]) -> list[CommittedBatch]:
        """A committed file's batches still stored on these partitions, in batch id (request) order."""
        if self._committed_batches is None or not partition_keys:
            return []
        return self._committed_batches(file_id, partition_keys)

    def last_offsets_between(self, partition_key: int, from_offset: int, below_offset: int, limit: int) -> list[int]:
        """The last offsets of the partition's batches (committed, then pending) whose last offset is in
        [from_offset, below_offset), ascending, at most `limit`.

        Pending batches are read from their FileCommitted records only when the committed ones fall short: the
        ones above the committed high watermark, which a copier rarely names (it read what it copied from
        committed state).
        """
        found: list[int] = []
        if self._committed_last_offsets is not None:
            found = self._committed_last_offsets(partition_key, from_offset, below_offset, limit)
        if len(found) >= limit or (found and found[-1] == below_offset - 1):
            return found
        pending = sorted(
            batch.last_offset
            for _, committed in self._pending_files.values()
            if committed is not None
            for batch in unpack_batches(committed.packed_batches)
            if batch.partition_key == partition_key and from_offset <= batch.last_offset < below_offset
        )
        return (found + [offset for offset in pending if not found or offset > found[-1]])[:limit]

    # ------------------------------------------------------------------ loading

    def load_partition(self, partition: PartitionView) -> None:
        self.partitions_by_key[partition.key] = partition
        self.partition_index[(partition.topic_id, partition.partition)] = partition

    def load_producer(self, partition_key: int, producer_id: int, window: ProducerWindow) -> None:
        self.producer_windows.setdefault(partition_key, {})[producer_id] = window

    def load_transaction_state(
        self, partition_key: int, producer_id: int, coordinator_epoch: int, first_offset: int
    ) -> None:
        if coordinator_epoch >= 0:
            self.coordinator_epochs.setdefault(partition_key, {})[producer_id] = coordinator_epoch
        if first_offset >= 0:
            self.open_transactions.setdefault(partition_key, {})[producer_id] = first_offset

    def load_topic_configs(self, topic_id: bytes, configs: Mapping[str, str]) -> None:
        """Sets a topic's configurations (at load, and as a record changes them); empty: all at their defaults."""
        if configs:
            self._topic_configs[topic_id] = dict(configs)
        else:
            self._topic_configs.pop(topic_id, None)

    # ------------------------------------------------------------------ changes, made only by coordinator.machine.kinds

    def remove_partition(self, partition: PartitionView) -> None:
        del self.partitions_by_key[partition.key]
        del self.partition_index[(partition.topic_id, partition.partition)]
        self.producer_windows.pop(partition.key, None)
        self.open_transactions.pop(partition.key, None)
        self.coordinator_epochs.pop(partition.key, None)

    def remove_producer(self, partition_key: int, producer_id: int) -> None:
        windows = self.producer_windows.get(partition_key)
        if windows is not None:
            windows.pop(producer_id, None)
            if not windows:
                del self.producer_windows[partition_key]
        epochs = self.coordinator_epochs.get(partition_key)
        if epochs is not None:
            epochs.pop(producer_id, None)
            if not epochs:
                del self.coordinator_epochs[partition_key]

    def open_transaction_at(self, partition_key: int, producer_id: int, first_offset: int) -> None:
        self.open_transactions.setdefault(partition_key, {})[producer_id] = first_offset

    def end_transaction(self, partition_key: int, producer_id: int, coordinator_epoch: int) -> None:
        """A marker: the producer's transaction (if open) ends; its coordinator epoch is the marker's."""
        transactions = self.open_transactions.get(partition_key)
        if transactions is not None:
            transactions.pop(producer_id, None)
            if not transactions:
                del self.open_transactions[partition_key]
        self.coordinator_epochs.setdefault(partition_key, {})[producer_id] = coordinator_epoch

    def forget_topic_configs(self, topic_id: bytes) -> None:
        self._topic_configs.pop(topic_id, None)

    def add_pending_file(self, object_key: str, end_offset: int, committed: rec.FileCommitted | None = None) -> None:
        """A file recorded by a log batch ending at `end_offset`, known here until SQLite holds it."""
        self._pending_files[object_key] = (end_offset, committed)

    def add_pending_loan(self, object_key: str, borrower: int, end_offset: int) -> None:
        """A loan recorded by a drop in a log batch ending at `end_offset`, known here until SQLite holds it."""
        self._pending_loans[(object_key, borrower)] = end_offset

    def add_pending_replacement(self, object_key: str, end_offset: int, replaced: rec.BatchesReplaced) -> None:
        """A file recorded by consolidation in a log batch ending at `end_offset` (DESIGN §4c)."""
        self._pending_files[object_key] = (end_offset, None)
        self._pending_replacements[object_key] = (end_offset, replaced)

    def forget_applied_files(self, applied_offset: int) -> None:
        """Drops pending files whose records SQLite now holds."""
        if self._pending_files:
            self._pending_files = {k: v for k, v in self._pending_files.items() if v[0] > applied_offset}
        if self._pending_replacements:
            self._pending_replacements = {k: v for k, v in self._pending_replacements.items() if v[0] > applied_offset}
        if self._pending_loans:
            self._pending_loans = {k: v for k, v in self._pending_loans.items() if v > applied_offset}
