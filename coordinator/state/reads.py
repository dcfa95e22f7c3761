"""Read-only queries on a coordinator's committed SQLite state (run inside `read_snapshot`)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from protos import coordinator_pb2 as pb

# Kafka's effective timestamp: the append time for LOG_APPEND_TIME batches, else the batch's max.
_EFFECTIVE_TIMESTAMP = f"CASE timestamp_type WHEN {pb.LOG_APPEND_TIME} THEN append_time_ms ELSE max_timestamp END"


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    partition_key: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class CoordinatorCounts:
    partition_count: int
    live_file_count: int
    live_batch_count: int
    oldest_live_file_timestamp: int
    files_awaiting_handover: int
    files_awaiting_deletion: int


def partition_offsets(db: apsw.Connection, topic_id: bytes, partition: int) -> PartitionOffsets | None:
    row = db.execute(
        "SELECT partition_key, log_start_offset, high_watermark FROM partitions WHERE topic_id = ? AND partition = ?",
        (topic_id, partition),
    ).fetchone()
    return None if row is None else PartitionOffsets(*row)


def batches_from(db: apsw.Connection, partition_key: int, offset: int, limit: int) -> apsw.Cursor:
    """Batches holding `offset` or later, in offset order; read lazily so the cost follows the result."""
    return db.execute(
        "SELECT b.batch_id, f.object_key, b.magic, b.byte_offset, b.size, b.base_offset, b.last_offset, "
        "b.append_time_ms, b.max_timestamp, b.timestamp_type "
        "FROM batches AS b JOIN files AS f ON f.file_id = b.file_id "
        "WHERE b.partition_key = ? AND b.last_offset >= ? ORDER BY b.last_offset LIMIT ?",
        (partition_key, offset, limit),
    )


def first_batch_at_or_after(db: apsw.Connection, partition_key: int, timestamp: int) -> tuple[int, int] | None:
    """(effective timestamp, base offset) of the first batch in offset order whose timestamp is >= `timestamp`."""
    row = db.execute(
        f"SELECT {_EFFECTIVE_TIMESTAMP}, base_offset FROM batches WHERE partition_key = ? "
        f"AND {_EFFECTIVE_TIMESTAMP} >= ? ORDER BY last_offset LIMIT 1",
        (partition_key, timestamp),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def max_timestamp_batch(db: apsw.Connection, partition_key: int) -> tuple[int, int] | None:
    """(max effective timestamp, base offset of the first batch holding it)."""
    row = db.execute(
        f"SELECT {_EFFECTIVE_TIMESTAMP} AS ts, base_offset FROM batches WHERE partition_key = ? "
        "ORDER BY ts DESC, last_offset ASC LIMIT 1",
        (partition_key,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def file_liveness(db: apsw.Connection, object_key: str) -> tuple[int, bool] | None:
    """(live batches, whether this coordinator is the file's last owner), or None if unknown."""
    row = db.execute("SELECT live_batches, is_last_owner FROM files WHERE object_key = ?", (object_key,)).fetchone()
    return None if row is None else (row[0], bool(row[1]))


def coordinator_counts(db: apsw.Connection) -> CoordinatorCounts:
    (live_batch_count,) = db.execute("SELECT value FROM meta WHERE name = 'live_batch_count'").fetchone()
    (partitions,) = db.execute("SELECT count(*) FROM partitions").fetchone()
    live_files, oldest = db.execute(
        "SELECT count(*), min(committed_at_ms) FROM files WHERE live_batches > 0"
    ).fetchone()
    handover, deletion = db.execute(
        "SELECT coalesce(sum(is_last_owner = 0), 0), coalesce(sum(is_last_owner), 0) FROM files WHERE live_batches = 0"
    ).fetchone()
    return CoordinatorCounts(
        partitions, live_files, live_batch_count, -1 if oldest is None else oldest, handover, deletion
    )
