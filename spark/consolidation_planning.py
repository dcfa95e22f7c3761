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
) -> tuple[dict[PartitionKey, list[SourceBatch]], dict[str, int]]:
    """The coordinator's batches by partition, and each source file's rank in its answer (oldest first)."""
    by_partition: dict[PartitionKey, list[SourceBatch]] = {}
    ranks: dict[str, int] = {}
    for batch in plan_task([coordinator], request, pacer):
        by_partition.setdefault((batch.coordinator_id, batch.topic_id, batch.partition), []).append(batch)
        ranks.setdefault(batch.object_key, len(ranks))
    return by_partition, ranks


def plan_runs(
    coordinators: Iterable[tuple[int, str]],
    request: PlanRequest,
    target_bytes: int,
    max_batches: int,
    threads: int = PLANNING_THREADS,
) -> Plan:
    """Every coordinator asked (a failure raises, before anything moved), its batches cut into runs.

    The runs come ordered by coordinator, then by the rank of the source file each starts in, then topic and
    partition: a coordinator's runs that start in the same file (a broker's partitions, each with a batch in
    each of the broker's files) are side by side, so that a run task sends them together (`replace_groups`) and
    the coordinator writes the rows and index pages of the files they share once. A rerun plans the same runs
    in the same order (and the same keys, spark/consolidation_rules.py)."""
    listed = list(coordinators)
    by_partition: dict[PartitionKey, list[SourceBatch]] = {}
    ranks: dict[int, dict[str, int]] = {}
    pacer = PlanningPacer(request.duty_percent)  # one page in flight at a time over the threads, paced
    with futures.ThreadPoolExecutor(max(1, min(threads, len(listed)))) as pool:
        for (coordinator_id, _), (answered, ranked) in zip(
            listed, pool.map(lambda c: _one_coordinator(c, request, pacer), listed), strict=True
        ):
            by_partition.update(answered)  # coordinators hold disjoint partitions
            ranks[coordinator_id] = ranked
    files: set[str] = set()
    batches = 0
    ordered: list[tuple[int, int, PartitionKey, Run]] = []
    for partition in sorted(by_partition):
        planned = by_partition.pop(partition)  # dropped as cut: the runs keep what moves
        batches += len(planned)
        files.update(b.object_key for b in planned)
        rank = ranks[partition[0]]
        ordered.extend(
            (partition[0], rank[run.batches[0].object_key], partition, run)
            for run in partition_runs(planned, target_bytes, max_batches)
        )
    ordered.sort(key=lambda item: item[:3])
    return Plan([run for *_, run in ordered], len(files), batches)
