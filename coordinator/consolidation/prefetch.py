"""ReplaceBatches' prefetch: the state pages its check and its apply will read, read first off the loop.

A consolidation moves the oldest batches of the oldest files: rows nobody has read since they were committed, whose
pages the OS may have dropped from its cache long ago (a machine short of memory, or one that reclaims cold page
cache, as this project's benchmark VM does within seconds). Read in the check (`rules.check_replace_part`) or the
apply (`kinds.replacements`), on the node's loop, each such page is a read of the disk that holds every coordinator
of the node, and a disk busy with writes makes that read last up to seconds (docs/benchmarks.md, "The loop's reads
of cold pages"). So `NodeCoordinators.run_parts` runs this on a connection and thread of its own first, as
TigerBeetle prefetches before it commits: the same rows, read by the same indexes as the statements that follow,
so that their pages are in the OS cache when the check and the apply read them.

What it reads mirrors those statements; a page it misses is only read on the loop, as before:
- the new key in `files`' key index (the check's `file_known`);
- each extent's batches and the one after them (`reads.batches_holding`, the apply's `_RUN_ROWS`), with their
  `entry` (the apply rewrites it);
- each batch's entry in `batches_by_file` (the apply's UPDATE moves it from the old file's key to the new one's);
- each old file's row and its entry in `files_live_by_time` (the apply's UPDATE of `live_batches` reads the row,
  and drops the entry when no live batch is left).
Bounded as the check is: at most the part's batch bound plus one batch per extent.
"""

from __future__ import annotations

import apsw

from coordinator.consolidation.rules import ReplacePart

_FILE_BY_KEY = "SELECT file_id FROM files WHERE object_key = ?"
_PARTITION_KEY = "SELECT partition_key FROM partitions WHERE topic_id = ? AND partition = ?"
_RUN = (
    "SELECT file_id, last_offset, entry FROM batches WHERE partition_key = ? AND last_offset >= ? "
    "AND last_offset <= ? ORDER BY last_offset LIMIT ?"
)
_AFTER = "SELECT file_id FROM batches WHERE partition_key = ? AND last_offset > ? ORDER BY last_offset LIMIT 1"
_BY_FILE = (
    "SELECT 1 FROM batches INDEXED BY batches_by_file WHERE file_id = ? AND partition_key = ? AND last_offset = ?"
)
_FILE_ROW = "SELECT committed_at_ms FROM files WHERE file_id = ?"
_LIVE_BY_TIME = (
    "SELECT 1 FROM files INDEXED BY files_live_by_time WHERE committed_at_ms = ? AND live_batches > 0 AND file_id = ?"
)


def prefetch_replace_part(db: apsw.Connection, part: ReplacePart) -> int:
    """Reads what the part's check and apply will read (see the module's docstring); returns the rows read."""
    rows = len(db.execute(_FILE_BY_KEY, (part.object_key,)).fetchall())
    batches_left = part.batch_max
    moved: list[tuple[int, int, int]] = []  # (old file id, partition key, last offset)
    for extent, problem in zip(part.extents, part.problems, strict=True):
        if problem is not None or batches_left <= 0:
            continue  # refused at the router, or past the call's bound: neither the check nor the apply reads it
        found = db.execute(_PARTITION_KEY, (extent.topic_id, extent.partition)).fetchone()
        if found is None or not isinstance(found[0], int):
            continue
        partition_key = found[0]
        run: list[tuple[int, int, bytes | None]] = list(
            db.execute(_RUN, (partition_key, extent.base_offset, extent.last_offset, batches_left + 1))
        )
        moved.extend((file_id, partition_key, last_offset) for file_id, last_offset, _ in run)
        rows += len(run) + len(db.execute(_AFTER, (partition_key, extent.last_offset)).fetchall())
        batches_left -= len(run)
    for file_id, partition_key, last_offset in moved:
        rows += len(db.execute(_BY_FILE, (file_id, partition_key, last_offset)).fetchall())
    for file_id in sorted({file_id for file_id, _, _ in moved}):
        row = db.execute(_FILE_ROW, (file_id,)).fetchone()
        if row is not None:
            rows += 1 + len(db.execute(_LIVE_BY_TIME, (row[0], file_id)).fetchall())
    return rows
