"""The consolidation job's work on executors: planning from the coordinators, and one run moved.

Planning (`plan_task`): each coordinator's leader is asked for its oldest small files with their live
batches (GetFileMergeWorkItem, paged, up to --max-files files per coordinator); every batch becomes a
row, grouped by partition afterwards by Spark. A coordinator that answers an error, or a node that does
not answer, fails the task: the job then moves nothing (it has not started to).

A run (`move_run`): its source ranges are read from the store, every batch checked (length, CRC-32C,
offsets; a bad one is left in place and reported), the good ones written as one object under the run's
key (spark/consolidation_rules.py), then ReplaceBatches is sent to the leader of the partition's
coordinator, retried with the same request while the answer is not known (the call is idempotent for
its key). Then:

- some extent moved: done (the extents refused stay where they were, reported);
- the call answered and nothing moved: the object is deleted only if every node's DescribeFiles says
  no coordinator knows it (the orphan scan's rule, spark/deletion.py); a coordinator that recorded it
  deletes it itself after its grace (DESIGN §4c);
- no answer after the retries: the outcome is unknown (the record may still be applied), so the object
  is kept; the orphan scan removes it after its grace if no coordinator knows it, and a rerun of the
  same run commits it (same key, same bytes).

A kill -9 anywhere leaves at most an uploaded object no coordinator knows: the source batches are only
moved by the coordinator's record, atomically per coordinator.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from coordinator.base.backoff import Backoff
from coordinator.files.object_store import ObjectStore, ObjectStoreError, StoreConfig
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from spark.consolidation_pacing import PlanningPacer
from spark.consolidation_rules import (
    Extent,
    Run,
    SourceBatch,
    describe_batch,
    gets_to_read,
    layout_extents,
    read_ranges,
    replace_groups,
    run_object_key,
    source_batch_problem,
)
from spark.consolidation_shipping import Payload, unpack_runs
from spark.coordinator_client import CoordinatorAccess, CoordinatorsUnavailable
from spark.deletion import DeletePlan, delete_task
from spark.listing import open_existing_store

REPLACE_ATTEMPTS = 5  # ReplaceBatches calls per run while the answer is not known (the first included)
REPLACE_BACKOFF_MS = 200
REPLACE_BACKOFF_MAX_MS = 5000
PLAN_ATTEMPTS = 3
RETRIED_STATUS = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED}
)
# Per-extent answers that say "not now" rather than "no": the same call is sent again.
RETRIED_ERRORS = frozenset(
    {
        pb.NOT_COORDINATOR,
        pb.COORDINATOR_LOAD_IN_PROGRESS,
        pb.COORDINATOR_NOT_AVAILABLE,
        pb.REQUEST_TIMED_OUT,
        pb.NOT_ENOUGH_REPLICAS,
        pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        pb.NOT_LEADER_OR_FOLLOWER,
        pb.THROTTLING_QUOTA_EXCEEDED,
    }
)
OBJECT_FORMAT_WAL = 1  # WRITE_AHEAD_MULTI_SEGMENT, as brokers commit theirs
MESSAGES_MAX = 10  # messages a run's result carries; its counts are complete

MOVED = "moved"
PLANNED = "planned"  # a dry run: what would move
NOTHING_TO_MOVE = "nothing-to-move"  # every batch failed its check: nothing uploaded
REFUSED = "refused"  # the call answered, nothing moved
UNKNOWN = "unknown"  # no answer: the object is kept
UPLOAD_FAILED = "upload-failed"


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What a planning task asks each coordinator; picklable."""

    access: CoordinatorAccess
    min_age_ms: int
    max_file_size: int  # 0: the server's default
    max_files: int  # per coordinator
    # Also only files committed at or before this wall-clock time (0: no such bound): the age bound is
    # relative to when each coordinator is asked, this one is the same for all of them.
    committed_before_ms: int = 0
    # The planning calls' share of the coordinators' time at most, all planning threads together
    # (diskless.consolidation.replace.duty.percent; 100: no pause): a page of GetFileMergeWorkItem is read on the
    # coordinator's loop, and pages asked back to back from every coordinator at once held it while commits waited.
    # Kept by one PlanningPacer shared by the threads (spark/consolidation_pacing.py).
    duty_percent: int = 100


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run task needs besides its run; picklable."""

    store: StoreConfig
    access: CoordinatorAccess
    leaders: dict[int, str]  # coordinator id -> HOST:PORT of its leader
    nodes: tuple[str, ...]  # every leader node, asked by DescribeFiles before an object is deleted
    uploader_broker_id: int
    dry_run: bool = False
    replace_duty_percent: int = 100  # diskless.consolidation.replace.duty.percent (100: no pause)
    replace_group_batches: int = 0  # diskless.consolidation.replace.group.batches (0: one call at a time)
    # For tests only: called with the object key after its upload and before ReplaceBatches (a crash there).
    after_upload: Callable[[str], None] | None = None


@dataclass(slots=True)
class RunResult:
    coordinator_id: int
    partition: str  # topic id hex-partition
    object_key: str
    status: str
    batches: int  # in the run
    batches_moved: int = 0
    bytes_moved: int = 0
    damaged: int = 0  # batches that failed their check: left in place
    refused: int = 0  # batches of extents the coordinator refused
    refused_otherwise: int = 0  # of those, refused for another reason than "deleted meanwhile"
    gets_before: int = 0  # to read the moved batches from the first, before
    gets_after: int = 0  # and after
    moved_from: list[str] = field(default_factory=list)  # the source objects of the moved batches
    object_deleted: bool = False
    replace_ms: float = 0.0  # the ReplaceBatches call(s), retries included: what the coordinator's loop waited on
    messages: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.messages) < MESSAGES_MAX:
            self.messages.append(message)


# ---------------------------------------------------------------------- planning


def _work_items(
    stub: pb_grpc.DisklessCoordinatorStub, coordinator_id: int, node: str, request: PlanRequest, pacer: PlanningPacer
) -> Iterator[pb.GetFileMergeWorkItemResponse.File]:
    token, files = b"", 0
    while files < request.max_files:
        min_age_ms = request.min_age_ms
        if request.committed_before_ms > 0:
            min_age_ms = max(min_age_ms, time.time_ns() // 1_000_000 - request.committed_before_ms)
        asked = pb.GetFileMergeWorkItemRequest(
            coordinator_id=coordinator_id,
            min_age_ms=min_age_ms,
            max_file_size=request.max_file_size,
            max_files=request.max_files - files,
            page_token=token,
        )
        who = f"coordinator {coordinator_id} on {node}"
        answer = pacer.call(functools.partial(_call_planning, stub, asked, request.access.rpc_timeout_s, who))
        for item in answer.files[: request.max_files - files]:
            files += 1
            yield item
        token = answer.next_page_token
        if not token or not answer.files:
            return


def _call_planning(
    stub: pb_grpc.DisklessCoordinatorStub, request: pb.GetFileMergeWorkItemRequest, timeout_s: float, who: str
) -> pb.GetFileMergeWorkItemResponse:
    backoff = Backoff(REPLACE_BACKOFF_MS, REPLACE_BACKOFF_MAX_MS)
    for attempt in range(1, PLAN_ATTEMPTS + 1):
        try:
            answer = stub.GetFileMergeWorkItem(request, timeout=timeout_s)
        except grpc.RpcError as error:
            if error.code() not in RETRIED_STATUS or attempt == PLAN_ATTEMPTS:
                raise CoordinatorsUnavailable(
                    f"{who}: GetFileMergeWorkItem {error.code().name} {error.details()}"
                ) from None
            time.sleep(backoff.failed() / 1000)
            continue
        if answer.error_code != pb.NONE:
            name = pb.ErrorCode.Name(answer.error_code) if answer.error_code in pb.ErrorCode.values() else "error"
            raise CoordinatorsUnavailable(f"{who}: GetFileMergeWorkItem {name} {answer.error_message}")
        return answer
    raise AssertionError("unreachable: the last attempt returns or raises")


def plan_task(
    coordinators: Iterable[tuple[int, str]], request: PlanRequest, pacer: PlanningPacer | None = None
) -> Iterator[SourceBatch]:
    """The live batches of the coordinators' oldest small files; `pacer` shared by the threads planning at once."""
    pacer = pacer or PlanningPacer(request.duty_percent)
    for coordinator_id, node in coordinators:
        with request.access.channel(node) as channel:
            stub = pb_grpc.DisklessCoordinatorStub(channel)
            for item in _work_items(stub, coordinator_id, node, request, pacer):
                key = item.object_key  # one string per file, shared by its batches (a plan holds millions)
                for b in item.batches:
                    yield SourceBatch(coordinator_id, b.topic_id, b.partition, b.base_offset, b.last_offset,
                                      key, b.byte_offset, b.size)  # fmt: skip


