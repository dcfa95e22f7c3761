"""A history checker for runs under faults: every batch the producers were told was committed, checked against what
the cluster stores once the run is over (Jepsen's way: record what clients saw, then read everything back).

Each attempt to commit a batch goes in a file of its own whose object key names the producer and the sequence
(`wal/<producer id>/<sequence>/<attempt>-<random>`), so a batch stored twice shows in a read-back even when the
second copy came in another file. The check reads every partition in full from its coordinator's leader and counts:

- lost: an acknowledged batch missing at its acknowledged offset, or stored there for another batch;
- duplicated: a (producer, sequence) stored more than once;
- gaps: offsets not contiguous from the log start, or a high watermark other than the last offset + 1;
- resends: the last acknowledged batch of each producer sent again in a new file must be answered as a duplicate
  with its stored offset (the idempotent-producer rule a retrying producer relies on).
"""

from __future__ import annotations

import itertools
import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import final

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import batch, fetch_all_batches

PROBLEMS_SHOWN_MAX = 20  # a broken run can break thousands of batches: the report names the first ones
OBJECT_KEY = re.compile(r"^wal/(\d+)/(\d+)/\d+-[0-9a-f]+$")


def attempt_object_key(producer_id: int, sequence: int, attempt: int) -> str:
    """The key of the file one attempt of a batch is sent in: unique, and naming the batch it holds."""
    return f"wal/{producer_id}/{sequence}/{attempt}-{uuid.uuid4().hex[:12]}"


def batch_of_object_key(object_key: str) -> tuple[int, int] | None:
    """(producer id, sequence) of the batch an attempt's file holds; None for a file of another writer."""
    match = OBJECT_KEY.match(object_key)
    return (int(match.group(1)), int(match.group(2))) if match else None


@final
@dataclass(frozen=True, slots=True)
class AcknowledgedBatch:
    """One batch a producer was told is committed, and when (time.monotonic())."""

    producer_id: int
    sequence: int
    topic_id: bytes
    partition: int
    coordinator_id: int
    offset: int
    object_key: str  # the file of the acknowledged attempt
    duplicate: bool  # answered as already stored (by an earlier attempt, in that attempt's file)
    sent_at: float
    answered_at: float


@final
class History:
    """Every acknowledged batch of a run, appended by the producer threads (as long as the run: one per commit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: list[AcknowledgedBatch] = []

    def record(self, acknowledged: AcknowledgedBatch) -> None:
        with self._lock:
            self._batches.append(acknowledged)

    def batches(self) -> list[AcknowledgedBatch]:
        with self._lock:
            return list(self._batches)

    def count(self) -> int:
        with self._lock:
            return len(self._batches)

    def count_since(self, at: float, coordinator_ids: Iterable[int] | None = None) -> int:
        """Batches sent at or after `at` and acknowledged, on the given coordinators (default: all)."""
        wanted = None if coordinator_ids is None else set(coordinator_ids)
        with self._lock:
            return sum(1 for b in self._batches if b.sent_at >= at and (wanted is None or b.coordinator_id in wanted))


def first_acknowledged_after(history: History, at: float, coordinator_id: int) -> float | None:
    """Seconds from `at` to the answer of the first commit sent at or after `at` on the coordinator; None if none."""
    answers = [b.answered_at for b in history.batches() if b.coordinator_id == coordinator_id and b.sent_at >= at]
    return min(answers) - at if answers else None


def longest_gap_s(history: History, coordinator_ids: Iterable[int], start: float, end: float) -> float:
    """The longest time within [start, end] without an acknowledgement on the coordinators (open at end: up to the
    first one after it, or to `end` if none came)."""
    wanted = set(coordinator_ids)
    times = sorted(b.answered_at for b in history.batches() if b.coordinator_id in wanted and b.answered_at > start)
    points = [start]
    for answered_at in times:
        points.append(answered_at)
        if answered_at > end:
            break
    else:
        points.append(end)
    return max(later - earlier for earlier, later in itertools.pairwise(points))


@final
@dataclass(slots=True)
class HistoryReport:
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    gaps: int = 0  # non-contiguous offsets or a wrong high watermark, per partition
    resend_mismatches: int = 0
    stored: int = 0  # batches read back (acknowledged ones, and attempts whose answer was never seen)
    problems: list[str] = field(default_factory=list)  # the first PROBLEMS_SHOWN_MAX, described

    def problem(self, description: str) -> None:
        if len(self.problems) < PROBLEMS_SHOWN_MAX:
            self.problems.append(description)

    @property
    def clean(self) -> bool:
        return self.lost == self.duplicated == self.gaps == self.resend_mismatches == 0

    def summary(self) -> str:
        return (
            f"acknowledged {self.acknowledged}, lost {self.lost}, duplicated {self.duplicated}, gaps {self.gaps}, "
            f"resends not answered as duplicates {self.resend_mismatches} (stored {self.stored})"
        )


# Where a partition is read and resent: its coordinator's leader now, found by the caller.
LeaderStub = pb_grpc.DisklessCoordinatorStub


def check_partition(
    report: HistoryReport,
    stored: Sequence[pb.BatchInfo],
    high_watermark: int,
    acknowledged: Sequence[AcknowledgedBatch],
) -> None:
    """Counts into `report` what one partition's read-back says of its acknowledged batches."""
    report.acknowledged += len(acknowledged)
    report.stored += len(stored)
    by_offset = {b.base_offset: b for b in stored}
    for expected in acknowledged:
        found = by_offset.get(expected.offset)
        found_batch = batch_of_object_key(found.object_key) if found is not None else None
        same_file = found is not None and found.object_key == expected.object_key
        if found_batch != (expected.producer_id, expected.sequence) or not (same_file or expected.duplicate):
            report.lost += 1
            report.problem(
                f"lost: producer {expected.producer_id} sequence {expected.sequence} acknowledged at offset "
                f"{expected.offset} in {expected.object_key}, found {found.object_key if found else 'nothing'}"
            )
    copies = Counter(key for b in stored if (key := batch_of_object_key(b.object_key)) is not None)
    for (producer_id, sequence), count in copies.items():
        if count > 1:
            report.duplicated += count - 1
            offsets = [b.base_offset for b in stored if batch_of_object_key(b.object_key) == (producer_id, sequence)]
            report.problem(f"duplicated: producer {producer_id} sequence {sequence} stored at offsets {offsets}")
    for earlier, later in itertools.pairwise(stored):
        if later.base_offset != earlier.last_offset + 1:
            report.gaps += 1
            report.problem(f"gap: offsets {earlier.base_offset}..{earlier.last_offset} then {later.base_offset}")
    expected_high_watermark = stored[-1].last_offset + 1 if stored else high_watermark
    if high_watermark != expected_high_watermark:
        report.gaps += 1
        report.problem(f"high watermark {high_watermark}, stored batches end at {expected_high_watermark}")


