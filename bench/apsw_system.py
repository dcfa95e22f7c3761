"""The physical limit: the rows a commit writes, inserted with apsw directly, one durable transaction per commit.

Same schema and rows as a coordinator's state (coordinator/machine/state/schema.py): one
`files` row, one `batches` row per stored batch, the partitions' high
watermarks and the producers' windows. No gRPC, no metadata log, no checks
beyond duplicate detection; `synchronous=FULL` makes every commit fsync the WAL
once, as the coordinator's log is fsynced once per group.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import apsw

from bench.systems import Counters, FindOutcome, FindPosition, process_cpu_s, process_write_bytes
from bench.workload import CommitSpec
from coordinator.machine.batch_entries import batch_entry
from coordinator.machine.producers import (
    ProducerWindow,
    WindowEntry,
    advance_window,
    decode_window,
    effective_timestamp,
    encode_window,
)
from coordinator.machine.state.reads import one_row
from coordinator.machine.state.schema import STATEMENTS

APPEND_TIME_MS = 1_700_000_000_000


class RawApswSystem:
    name = "raw-apsw"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: apsw.Connection | None = None
        self._reader: apsw.Connection | None = None
        self._topics: list[tuple[bytes, list[int]]] = []  # (topic id, partition keys by partition)
        self._high_watermarks: dict[int, int] = {}
        self._windows: dict[tuple[int, int], ProducerWindow] = {}
        self._next = {"partition_key": 0, "batch_id": 0, "file_id": 0}
        self._commits = 0

    @property
    def db(self) -> apsw.Connection:
        assert self._db is not None
        return self._db

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = apsw.Connection(str(self.path))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        with self.db:
            for statement in STATEMENTS:
                self.db.execute(statement)
        for key, high_watermark in self.db.execute("SELECT partition_key, high_watermark FROM partitions"):
            self._high_watermarks[key] = high_watermark
        for key, producer_id, epoch, window, last_timestamp in self.db.execute(
            "SELECT partition_key, producer_id, producer_epoch, window, last_timestamp FROM producers"
        ):
            self._windows[(key, producer_id)] = decode_window(epoch, window, last_timestamp)
        for name, table, column in (
            ("partition_key", "partitions", "partition_key"),
            ("batch_id", "batches", "batch_id"),
            ("file_id", "files", "file_id"),
        ):
            query = f"SELECT coalesce(max({column}) + 1, 0) FROM {table}"
            (self._next[name],) = one_row(self.db.execute(query), f"the next {name}")
        self._reader = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)

    async def create_topic(self, name: str, partitions: int) -> int:
        topic_id = os.urandom(16)
        first = self._next["partition_key"]
        keys = list(range(first, first + partitions))
        with self.db:
            self.db.executemany(
                "INSERT INTO partitions (partition_key, topic_id, topic_name, partition, log_start_offset, "
                "high_watermark, local_log_start_offset, remote_max_timestamp) VALUES (?,?,?,?,0,0,0,-1)",
                [(key, topic_id, name, partition) for partition, key in enumerate(keys)],
            )
        self._next["partition_key"] = first + partitions
        self._high_watermarks.update(dict.fromkeys(keys, 0))
        self._topics.append((topic_id, keys))
        return len(self._topics) - 1

    async def commit(self, topic: int, spec: CommitSpec) -> int:
        _, keys = self._topics[topic]
        file_id = self._next["file_id"]
        batch_id = self._next["batch_id"]
        high_watermarks = self._high_watermarks
        rows = []
        windows: dict[tuple[int, int], ProducerWindow] = {}
        touched: dict[int, int] = {}
        for b in spec.batches:
            key = keys[b.partition]
            window_key = (key, b.producer_id)
            window = windows.get(window_key) or self._windows.get(window_key)
            if window is not None and any(
                e.base_sequence == b.base_sequence and e.last_sequence == b.last_sequence for e in window.entries
            ):
                continue  # a retried duplicate: answered from the window, nothing stored
            base = touched.get(key, high_watermarks[key])
            last = base + b.last_offset - b.base_offset
            touched[key] = last + 1
            entry = batch_entry(batch_id, spec.object_key, 2, b.byte_offset, b.size, base, last, APPEND_TIME_MS,
                                b.max_timestamp, 0)  # fmt: skip
            rows.append((batch_id, key, b.byte_offset, b.size, base, last, b.max_timestamp, b.producer_id,
                         b.producer_epoch, b.base_sequence, b.last_sequence, 2, 0, file_id,
                         APPEND_TIME_MS, entry))  # fmt: skip
            windows[window_key] = advance_window(
                window,
                b.producer_epoch,
                WindowEntry(b.base_sequence, b.last_sequence, base, APPEND_TIME_MS, 0),
                effective_timestamp(b.max_timestamp, 0, APPEND_TIME_MS),
            )
            batch_id += 1
        with self.db:
            self.db.execute(
                "INSERT INTO files (file_id, object_key, file_size, uploader_broker_id, owner_ids, committed_at_ms, "
                "live_batches, is_last_owner, owned, delete_after_ms, part_batches) VALUES (?,?,?,?,?,?,?,1,1,-1,?)",
                (
                    file_id,
                    spec.object_key,
                    spec.file_size,
                    spec.broker_id,
                    "0",
                    APPEND_TIME_MS,
                    len(rows),
                    len(spec.batches),
                ),
            )
            self.db.executemany("INSERT INTO batches VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            self.db.executemany(
                "UPDATE partitions SET high_watermark = ? WHERE partition_key = ?",
                [(end, key) for key, end in touched.items()],
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO producers (partition_key, producer_id, producer_epoch, window, last_timestamp) "
                "VALUES (?,?,?,?,?)",
                [
                    (key, producer, w.epoch, encode_window(w), w.last_timestamp)
                    for (key, producer), w in windows.items()
                ],
            )
        high_watermarks.update(touched)
        self._windows.update(windows)
        self._next["file_id"] = file_id + 1
        self._next["batch_id"] = batch_id
        self._commits += 1
        return len(rows)

    async def find(self, topic: int, positions: Sequence[FindPosition], fetch_max_bytes: int) -> list[FindOutcome]:
        assert self._reader is not None
        _, keys = self._topics[topic]
        outcomes = []
        budget = fetch_max_bytes
        answer: list[bytes] = []
        with self._reader:  # one read transaction: every partition sees the same commit
            for p in positions:
                rows = list(self._reader.execute(
                    "SELECT last_offset, size, entry FROM batches WHERE partition_key = ? AND last_offset >= ? "
                    "ORDER BY last_offset LIMIT ?", (keys[p.partition], p.offset, max(1, p.max_bytes // 1000)),
                )) if budget > 0 else []  # fmt: skip
                budget -= sum(size for _, size, _ in rows)
                answer.append(b"".join(entry for _, _, entry in rows))  # the answer's bytes, as a server sends them
                outcomes.append(FindOutcome(p.partition, len(rows), rows[-1][0] + 1 if rows else p.offset))
        return outcomes

    async def counters(self) -> Counters:
        # WAL mode with synchronous=FULL: one fsync of the WAL per transaction (checkpoints add a few).
        return Counters(process_cpu_s(os.getpid()), process_write_bytes(os.getpid()), self._commits)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._db is not None:
            self._db.close()
        self._reader = self._db = None
