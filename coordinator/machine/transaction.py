"""One open SQLite transaction of `StateStore.apply`: what the record kinds write through.

It carries the counters (`meta`) and the producer windows of the transaction,
and defers the writes that would otherwise repeat once per record: each
partition's high watermark is written once per transaction (and checked
against SQLite then), producer windows (changed or expired) once at `finish`.
"""

from __future__ import annotations

from typing import Any

import apsw

from coordinator.base.invariants import check_invariant
from coordinator.machine.producers import PackedWindow

Bindings = tuple[Any, ...]


class StateTransaction:
    def __init__(
        self,
        connection: apsw.Connection,
        coordinator_id: int,
        meta: dict[str, Any],
        committed_windows: dict[int, dict[int, PackedWindow]],
    ) -> None:
        self.db = connection
        self.coordinator_id = coordinator_id
        self.meta = meta
        self.committed_windows = committed_windows
        # (partition key, producer id) -> window after this transaction's batches so far.
        self.changed_windows: dict[tuple[int, int], PackedWindow] = {}
        # (partition key, producer id) whose committed window this transaction expired (DESIGN §4a); a window in
        # changed_windows as well is the producer's again, written after the expiry.
        self.expired_windows: set[tuple[int, int]] = set()
        # partition key -> (high watermark in SQLite, after this transaction's batches so far): written once
        # per partition per transaction, not once per record, and checked against SQLite when written.
        self.high_watermarks: dict[int, tuple[int, int]] = {}
        self.deleted_partition_keys: set[int] = set()

    # The counters of the meta table, as the interpreter reads and advances them.

    @property
    def next_file_id(self) -> int:
        return int(self.meta["next_file_id"])

    @next_file_id.setter
    def next_file_id(self, value: int) -> None:
        self.meta["next_file_id"] = value

    @property
    def next_batch_id(self) -> int:
        return int(self.meta["next_batch_id"])

    @next_batch_id.setter
    def next_batch_id(self, value: int) -> None:
        self.meta["next_batch_id"] = value

    @property
    def next_partition_key(self) -> int:
        return int(self.meta["next_partition_key"])

    @next_partition_key.setter
    def next_partition_key(self, value: int) -> None:
        self.meta["next_partition_key"] = value

    @property
    def leader_epoch(self) -> int:
        return int(self.meta["leader_epoch"])

    @leader_epoch.setter
    def leader_epoch(self, value: int) -> None:
        self.meta["leader_epoch"] = value

    def add_live_batches(self, count: int) -> None:
        self.meta["live_batch_count"] += count

    def producer_window(self, partition_key: int, producer_id: int) -> PackedWindow | None:
        """The producer's window after this transaction's records so far."""
        window_key = (partition_key, producer_id)
        window = self.changed_windows.get(window_key)
        if window is None and window_key not in self.expired_windows:
            window = self.committed_windows.get(partition_key, {}).get(producer_id)
        return window

    def expire_window(self, partition_key: int, producer_id: int) -> None:
        """The producer's state on the partition goes (its window as `producer_window` gives it)."""
        window_key = (partition_key, producer_id)
        self.changed_windows.pop(window_key, None)
        self.expired_windows.add(window_key)

    # Writes.

    def update_exactly_one(self, statement: str, bindings: Bindings, problem: str) -> None:
        """Runs a statement that must change exactly one row, else the state and the log disagree."""
        changes_before = self.db.total_changes()
        self.db.execute(statement, bindings)
        check_invariant(self.db.total_changes() - changes_before == 1, problem)

    def write_high_watermarks(self) -> None:
        """Writes the high watermarks moved so far (before anything that reads or removes partitions)."""
        if not self.high_watermarks:
            return
        changes_before = self.db.total_changes()
        self.db.executemany(
            "UPDATE partitions SET high_watermark = ? WHERE partition_key = ? AND high_watermark = ?",
            [(after, key, before) for key, (before, after) in self.high_watermarks.items()],
        )
        check_invariant(
            self.db.total_changes() - changes_before == len(self.high_watermarks),
            f"committed offsets do not continue the partitions' high watermarks {self.high_watermarks}",
        )
        self.high_watermarks = {}

    def remove_batches_below(self, partition_key: int, offset: int | None) -> None:
        """Removes whole batches of a partition with last offset below `offset` (all when None)."""
        bound = 2**63 - 1 if offset is None else offset
        # Aborted transactions go with the batches they cover, as Kafka's transaction index with its segment.
        self.db.execute(
            "DELETE FROM aborted_transactions WHERE partition_key = ? AND last_offset < ?", (partition_key, bound)
        )
        per_file = list(
            self.db.execute(
                "SELECT file_id, count(*) FROM batches WHERE partition_key = ? AND last_offset < ? GROUP BY file_id",
                (partition_key, bound),
            )
        )
        if not per_file:
            return
        self.db.executemany(
            "UPDATE files SET live_batches = live_batches - ? WHERE file_id = ?", [(n, f) for f, n in per_file]
        )
        self.db.execute("DELETE FROM batches WHERE partition_key = ? AND last_offset < ?", (partition_key, bound))
        self.add_live_batches(-sum(n for _, n in per_file))

    def has_batches(self, partition_key: int) -> bool:
        return (
            self.db.execute("SELECT 1 FROM batches WHERE partition_key = ? LIMIT 1", (partition_key,)).fetchone()
            is not None
        )

    def finish(self) -> None:
        """The deferred writes, once every record of the transaction is interpreted."""
        self.write_high_watermarks()
        for key in self.deleted_partition_keys:
            self.changed_windows = {k: w for k, w in self.changed_windows.items() if k[0] != key}
        if self.expired_windows:  # before the windows written after an expiry in this transaction
            self.db.executemany(
                "DELETE FROM producers WHERE partition_key = ? AND producer_id = ?", list(self.expired_windows)
            )
        if self.changed_windows:
            self.db.executemany(
                "INSERT OR REPLACE INTO producers (partition_key, producer_id, producer_epoch, window, last_timestamp) "
                "VALUES (?,?,?,?,?)",
                [(key, producer, *window) for (key, producer), window in self.changed_windows.items()],
            )
