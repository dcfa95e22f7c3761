"""The consolidation job's watchdog on a real local Spark (spark/consolidation_watchdog.py): an action whose
tasks never finish, or whose SparkContext is stopped from another thread, ends with an error in bounded time
instead of waiting. Slow: each test starts a Spark JVM of its own (one of them stops it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark.consolidation import open_consolidation_session
from spark.consolidation_watchdog import JobStalled, run_watched, spark_progress, spark_thread

QUICK_SPARK_SETTINGS = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.ui.enabled": "false",
}
GROUP = "diskless-consolidate-watchdog-test"


@pytest.fixture
def spark() -> Iterator[SparkSession]:
    session = open_consolidation_session("local[2]", QUICK_SPARK_SETTINGS, nice=0)
    yield session
    session.stop()


def _sleep_then(seconds: float, values: Iterator[int]) -> Iterator[int]:
    time.sleep(seconds)
    yield sum(values)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_action_whose_tasks_never_finish_ends_with_job_stalled_after_the_timeout(spark: SparkSession) -> None:
    context = spark.sparkContext
    assert context.parallelize(range(4), 2).sum() == 6  # warm: the first job's start-up is not a stall
    context.setJobGroup(GROUP, "watchdog test")
    rdd = context.parallelize(range(4), 2).mapPartitions(lambda values: _sleep_then(600, values))
    started = time.monotonic()
    with pytest.raises(JobStalled, match=r"no task finished for \d+ s \(0 of 2 tasks done\)"):
        run_watched(rdd.collect, lambda: spark_progress(context, GROUP), 5, cancel=context.cancelAllJobs,
                    start_thread=spark_thread, poll_s=0.5)  # fmt: skip
    assert 5 <= time.monotonic() - started < 60
    # The cancel reached the scheduler: the context serves the next job.
    assert context.parallelize(range(4), 2).sum() == 6


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_action_whose_spark_context_is_stopped_from_another_thread_ends_with_an_error(spark: SparkSession) -> None:
    context = spark.sparkContext
    context.setJobGroup(GROUP, "watchdog test")
    rdd = context.parallelize(range(4), 2).mapPartitions(lambda values: _sleep_then(600, values))
    stopper = threading.Timer(5, context.stop)
    stopper.start()
    started = time.monotonic()
    with pytest.raises(Exception) as raised:  # the stop ends it either way; which way is Spark's
        run_watched(rdd.collect, lambda: spark_progress(context, GROUP), 3600, cancel=context.cancelAllJobs,
                    start_thread=spark_thread, poll_s=0.5)  # fmt: skip
    stopper.join()
    assert time.monotonic() - started < 120, "the job waited for its stopped context"
    # Spark's own error when the stop reached the action's thread first, else the watchdog's.
    assert not isinstance(raised.value, JobStalled) or "stopped" in str(raised.value)