def resend_last(report: HistoryReport, stub: LeaderStub, last: AcknowledgedBatch) -> None:
    """Sends a producer's last acknowledged batch again in a new file: it must come back as that duplicate."""
    answer = stub.CommitFile(
        pb.CommitFileRequest(
            object_key=attempt_object_key(last.producer_id, last.sequence, 999), object_format=1, file_size=100,
            uploader_broker_id=1, owner_ids=[last.coordinator_id],
            batches=[batch(last.topic_id, last.partition, producer_id=last.producer_id, epoch=0,
                           sequence=last.sequence)],
        ),
        timeout=10,
    ).batches[0]  # fmt: skip
    if answer.error_code != pb.NONE or not answer.is_duplicate or answer.assigned_base_offset != last.offset:
        report.resend_mismatches += 1
        report.problem(
            f"resent producer {last.producer_id} sequence {last.sequence} (acknowledged at {last.offset}): "
            f"{pb.ErrorCode.Name(answer.error_code)} duplicate={answer.is_duplicate} "
            f"offset {answer.assigned_base_offset}"
        )


def check_history(history: History, leader_stub: dict[int, LeaderStub]) -> HistoryReport:
    """Reads back every partition the history wrote to, from its coordinator's leader (`leader_stub` by coordinator
    id), and checks it. Call it once the producers have stopped."""
    report = HistoryReport()
    by_partition: dict[tuple[bytes, int], list[AcknowledgedBatch]] = {}
    for one in history.batches():
        by_partition.setdefault((one.topic_id, one.partition), []).append(one)
    for (topic_id, partition), acknowledged in by_partition.items():
        stub = leader_stub[acknowledged[0].coordinator_id]
        stored, _, high_watermark = fetch_all_batches(stub, topic_id, partition)
        check_partition(report, stored, high_watermark, acknowledged)
        last_by_producer: dict[int, AcknowledgedBatch] = {}
        for batch_acknowledged in acknowledged:
            last = last_by_producer.get(batch_acknowledged.producer_id)
            if last is None or batch_acknowledged.sequence > last.sequence:
                last_by_producer[batch_acknowledged.producer_id] = batch_acknowledged
        for last in last_by_producer.values():
            resend_last(report, stub, last)
    return report