# ---------------------------------------------------------------------- one run


def _read_checked(store: ObjectStore, run: Run, result: RunResult) -> list[tuple[SourceBatch, bytes | None]]:
    """Every batch of the run with its bytes, or None where they are missing or failed the check."""
    checked: list[tuple[SourceBatch, bytes | None]] = []
    for read in read_ranges(run.batches):
        data = store.read_range(read.object_key, read.byte_offset, read.size)
        position = 0
        for batch in read.batches:
            piece = None if data is None else data[position : position + batch.size]
            position += batch.size
            problem = "its object is missing" if piece is None else source_batch_problem(batch, piece)
            if problem is not None:
                result.damaged += 1
                result.note(f"left in place: {describe_batch(batch)}: {problem}")
                piece = None
            checked.append((batch, piece))
    return checked


def move_run(run: Run, plan: RunPlan) -> RunResult:
    """Reads, checks, uploads and commits one run; never raises for the run's own failures."""
    result = _planned_result(run, plan)
    store = open_existing_store(plan.store)
    try:
        _move(run, plan, store, result)
    finally:
        store.close()
    return result


def _planned_result(run: Run, plan: RunPlan) -> RunResult:
    key = run_object_key(run, plan.store.prefix)
    return RunResult(run.coordinator_id, f"{run.topic_id.hex()}-{run.partition}", key, PLANNED, len(run.batches))


