"""The orphan scan's safety rules, as pure functions of their inputs (time included).

- The grace period may not go below `GRACE_FLOOR_MS` unless forced: a broker
  may take that long between uploading a WAL file and committing it, and a
  file deleted in between loses acknowledged data. Delta's VACUUM refuses a
  retention below 7 days without `retentionDurationCheck`; Iceberg's
  remove_orphan_files defaults to 3 days. One hour is our floor because a
  commit is retried for minutes, not days.
- The threshold is the oldest live file's commit time minus the grace period,
  or now minus the grace period when no coordinator has a live file
  (DESIGN §7): an object last modified at or after it is never a candidate.
- The scan aborts without deleting when orphans exceed a share of the listed
  WAL files: a wrong bucket, prefix or cluster would make most files look
  orphaned, and the right reaction is to stop, not to delete them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

GRACE_FLOOR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Threshold:
    """Objects last modified strictly before `threshold_ms` may be orphans; the rest are too young."""

    threshold_ms: int
    grace_period_ms: int
    oldest_live_file_ms: int  # -1 when no coordinator has a live file (then the base is now)
    oldest_live_coordinator_id: int  # -1 likewise
    now_ms: int

    @property
    def rule(self) -> str:
        """How the threshold was formed, for the report."""
        if self.oldest_live_file_ms < 0:
            return f"now ({self.now_ms}) - grace ({self.grace_period_ms} ms): no coordinator has a live file"
        return (
            f"oldest live file ({self.oldest_live_file_ms}, coordinator {self.oldest_live_coordinator_id}) "
            f"- grace ({self.grace_period_ms} ms)"
        )


def grace_problem(grace_period_ms: int, force: bool, floor_ms: int = GRACE_FLOOR_MS) -> str | None:
    """Why the grace period is refused, or None."""
    if grace_period_ms < 0:
        return f"the grace period must be >= 0 ms, got {grace_period_ms}"
    if grace_period_ms < floor_ms and not force:
        return (
            f"the grace period ({grace_period_ms} ms) is below the floor of {floor_ms} ms: a file uploaded but not "
            "yet committed could be deleted; pass --force to scan anyway"
        )
    return None


def scan_threshold(oldest_live_files_ms: Iterable[tuple[int, int]], grace_period_ms: int, now_ms: int) -> Threshold:
    """The threshold from (coordinator id, oldest live file time or -1) of every coordinator."""
    live = [(timestamp, coordinator_id) for coordinator_id, timestamp in oldest_live_files_ms if timestamp >= 0]
    if not live:
        return Threshold(now_ms - grace_period_ms, grace_period_ms, -1, -1, now_ms)
    oldest_ms, coordinator_id = min(live)
    # Never later than now - grace either: a clock running ahead on a coordinator must not widen the scan.
    threshold_ms = min(oldest_ms, now_ms) - grace_period_ms
    return Threshold(threshold_ms, grace_period_ms, oldest_ms, coordinator_id, now_ms)


def orphan_share_percent(orphans: int, wal_files: int) -> float:
    """Orphans as a percentage of the listed WAL files (0 when none was listed)."""
    return 100.0 * orphans / wal_files if wal_files else 0.0


def orphan_share_problem(orphans: int, wal_files: int, max_percent: int) -> str | None:
    """Why the orphans are too many to delete, or None."""
    share = orphan_share_percent(orphans, wal_files)
    if share > max_percent:
        return (
            f"{orphans} orphans are {share:.1f}% of the {wal_files} listed WAL files, above "
            f"diskless.coordinator.orphan.scan.max.orphan.percent={max_percent}: wrong bucket, prefix or cluster? "
            "nothing deleted"
        )
    return None
