"""The consolidation job's pure rules (spark/consolidation_rules.py: runs, keys, reads, extents, GETs) and
its summary's counts and status (spark/consolidation_report.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from coordinator.files.object_store import StoreConfig
from coordinator.machine.object_keys import WAL_KEY_PATTERN
from spark.consolidation_options import add_consolidate_arguments, options_from_arguments
from spark.consolidation_report import INCOMPLETE, OK, ConsolidationReport
from spark.consolidation_rules import (
    Extent,
    Run,
    SourceBatch,
    gets_to_read,
    layout_extents,
    partition_runs,
    read_ranges,
    replace_groups,
    run_object_key,
    source_batch_problem,
)
from spark.consolidation_tasks import (
    MOVED,
    REFUSED,
    UNKNOWN,
    UPLOAD_FAILED,
    PlanRequest,
    RunPlan,
    RunResult,
    move_task,
    replace_pause_s,
)
from spark.coordinator_client import CoordinatorAccess
from spark.record_batches import Record, encode_batch

TOPIC = bytes(range(16))


def batch(base: int, last: int, key: str, byte_offset: int = 0, size: int = 100) -> SourceBatch:
    return SourceBatch(3, TOPIC, 0, base, last, key, byte_offset, size)


def test_a_run_is_consecutive_offsets_from_two_files_at_least_up_to_the_target() -> None:
    batches = [batch(0, 1, "a"), batch(2, 2, "b"), batch(3, 5, "c"), batch(6, 6, "d"), batch(7, 7, "e")]
    runs = partition_runs(reversed(batches), target_bytes=300)  # any order in: offset order out
    assert [[b.base_offset for b in run.batches] for run in runs] == [[0, 2, 3], [6, 7]]
    assert all(run.size <= 300 and len(run.source_keys) >= 2 for run in runs)


def test_a_run_moves_at_most_the_batches_one_replace_batches_call_may() -> None:
    batches = [batch(i, i, f"f{i}") for i in range(7)]
    runs = partition_runs(batches, target_bytes=10_000, max_batches=3)
    assert [[b.base_offset for b in run.batches] for run in runs] == [[0, 1, 2], [3, 4, 5]]  # 6 alone: one file


def test_a_gap_in_offsets_ends_a_run_since_an_extent_moves_its_whole_range() -> None:
    # Offsets 2..4 live in a file that was not planned (young, large, or past --max-files).
    runs = partition_runs([batch(0, 1, "a"), batch(5, 5, "b"), batch(6, 6, "c")], target_bytes=10_000)
    assert [[b.base_offset for b in run.batches] for run in runs] == [[5, 6]]


def test_a_run_from_one_file_only_is_not_worth_moving() -> None:
    assert partition_runs([batch(0, 0, "a", 0), batch(1, 1, "a", 100)], target_bytes=10_000) == []
    # A batch larger than the target stays where it is, and cuts the runs around it.
    big = batch(2, 2, "b", size=5000)
    runs = partition_runs([batch(0, 0, "a"), batch(1, 1, "c"), big, batch(3, 3, "d"), batch(4, 4, "e")], 1000)
    assert [[b.base_offset for b in run.batches] for run in runs] == [[0, 1], [3, 4]]


def test_a_run_key_is_a_wal_key_the_same_for_the_same_run_and_new_for_another() -> None:
    run = partition_runs([batch(0, 0, "a"), batch(1, 1, "b")], 10_000)[0]
    again = partition_runs([batch(1, 1, "b"), batch(0, 0, "a")], 10_000)[0]
    other = partition_runs([batch(0, 0, "a"), batch(1, 1, "c")], 10_000)[0]
    key = run_object_key(run, "cluster/")
    assert re.fullmatch(WAL_KEY_PATTERN, key.removeprefix("cluster/")) and key.startswith("cluster/wal/")
    assert run_object_key(again, "cluster/") == key
    assert run_object_key(other, "cluster/") != key


def test_back_to_back_batches_of_one_file_are_one_read_and_one_get() -> None:
    batches = [batch(0, 0, "a", 0), batch(1, 1, "a", 100), batch(2, 2, "b", 0), batch(3, 3, "a", 300)]
    ranges = read_ranges(batches)
    assert [(r.object_key, r.byte_offset, r.size, len(r.batches)) for r in ranges] == [
        ("a", 0, 200, 2), ("b", 0, 100, 1), ("a", 300, 100, 1)
    ]  # fmt: skip
    assert gets_to_read(batches) == 3


def test_extents_skip_a_damaged_batch_and_lay_the_rest_back_to_back() -> None:
    batches = [
        batch(0, 1, "a", size=10),
        batch(2, 2, "b", size=20),
        batch(3, 4, "c", size=30),
        batch(5, 5, "d", size=5),
    ]
    assert layout_extents(batches, [True, True, True, True]) == [Extent(0, 5, 0, 65)]
    assert layout_extents(batches, [True, False, True, True]) == [Extent(0, 1, 0, 10), Extent(3, 5, 10, 35)]
    assert layout_extents(batches, [False, False, False, False]) == []


def test_a_source_batch_must_be_intact_and_the_batch_its_coordinator_describes() -> None:
    data = encode_batch([Record(0, 1, None, b"x"), Record(1, 2, None, b"y")])
    described = batch(10, 11, "a", size=len(data))
    assert source_batch_problem(described, data) is None
    assert "CRC-32C" in (source_batch_problem(described, data[:-1] + bytes([data[-1] ^ 1])) or "")
    assert "bytes read" in (source_batch_problem(described, data[:-1]) or "")
    assert "offsets" in (source_batch_problem(batch(10, 12, "a", size=len(data)), data) or "")


def run_result(status: str, **counts: object) -> RunResult:
    return RunResult(0, "t-0", "wal/00/x.wal", status, batches=3, **counts)  # type: ignore[arg-type]


def test_the_summary_counts_objects_files_and_gets_and_says_what_went_wrong() -> None:
    report = ConsolidationReport("consolidate", 0, "local x", 0, 100, 10)
    report.add([
        run_result(MOVED, batches_moved=3, bytes_moved=300, gets_before=3, gets_after=1, moved_from=["a", "b"]),
        run_result(MOVED, batches_moved=2, bytes_moved=200, gets_before=2, gets_after=1, moved_from=["b", "c"]),
        run_result(REFUSED, refused=3, object_deleted=True),  # deleted meanwhile: nothing wrong
    ])  # fmt: skip
    report.finish()
    assert (report.status, report.exit_code) == (OK, 0)
    assert (report.objects_out, report.files_in, report.batches_moved, report.bytes_moved) == (2, 3, 5, 500)
    assert (report.gets_before, report.gets_after, report.objects_deleted) == (5, 2, 1)
    for trouble in ({"damaged": 1}, {"refused_otherwise": 1}):
        troubled = ConsolidationReport("consolidate", 0, "local x", 0, 100, 10)
        troubled.add([run_result(MOVED, batches_moved=1, **trouble)])
        troubled.finish()
        assert (troubled.status, troubled.exit_code) == (INCOMPLETE, 1), trouble
    for status in (UNKNOWN, UPLOAD_FAILED):
        troubled = ConsolidationReport("consolidate", 0, "local x", 0, 100, 10)
        troubled.add([run_result(status)])
        troubled.finish()
        assert troubled.status == INCOMPLETE and troubled.objects_out == 0, status


def test_the_summary_names_the_replace_batches_calls_median_and_slowest() -> None:
    report = ConsolidationReport("consolidate", 0, "local x", 0, 100, 10)
    report.add([run_result(MOVED, batches_moved=1, replace_ms=ms) for ms in (4.0, 9.5, 2.0, 120.0, 5.0)])
    assert (report.replace_ms_p50, report.replace_ms_max) == (5.0, 120.0)
    assert "p50 5 ms, slowest 120 ms" in report.to_table()


def test_a_run_task_pauses_after_each_replace_batches_call_in_proportion_to_its_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spark import consolidation_tasks

    assert replace_pause_s(30.0, 20) == pytest.approx(0.120)  # 30 ms busy, then 120 ms away: 20% of the time
    assert replace_pause_s(30.0, 100) == 0.0
    calls = iter([run_result(MOVED, replace_ms=10.0), run_result(REFUSED), run_result(MOVED, replace_ms=50.0)])
    monkeypatch.setattr(consolidation_tasks, "move_run", lambda run, plan: next(calls))
    pauses: list[float] = []
    plan = RunPlan(StoreConfig("local", "/nowhere"), CoordinatorAccess(("127.0.0.1:1",)), {}, (), 0,
                   replace_duty_percent=50)  # fmt: skip
    runs = [Run(0, TOPIC, p, (batch(0, 0, "wal/a"),)) for p in range(3)]
    results = list(move_task(runs, plan, sleep=pauses.append))
    assert len(results) == 3
    assert pauses == [pytest.approx(0.010), pytest.approx(0.050)]  # none after a run that called nothing
    unpaced = RunPlan(plan.store, plan.access, {}, (), 0)
    calls = iter([run_result(MOVED, replace_ms=10.0)])
    assert len(list(move_task(runs[:1], unpaced, sleep=pauses.append))) == 1
    assert len(pauses) == 2


def test_a_run_task_sends_a_coordinators_consecutive_runs_together_up_to_the_group_bound() -> None:
    def run(coordinator_id: int, batches: int) -> Run:
        return Run(coordinator_id, TOPIC, 0, tuple(batch(i, i, "wal/x") for i in range(batches)))

    runs = [run(1, 300), run(1, 300), run(1, 300), run(2, 100), run(1, 2000), run(1, 10)]
    shapes = [[(r.coordinator_id, len(r.batches)) for r in group] for group in replace_groups(runs, 1000)]
    # At most 1,000 batches a group, one coordinator each; a run past the bound goes alone, never split or dropped.
    assert shapes == [[(1, 300), (1, 300), (1, 300)], [(2, 100)], [(1, 2000)], [(1, 10)]]
    assert [len(group) for group in replace_groups(runs, 0)] == [1] * 6  # 0: one call at a time


def test_a_group_of_runs_is_paced_by_its_slowest_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark import consolidation_tasks

    def moved(group: list[Run], plan: RunPlan) -> list[RunResult]:
        return [run_result(MOVED, replace_ms=ms) for ms in (10.0, 30.0)[: len(group)]]

    monkeypatch.setattr(consolidation_tasks, "_move_group", moved)
    pauses: list[float] = []
    plan = RunPlan(StoreConfig("local", "/nowhere"), CoordinatorAccess(("127.0.0.1:1",)), {}, (), 0,
                   replace_duty_percent=50, replace_group_batches=10)  # fmt: skip
    runs = [Run(1, TOPIC, p, (batch(0, 0, "wal/a"), batch(1, 1, "wal/b"))) for p in range(2)]
    assert len(list(move_task(runs, plan, sleep=pauses.append))) == 2
    assert pauses == [pytest.approx(0.030)]  # one pause for the group, as long as its slowest call


def test_planning_pages_go_one_at_a_time_over_the_threads_each_followed_by_its_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from protos import coordinator_pb2 as pb
    from spark import consolidation_tasks
    from spark.consolidation_pacing import PlanningPacer

    now = [0.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    pages = iter([b"1", b"2", b""])

    def page(stub: object, asked: object, timeout_s: float, who: str) -> pb.GetFileMergeWorkItemResponse:
        now[0] += 0.010  # each page takes 10 ms
        answer = pb.GetFileMergeWorkItemResponse(next_page_token=next(pages))
        answer.files.add(object_key="wal/00/x.wal")
        return answer

    monkeypatch.setattr(consolidation_tasks, "_call_planning", page)
    access = CoordinatorAccess(("127.0.0.1:1",))
    request = PlanRequest(access, 0, 0, 100, duty_percent=40)
    pacer = PlanningPacer(40, sleep, lambda: now[0])
    items = list(consolidation_tasks._work_items(None, 0, "n", request, pacer))  # type: ignore[arg-type]
    assert len(items) == 3
    # 10 ms on the coordinator, then 15 ms away before the next page (40%); none after the last.
    assert pauses == [pytest.approx(0.015), pytest.approx(0.015)]
    assert now[0] == pytest.approx(0.060)
    pages, pauses[:] = iter([b"1", b""]), []
    unpaced = PlanningPacer(100, sleep, lambda: now[0])
    assert len(list(consolidation_tasks._work_items(None, 0, "n", request, unpaced))) == 2  # type: ignore[arg-type]
    assert pauses == []


def test_the_planning_threads_share_one_pacer_never_two_pages_at_once_and_at_most_the_duty() -> None:
    import threading
    import time

    from spark.consolidation_pacing import PlanningPacer

    pacer = PlanningPacer(50)
    in_flight, most, spans = [0], [0], []
    lock = threading.Lock()

    def page() -> None:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        started = time.monotonic()
        time.sleep(0.01)
        spans.append((started, time.monotonic()))
        with lock:
            in_flight[0] -= 1

    threads = [threading.Thread(target=lambda: [pacer.call(page) for _ in range(5)]) for _ in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    assert most[0] == 1  # one page in flight at a time
    busy = sum(end - start for start, end in spans)
    assert busy <= 0.5 * elapsed + 0.01  # the calls' share of the time: at most the duty (50%)


def test_the_driver_plans_every_coordinator_and_cuts_each_partitions_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark import consolidation_planning

    def answered(coordinators: list[tuple[int, str]], request: object, pacer: object) -> list[SourceBatch]:
        ((coordinator_id, _),) = coordinators
        topic = bytes([coordinator_id]) * 16
        # Two partitions, each a batch per file in three files, given file by file as GetFileMergeWorkItem does.
        return [SourceBatch(coordinator_id, topic, p, f * 4, f * 4 + 3, f"wal/{coordinator_id}-{f}.wal", p * 100, 100)
                for f in range(3) for p in (1, 0)]  # fmt: skip

    monkeypatch.setattr(consolidation_planning, "plan_task", answered)
    request = PlanRequest(CoordinatorAccess(("127.0.0.1:1",)), 0, 0, 100)
    plan = consolidation_planning.plan_runs([(2, "b:1"), (1, "a:1")], request, 250, 10)
    assert (plan.files, plan.batches) == (6, 12)
    # 250 bytes: two batches per run, the third alone moves nothing (one file): one run per partition.
    assert [(r.coordinator_id, r.partition, [b.base_offset for b in r.batches]) for r in plan.runs] == [
        (1, 0, [0, 4]), (1, 1, [0, 4]), (2, 0, [0, 4]), (2, 1, [0, 4])
    ]  # fmt: skip


def test_a_coordinators_runs_that_start_in_the_same_file_are_planned_side_by_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two brokers' files, oldest first: partitions 0 and 2 have a batch in each of broker a's, partition 1 in each
    of broker b's. Partition 2's run shares every source file with partition 0's: the two come together, then 1."""
    from spark import consolidation_planning

    def answered(coordinators: list[tuple[int, str]], request: object, pacer: object) -> list[SourceBatch]:
        ((coordinator_id, _),) = coordinators
        files = [("a", f, (0, 2)) if f % 2 == 0 else ("b", f, (1,)) for f in range(4)]  # a0, b1, a2, b3
        return [SourceBatch(coordinator_id, TOPIC, p, f // 2, f // 2, f"wal/{broker}-{f}.wal", p * 100, 100)
                for broker, f, partitions in files for p in partitions]  # fmt: skip

    monkeypatch.setattr(consolidation_planning, "plan_task", answered)
    request = PlanRequest(CoordinatorAccess(("127.0.0.1:1",)), 0, 0, 100)
    plan = consolidation_planning.plan_runs([(1, "a:1")], request, 1000, 10)
    assert [(r.partition, [b.object_key for b in r.batches]) for r in plan.runs] == [
        (0, ["wal/a-0.wal", "wal/a-2.wal"]), (2, ["wal/a-0.wal", "wal/a-2.wal"]), (1, ["wal/b-1.wal", "wal/b-3.wal"])
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("", 200),  # the job's default, well under the coordinators' 10,000
        ("diskless.consolidation.object.max.batches=40\n", 40),
        # Never past what a coordinator accepts in one call, whatever the job's own bound says.
        ("diskless.consolidation.object.max.batches=900\ndiskless.coordinator.replace.batch.max=300\n", 300),
    ],
)
def test_the_batches_one_object_carries_are_the_jobs_bound_capped_by_the_coordinators(
    tmp_path: Path, given: str, expected: int
) -> None:
    properties = tmp_path / "job.properties"
    properties.write_text(given)
    parser = argparse.ArgumentParser()
    add_consolidate_arguments(parser)
    options = options_from_arguments(parser.parse_args(["--config", str(properties)]))
    assert options.max_batches_per_run == expected