def _move(run: Run, plan: RunPlan, store: ObjectStore, result: RunResult) -> None:
    prepared = _upload(run, plan, store, result)
    if prepared is not None:
        _commit(run, plan, result, *prepared)


def _upload(
    run: Run, plan: RunPlan, store: ObjectStore, result: RunResult
) -> tuple[list[Extent], pb.ReplaceBatchesRequest] | None:
    """Reads, checks and uploads the run's object; its ReplaceBatches request, or None when nothing is to commit."""
    try:
        checked = _read_checked(store, run, result)
    except ObjectStoreError as error:
        result.status = UPLOAD_FAILED
        result.note(f"reading the sources failed: {error}")
        return None
    good = [piece is not None for _, piece in checked]
    extents = layout_extents(run.batches, good)
    moving = [batch for batch, piece in checked if piece is not None]
    if not extents:
        result.status = NOTHING_TO_MOVE
        return None
    result.gets_before = gets_to_read(moving)
    result.moved_from = sorted({b.object_key for b in moving})
    if plan.dry_run:
        result.batches_moved, result.bytes_moved, result.gets_after = len(moving), sum(b.size for b in moving), 1
        return None
    data = b"".join(piece for _, piece in checked if piece is not None)
    try:
        store.put(result.object_key, data)
    except ObjectStoreError as error:
        result.status = UPLOAD_FAILED
        result.note(f"upload of {result.object_key} failed: {error}")
        return None
    if plan.after_upload is not None:
        plan.after_upload(result.object_key)
    request = pb.ReplaceBatchesRequest(
        object_key=result.object_key,
        object_format=OBJECT_FORMAT_WAL,
        file_size=len(data),
        uploader_broker_id=plan.uploader_broker_id,
        owner_ids=[run.coordinator_id],
        extents=[_extent(run, e) for e in extents],
        timeout_ms=int(plan.access.rpc_timeout_s * 1000),
    )
    return extents, request


def _commit(
    run: Run, plan: RunPlan, result: RunResult, extents: list[Extent], request: pb.ReplaceBatchesRequest
) -> None:
    called = time.monotonic()
    answers = _replace(plan, run.coordinator_id, request, result)
    result.replace_ms = round((time.monotonic() - called) * 1000, 1)
    if answers is None:
        result.status = UNKNOWN  # kept: a rerun commits it, or the orphan scan removes it
        return
    _tally(run, extents, answers, result)
    if result.batches_moved == 0:
        result.status = REFUSED
        result.object_deleted = _delete_if_unknown(plan, result)
    else:
        result.status = MOVED
        result.gets_after = 1


def _extent(run: Run, extent: Extent) -> pb.ReplaceBatchesRequest.Extent:
    return pb.ReplaceBatchesRequest.Extent(
        topic_id=run.topic_id,
        partition=run.partition,
        base_offset=extent.base_offset,
        last_offset=extent.last_offset,
        byte_offset=extent.byte_offset,
        size=extent.size,
    )


