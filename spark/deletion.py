"""Deleting orphans on executors: re-checked, in batches, paced (DESIGN §7, step 5).

The keys come from the manifest the driver wrote before (never from memory),
capped by the driver at `--max-deletes`. They are the anti-join's orphans: keys
no coordinator knew when its keys were read. Each task takes its keys in
batches; right before a batch is deleted the coordinators are asked again
(DescribeFiles on every node) and only keys still unknown everywhere go: a file
committed since the known keys were read is kept (`kept_by_recheck`), and so is
one a node did not answer for (`unresolved`). That costs one DescribeFiles per
batch, for the few keys the anti-join left, cheap next to a wrong delete. A
key already missing counts as deleted (the store says so), so a rerun or a
retried task is harmless. Pacing is per task: the driver gives each task its
share of `--delete-rate`, and a task's n-th key is not deleted before n / rate
seconds after its first. Each task times its re-checks, deletes and pacing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from coordinator.files.object_store import ObjectStore, ObjectStoreError, StoreConfig
from coordinator.files.object_store.base import DELETE_BATCH_MAX
from spark.coordinator_client import (
    DESCRIBE_BATCH_KEYS,
    ORPHAN,
    UNRESOLVED,
    CoordinatorAccess,
    FileDescriber,
    batched,
)
from spark.listing import open_existing_store

DELETE_BATCH_KEYS = min(DELETE_BATCH_MAX, DESCRIBE_BATCH_KEYS)
FAILURE_SAMPLE_MAX = 10  # failure messages a task sends back; the counts are complete


@dataclass(frozen=True, slots=True)
class DeletePlan:
    """What a deletion task needs; picklable."""

    store: StoreConfig
    access: CoordinatorAccess
    nodes: tuple[str, ...]
    keys_per_second: float  # this task's share of --delete-rate; 0: no limit

    @property
    def batch_keys(self) -> int:
        """Keys per batch: at most one second's worth, so the pace stays smooth at low rates."""
        if self.keys_per_second <= 0:
            return DELETE_BATCH_KEYS
        return max(1, min(DELETE_BATCH_KEYS, int(self.keys_per_second)))


@dataclass(slots=True)
class DeleteTally:
    deleted: int = 0
    failed: int = 0
    kept_by_recheck: int = 0  # a coordinator knew them at delete time
    unresolved: int = 0  # some node did not answer for them at delete time: kept
    failures: list[str] = field(default_factory=list)  # a capped sample
    recheck_s: float = 0.0  # in DescribeFiles before each batch
    delete_s: float = 0.0  # in the store's deletes
    paced_s: float = 0.0  # waiting for the pace of --delete-rate

    def note_failure(self, message: str) -> None:
        if len(self.failures) < FAILURE_SAMPLE_MAX:
            self.failures.append(message)

    def merge(self, other: DeleteTally) -> DeleteTally:
        return DeleteTally(
            self.deleted + other.deleted,
            self.failed + other.failed,
            self.kept_by_recheck + other.kept_by_recheck,
            self.unresolved + other.unresolved,
            (self.failures + other.failures)[:FAILURE_SAMPLE_MAX],
            self.recheck_s + other.recheck_s,
            self.delete_s + other.delete_s,
            self.paced_s + other.paced_s,
        )


class Pacer:
    """Lets n keys through no sooner than n / rate seconds after the first batch."""

    def __init__(
        self,
        keys_per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._rate = keys_per_second
        self._clock = clock
        self._sleep = sleep
        self._start: float | None = None
        self._granted = 0

    def wait_turn(self, keys: int) -> None:
        """Waits until `keys` more may go."""
        if self._rate <= 0:
            return
        now = self._clock()
        if self._start is None:
            self._start = now
        delay = self._start + self._granted / self._rate - now
        if delay > 0:
            self._sleep(delay)
        self._granted += keys


def delete_task(
    keys: Iterable[str], plan: DeletePlan, clock: Callable[[], float] = time.monotonic
) -> Iterator[DeleteTally]:
    """One deletion task (a Spark partition): yields a single tally."""
    tally = DeleteTally()
    pacer = Pacer(plan.keys_per_second)
    store = open_existing_store(plan.store)
    try:
        with FileDescriber(plan.access, plan.nodes) as describer:
            for batch in batched(keys, plan.batch_keys):
                started = clock()
                still_orphans = _recheck(describer, batch, tally)
                tally.recheck_s += clock() - started
                if not still_orphans:
                    continue
                started = clock()
                pacer.wait_turn(len(still_orphans))
                tally.paced_s += clock() - started
                started = clock()
                _delete(store, still_orphans, tally)
                tally.delete_s += clock() - started
    finally:
        store.close()
    yield tally


def _recheck(describer: FileDescriber, batch: list[str], tally: DeleteTally) -> list[str]:
    """The keys of the batch that every node still answers unknown, just before they are deleted."""
    still_orphans = []
    for key, (verdict, reason) in zip(batch, describer.describe(batch), strict=True):
        if verdict == ORPHAN:
            still_orphans.append(key)
        elif verdict == UNRESOLVED:
            tally.unresolved += 1
            tally.note_failure(f"{key}: kept, unresolved at delete time: {reason}")
        else:
            tally.kept_by_recheck += 1
    return still_orphans


def _delete(store: ObjectStore, keys: list[str], tally: DeleteTally) -> None:
    try:
        outcome = store.delete(keys)
    except ObjectStoreError as error:
        tally.failed += len(keys)
        tally.note_failure(f"{len(keys)} keys from {keys[0]!r}: {error}")
        return
    tally.deleted += len(outcome.deleted)
    tally.failed += len(outcome.failed)
    for key, reason in outcome.failed.items():
        tally.note_failure(f"{key}: {reason}")
