"""The consolidation job's planning, on the driver: every coordinator's work items cut into runs.

GetFileMergeWorkItem answers per coordinator, paged, the oldest small files with their live batches
(spark/consolidation_tasks.py `plan_task`). Planning is I/O (one call per page) and a sort per partition:
it runs on the driver, one thread per coordinator at most `PLANNING_THREADS` at a time, and only the
byte moving is spread over Spark's executors. Shuffling every batch as a Python object through Spark
(`groupByKey`, as the job first did) took 262 of its 919 s at 10,000 files on two cores.

The batches are grouped per (coordinator, topic, partition) as the pages arrive; the object key of a
file is one string shared by all its batches (`plan_task`; a 100,000-file plan holds millions of batches).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent import futures
from dataclasses import dataclass

from spark.consolidation_pacing import PlanningPacer
from spark.consolidation_rules import Run, SourceBatch, partition_runs
from spark.consolidation_tasks import PlanRequest, plan_task

PLANNING_THREADS = 8  # coordinators asked at once; their calls are I/O, each a page of files

PartitionKey = tuple[int, bytes, int]  # coordinator id, topic id, partition


@dataclass(frozen=True, slots=True)
class Plan:
    runs: list[Run]
    files: int  # distinct source files planned
    batches: int  # live batches planned


def _one_coordinator(
    coordinator: tuple[int, str], request: PlanRequest, pacer: PlanningPacer
) -> dict[PartitionKey, list[SourceBatch]]:
    by_partition: dict[PartitionKey, list[SourceBatch]] = {}
    for batch in plan_task([coordinator], request, pacer):
        by_partition.setdefault((batch.coordinator_id, batch.topic_id, batch.partition), []).append(batch)
    return by_partition


def plan_runs(
    coordinators: Iterable[tuple[int, str]],
    request: PlanRequest,
    target_bytes: int,
    max_batches: int,
    threads: int = PLANNING_THREADS,
) -> Plan:
    """Every coordinator asked (a failure raises, before anything moved), its batches cut into runs.

    The runs come ordered by coordinator, topic and partition, so that a rerun plans them in the same
    order (and the same keys, spark/consolidation_rules.py)."""
    listed = list(coordinators)
    by_partition: dict[PartitionKey, list[SourceBatch]] = {}
    pacer = PlanningPacer(request.duty_percent)  # one page in flight at a time over the threads, paced
    with futures.ThreadPoolExecutor(max(1, min(threads, len(listed)))) as pool:
        for answered in pool.map(lambda c: _one_coordinator(c, request, pacer), listed):
            by_partition.update(answered)  # coordinators hold disjoint partitions
    files: set[str] = set()
    batches = 0
    runs: list[Run] = []
    for partition in sorted(by_partition):
        planned = by_partition.pop(partition)  # dropped as cut: the runs keep what moves
        batches += len(planned)
        files.update(b.object_key for b in planned)
        runs.extend(partition_runs(planned, target_bytes, max_batches))
    return Plan(runs, len(files), batches)