def _replace(
    plan: RunPlan, coordinator_id: int, request: pb.ReplaceBatchesRequest, result: RunResult
) -> list[pb.ReplaceBatchesResponse.ExtentResult] | None:
    """Each extent's answer, or None if no final answer came after the retries."""
    node = plan.leaders[coordinator_id]
    backoff = Backoff(REPLACE_BACKOFF_MS, REPLACE_BACKOFF_MAX_MS)
    with plan.access.channel(node) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        for attempt in range(1, REPLACE_ATTEMPTS + 1):
            try:
                answer = stub.ReplaceBatches(request, timeout=plan.access.rpc_timeout_s)
            except grpc.RpcError as error:
                problem = f"ReplaceBatches on {node}: {error.code().name} {error.details()}"
                if error.code() not in RETRIED_STATUS:
                    # Refused before it ran (a bad request, no permission): nothing was written.
                    result.note(problem)
                    refused = pb.ReplaceBatchesResponse.ExtentResult(
                        error_code=pb.INVALID_REQUEST, error_message=problem
                    )
                    return [refused] * len(request.extents)
            else:
                extents = list(answer.extents)
                if len(extents) != len(request.extents):
                    problem = f"ReplaceBatches on {node} answered {len(extents)} extents for {len(request.extents)}"
                elif not any(e.error_code in RETRIED_ERRORS for e in extents):
                    return extents
                else:
                    problem = f"ReplaceBatches on {node}: " + ", ".join(
                        pb.ErrorCode.Name(e.error_code) for e in extents if e.error_code in RETRIED_ERRORS
                    )
            if attempt == REPLACE_ATTEMPTS:
                result.note(f"{problem}; no answer after {attempt} calls: object kept")
                return None
            time.sleep(backoff.failed() / 1000)
    raise AssertionError("unreachable: the last attempt returns")


def _tally(
    run: Run, extents: list[Extent], answers: list[pb.ReplaceBatchesResponse.ExtentResult], result: RunResult
) -> None:
    moved: list[SourceBatch] = []
    for extent, answer in zip(extents, answers, strict=True):
        inside = [b for b in run.batches if extent.base_offset <= b.base_offset <= extent.last_offset]
        if answer.error_code == pb.NONE:
            moved.extend(inside)
            result.bytes_moved += extent.size
        else:
            result.refused += len(inside)
            if answer.error_code != pb.OFFSET_OUT_OF_RANGE:
                result.refused_otherwise += len(inside)
            name = pb.ErrorCode.Name(answer.error_code) if answer.error_code in pb.ErrorCode.values() else "error"
            result.note(
                f"offsets {extent.base_offset}..{extent.last_offset} of {result.partition} stay: {name} "
                f"{answer.error_message}"
            )
    result.batches_moved = len(moved)
    result.gets_before = gets_to_read(moved)
    result.moved_from = sorted({b.object_key for b in moved})


def _delete_if_unknown(plan: RunPlan, result: RunResult) -> bool:
    """Deletes the object moved nothing into, once no coordinator knows it (else its coordinator will)."""
    tally = next(delete_task([result.object_key], DeletePlan(plan.store, plan.access, plan.nodes, 0)))
    for failure in tally.failures:
        result.note(f"cleanup: {failure}")
    return tally.deleted == 1


def replace_pause_s(replace_ms: float, duty_percent: int) -> float:
    """The pause after a ReplaceBatches call of `replace_ms` that keeps the calls to `duty_percent` of the time.

    The call's wall time is what the coordinator's loop spent on the record plus what the call waited
    for it (a busy node answers slower): the pause grows with both, so the job backs off a loaded node."""
    return replace_ms / 1000 * (100 / duty_percent - 1)


def move_task(runs: Iterable[Run], plan: RunPlan, sleep: Callable[[float], None] = time.sleep) -> Iterator[RunResult]:
    """One run task (a Spark partition): its runs in groups (`replace_groups`), each paced (`replace_pause_s`) by
    its slowest ReplaceBatches call. A lone run is `move_run`; a group's objects are uploaded one after the other,
    then its calls sent together, so that the coordinator commits them in one group (one SQLite transaction: the
    source file rows and index pages their runs share are written once)."""
    for group in replace_groups(runs, plan.replace_group_batches):
        results = [move_run(group[0], plan)] if len(group) == 1 else _move_group(group, plan)
        yield from results
        slowest = max(result.replace_ms for result in results)
        if slowest > 0 and plan.replace_duty_percent < 100:
            sleep(replace_pause_s(slowest, plan.replace_duty_percent))


def _move_group(group: list[Run], plan: RunPlan) -> list[RunResult]:
    results, prepared = [], []
    store = open_existing_store(plan.store)
    try:
        for run in group:
            result = _planned_result(run, plan)
            results.append(result)
            upload = _upload(run, plan, store, result)
            if upload is not None:
                prepared.append((run, result, upload))
    finally:
        store.close()
    if prepared:
        with futures.ThreadPoolExecutor(len(prepared)) as pool:
            list(pool.map(lambda item: _commit(item[0], plan, item[1], *item[2]), prepared))
    return results


def move_payloads(
    payloads: Iterable[Payload], plan: RunPlan, sleep: Callable[[float], None] = time.sleep
) -> Iterator[RunResult]:
    """One run task (a Spark partition): its payload's runs, decoded one at a time and moved (`move_task`)."""
    for payload in payloads:
        yield from move_task(unpack_runs(payload), plan, sleep)
