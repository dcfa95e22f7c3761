"""The load: simulated brokers committing WAL files and consumers calling FindBatches, measured in windows.

Each broker commits one file at a time (as a diskless broker's committer
does), every `interval_s` (open loop: a late commit does not push the
schedule back, so a system that cannot keep up shows a rate below target),
or back to back when `interval_s` is 0 (the maximum rate). Consumers call
FindBatches back to back: three in four at the tail of their partitions, one
a fixed lag behind it (reading up to 64 batches per partition per call).
After a warm-up, figures are taken over `windows` windows of `window_s`
seconds each; the caller takes their medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from bench.systems import Counters, FindPosition, System, process_cpu_s
from bench.workload import BrokerWorkload, Shape

TAIL_PARTITION_BYTES = 1024 * 1024
LAG_PARTITION_BYTES = 64 * 1024  # a lagging consumer reads up to 64 batches of 1000 bytes per partition
LAGGING_EVERY = 4  # one consumer in four lags; the others read at the tail
LAG_RECORDS = 20_000  # how far behind the tail a lagging consumer reads
FETCH_MAX_BYTES = 1024 * 1024
STOP_TIMEOUT_S = 120  # for in-flight calls to finish after the last window


@dataclass(frozen=True, slots=True)
class LoadPlan:
    shape: Shape
    brokers: int
    interval_s: float  # per broker; 0: as fast as possible
    warmup_s: float
    window_s: float
    windows: int
    duplicate_share: float
    consumers: int = 0
    find_partitions: int = 10  # partitions per FindBatches call

    @property
    def target_commits_per_s(self) -> float:
        return self.brokers / self.interval_s if self.interval_s > 0 else 0.0


@dataclass(slots=True)
class WindowFigures:
    commits_per_s: float
    batches_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    cpu_s_per_batch: float
    fsyncs_per_commit: float
    bytes_written_per_batch: float
    find_calls_per_s: float
    find_p50_ms: float
    find_p99_ms: float
    find_p999_ms: float
    find_batches_per_call: float
    cpu_s_per_find_call: float  # the server's CPU over the FindBatches calls, the commits' work alongside included
    client_cpu_s_per_batch: float  # the harness process (brokers, consumers, gRPC client)


@dataclass(slots=True)
class LoadOutcome:
    windows: list[WindowFigures]
    commit_latencies_ms: list[float] = field(default_factory=list)
    find_latencies_ms: list[float] = field(default_factory=list)

    def median(self) -> dict[str, float]:
        names = WindowFigures.__dataclass_fields__
        return {name: statistics.median(getattr(w, name) for w in self.windows) for name in names}


Event = tuple[float, float, int]  # (finished at, latency seconds, batches)


NAN = float("nan")  # a percentile of nothing, where a report says so rather than 0


def percentile_ms(latencies_s: list[float], fraction: float, empty: float = 0.0) -> float:
    """The nearest-rank percentile of latencies in seconds, in milliseconds; `empty` when there are none."""
    if not latencies_s:
        return empty
    ordered = sorted(latencies_s)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


class _Load:
    def __init__(self, system: System, topic: int, plan: LoadPlan, seed: int, key_prefix: str) -> None:
        self.system = system
        self.topic = topic
        self.plan = plan
        self.seed = seed
        self.key_prefix = key_prefix
        self.stop = asyncio.Event()
        self.commits: list[Event] = []
        self.finds: list[Event] = []
        self.tail: dict[int, int] = {}
        self.started = time.perf_counter()

    async def broker(self, broker_id: int) -> None:
        plan = self.plan
        workload = BrokerWorkload(broker_id, plan.shape, plan.duplicate_share, self.seed, self.key_prefix)
        phase = random.Random(self.seed + broker_id).random() * plan.interval_s
        next_at = self.started + phase
        while not self.stop.is_set():
            if plan.interval_s > 0:
                delay = next_at - time.perf_counter()
                next_at += plan.interval_s
                if delay > 0:
                    try:
                        await asyncio.wait_for(self.stop.wait(), delay)
                        return
                    except TimeoutError:
                        pass
            spec = workload.next_commit()
            sent = time.perf_counter()
            await self.system.commit(self.topic, spec)
            done = time.perf_counter()
            self.commits.append((done, done - sent, len(spec.batches)))
            await asyncio.sleep(0)  # a synchronous system (raw-apsw) must still let the others run

    async def consumer(self, consumer_id: int) -> None:
        plan = self.plan
        lagging = consumer_id % LAGGING_EVERY == LAGGING_EVERY - 1
        partitions = [(consumer_id * plan.find_partitions + i) % plan.shape.partitions
                      for i in range(plan.find_partitions)]  # fmt: skip
        offsets = dict.fromkeys(partitions, 0)
        while not self.stop.is_set():
            if lagging:
                positions = [FindPosition(p, max(0, self.tail.get(p, 0) - LAG_RECORDS), LAG_PARTITION_BYTES)
                             for p in partitions]  # fmt: skip
            else:
                positions = [FindPosition(p, offsets[p], TAIL_PARTITION_BYTES) for p in partitions]
            sent = time.perf_counter()
            outcomes = await self.system.find(self.topic, positions, FETCH_MAX_BYTES)
            done = time.perf_counter()
            self.finds.append((done, done - sent, sum(o.batches for o in outcomes)))
            if not lagging:
                for outcome in outcomes:
                    offsets[outcome.partition] = outcome.next_offset
                    self.tail[outcome.partition] = max(self.tail.get(outcome.partition, 0), outcome.next_offset)
            await asyncio.sleep(0)

    def figures(
        self, begin: float, end: float, before: Counters, after: Counters, client_cpu_s: float
    ) -> WindowFigures:
        elapsed = end - begin
        commits = [e for e in self.commits if begin <= e[0] < end]
        finds = [e for e in self.finds if begin <= e[0] < end]
        batches = sum(e[2] for e in commits)
        commit_latencies = [e[1] for e in commits]
        find_latencies = [e[1] for e in finds]
        found = sum(e[2] for e in finds)
        work = batches + found  # with consumers, CPU is charged to batches committed and returned
        fsyncs = after.fsyncs - before.fsyncs if after.fsyncs >= 0 else -1
        return WindowFigures(
            commits_per_s=len(commits) / elapsed,
            batches_per_s=batches / elapsed,
            p50_ms=percentile_ms(commit_latencies, 0.5),
            p99_ms=percentile_ms(commit_latencies, 0.99),
            p999_ms=percentile_ms(commit_latencies, 0.999),
            cpu_s_per_batch=(after.cpu_s - before.cpu_s) / work if work else 0.0,
            fsyncs_per_commit=fsyncs / len(commits) if commits and fsyncs >= 0 else -1.0,
            bytes_written_per_batch=(after.write_bytes - before.write_bytes) / work if work else 0.0,
            find_calls_per_s=len(finds) / elapsed,
            find_p50_ms=percentile_ms(find_latencies, 0.5),
            find_p99_ms=percentile_ms(find_latencies, 0.99),
            find_p999_ms=percentile_ms(find_latencies, 0.999),
            find_batches_per_call=found / len(finds) if finds else 0.0,
            cpu_s_per_find_call=(after.cpu_s - before.cpu_s) / len(finds) if finds else 0.0,
            client_cpu_s_per_batch=client_cpu_s / work if work else 0.0,
        )


class RunningLoad:
    """Brokers (and consumers) of a plan running in the background, for a scenario that acts while they do."""

    def __init__(self, load: _Load, tasks: list[asyncio.Task[None]]) -> None:
        self._load = load
        self._tasks = tasks

    @property
    def commits(self) -> list[Event]:
        """(finished at, latency seconds, batches) of every commit so far (`time.perf_counter` clock)."""
        return self._load.commits

    @property
    def finds(self) -> list[Event]:
        return self._load.finds

    def figures(
        self, begin: float, end: float, before: Counters, after: Counters, client_cpu_s: float
    ) -> WindowFigures:
        return self._load.figures(begin, end, before, after, client_cpu_s)

    async def sleep(self, seconds: float) -> None:
        """Sleeps, but raises at once if a broker or consumer failed."""
        await _sleep_unless_failed(self._tasks, seconds)

    def check(self) -> None:
        """Raises the first failure of a broker or consumer, if any."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]


