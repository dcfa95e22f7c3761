"""The consolidation plan shipped as data in bounded tasks (spark/consolidation_shipping.py), and the watchdog
that ends an action whose Spark scheduler stopped or stalled (spark/consolidation_watchdog.py)."""

from __future__ import annotations

import random
import threading
import time

import pytest

from spark.consolidation_rules import Run, SourceBatch
from spark.consolidation_shipping import decode_run, encode_run, pack_runs, unpack_runs
from spark.consolidation_watchdog import JobStalled, Progress, StallClock, run_watched


def a_run(rng: random.Random, coordinator_id: int, partition: int, batches: int) -> Run:
    topic = rng.randbytes(16)
    offset, listed = rng.randrange(1000), []
    for i in range(batches):
        count = rng.randint(1, 50)
        key = f"wal/{rng.randrange(40):08d}-{i % 7}"
        listed.append(SourceBatch(coordinator_id, topic, partition, offset, offset + count - 1, key,
                                  rng.randrange(1 << 20), rng.randint(70, 5000)))  # fmt: skip
        offset += count
    return Run(coordinator_id, topic, partition, tuple(listed))


def plan(count: int, seed: int = 7) -> list[Run]:
    rng = random.Random(seed)
    return [a_run(rng, i % 8, i, rng.randint(1, 400)) for i in range(count)]


def test_a_run_encodes_and_decodes_to_the_same_run() -> None:
    for run in plan(20):
        assert decode_run(encode_run(run)) == run


def test_a_plan_larger_than_one_tasks_bound_is_split_and_every_run_arrives_once_in_order() -> None:
    runs = plan(100)
    by_runs = pack_runs(runs, max_runs=8, max_bytes=1 << 30)
    assert len(by_runs) == 13 and all(len(p.runs) <= 8 for p in by_runs)
    assert [r for p in by_runs for r in unpack_runs(p)] == runs

    bound = 20_000
    by_bytes = pack_runs(runs, max_runs=1000, max_bytes=bound)
    assert len(by_bytes) > 1
    assert all(p.size <= bound or len(p.runs) == 1 for p in by_bytes)  # a run alone may exceed it: never split
    assert [r for p in by_bytes for r in unpack_runs(p)] == runs


def test_a_single_run_over_the_byte_bound_goes_alone_in_its_task() -> None:
    runs = plan(10)
    largest = max(range(10), key=lambda i: len(runs[i].batches))
    payloads = pack_runs(runs, max_runs=100, max_bytes=50)
    assert len(payloads) == 10 and [len(p.runs) for p in payloads] == [1] * 10
    assert list(unpack_runs(payloads[largest])) == [runs[largest]]


def test_a_small_plan_spreads_over_at_least_the_tasks_asked_within_the_bounds() -> None:
    runs = plan(10)
    assert len(pack_runs(runs, max_runs=8, max_bytes=1 << 30, min_tasks=4)) == 4
    assert len(pack_runs(runs, max_runs=2, max_bytes=1 << 30, min_tasks=1)) == 5
    assert pack_runs([], max_runs=8, max_bytes=1 << 30) == []


def test_the_payload_is_much_smaller_than_the_pickled_runs() -> None:
    import pickle

    runs = plan(50)
    packed = sum(p.size for p in pack_runs(runs, 8, 1 << 30))
    assert packed * 3 < len(pickle.dumps(runs))


def test_the_stall_clock_gives_up_only_after_the_timeout_without_a_finished_task() -> None:
    clock = StallClock(60, now=0)
    assert clock.verdict(Progress(False, 0, 10), 59) is None
    assert clock.verdict(Progress(False, 1, 10), 100) is None  # a task finished: the clock starts again
    assert clock.verdict(Progress(False, 1, 10), 159) is None
    reason = clock.verdict(Progress(False, 1, 10), 160)
    assert reason is not None and "no task finished for 60 s" in reason and "1 of 10" in reason
    stopped = StallClock(60, now=0).verdict(Progress(True, 3, 10), 1)
    assert stopped is not None and "stopped" in stopped


def test_an_action_that_never_finishes_ends_with_job_stalled_and_is_cancelled() -> None:
    release = threading.Event()
    cancelled: list[bool] = []
    started = time.monotonic()
    with pytest.raises(JobStalled, match="no task finished"):
        run_watched(
            lambda: release.wait(30),
            lambda: Progress(False, 3, 8),
            timeout_s=0.3,
            cancel=lambda: cancelled.append(True),
            poll_s=0.05,
        )
    release.set()
    assert cancelled == [True] and time.monotonic() - started < 5


def test_a_stopped_context_ends_the_action_at_once_even_if_cancel_fails() -> None:
    release = threading.Event()

    def cancel() -> None:
        raise RuntimeError("the scheduler is gone")

    with pytest.raises(JobStalled, match="stopped"):
        run_watched(lambda: release.wait(30), lambda: Progress(True, 0, 8), 3600, cancel=cancel, poll_s=0.05)
    release.set()


def test_a_watched_action_returns_its_value_or_raises_its_own_error() -> None:
    progress = iter(range(1000))
    assert run_watched(lambda: (time.sleep(0.2), 42)[1], lambda: Progress(False, next(progress), 9), 0.1,
                       poll_s=0.02) == 42  # fmt: skip

    def failing() -> int:
        raise ValueError("task lost")

    with pytest.raises(ValueError, match="task lost"):
        run_watched(failing, lambda: Progress(False, 0, 1), 60, poll_s=0.02)


def test_polls_that_keep_failing_end_the_action_after_the_timeout() -> None:
    release = threading.Event()

    def sample() -> Progress:
        raise ConnectionError("the gateway is gone")

    with pytest.raises(JobStalled, match="no task finished"):
        run_watched(lambda: release.wait(30), sample, 0.3, poll_s=0.05)
    release.set()