@contextlib.asynccontextmanager
async def running_load(
    system: System, topic: int, plan: LoadPlan, seed: int, key_prefix: str
) -> AsyncIterator[RunningLoad]:
    """Starts the plan's brokers and consumers; on exit stops them, waits for their calls, raises a failure."""
    load = _Load(system, topic, plan, seed, key_prefix)
    tasks = [asyncio.create_task(load.broker(b)) for b in range(plan.brokers)]
    tasks += [asyncio.create_task(load.consumer(c)) for c in range(plan.consumers)]
    running = RunningLoad(load, tasks)
    try:
        yield running
    finally:
        load.stop.set()
        _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        for task in pending:
            task.cancel()
    running.check()


async def run_load(system: System, topic: int, plan: LoadPlan, seed: int, key_prefix: str) -> LoadOutcome:
    """Runs brokers and consumers for warm-up plus the windows; figures per window."""
    outcome = LoadOutcome([])
    async with running_load(system, topic, plan, seed, key_prefix) as load:
        await load.sleep(plan.warmup_s)
        for _ in range(plan.windows):
            before = await system.counters()
            client_before = process_cpu_s(os.getpid())
            begin = time.perf_counter()
            await load.sleep(plan.window_s)
            end = time.perf_counter()
            client_cpu_s = process_cpu_s(os.getpid()) - client_before
            after = await system.counters()
            outcome.windows.append(load.figures(begin, end, before, after, client_cpu_s))
            outcome.commit_latencies_ms += [e[1] * 1000 for e in load.commits if begin <= e[0] < end]
            outcome.find_latencies_ms += [e[1] * 1000 for e in load.finds if begin <= e[0] < end]
    return outcome


async def _sleep_unless_failed(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    """Sleeps, but raises at once if a broker or consumer failed (a wrong answer ends the run)."""
    await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for task in tasks:
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
