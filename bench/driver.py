"""The load: simulated brokers committing WAL files and consumers calling FindBatches, measured in windows.

Each broker commits one file at a time (as a diskless broker's committer
does), every `interval_s` (open loop: a late commit does not push the
schedule back, so a system that cannot keep up shows a rate below target),
or back to back when `interval_s` is 0 (the maximum rate, closed loop).

Open-loop latency is measured from the intended send time, as wrk2 does: the
n-th commit of a broker is meant to go out at `first + n * interval_s`; a
broker still waiting for its previous commit sends late, and the wait behind
the schedule counts in that commit's latency (else a stall hides every commit
queued behind it: coordinated omission). Each commit's send lag (how far
behind its schedule it went out) is kept too, and the latency from the send
alone, so a report can show both. A broker keeps one commit in flight
(`COMMITS_IN_FLIGHT_PER_BROKER`) and accumulates lateness rather than
pipelining: a diskless broker commits its WAL files one after another, in
order, and its producers' sequences must reach the coordinator in that order.
In the closed loop the intended time is the send, so both measures agree.

Consumers call
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
from typing import NamedTuple, Protocol

from bench.systems import Counters, FindPosition, System, process_cpu_s
from bench.workload import BrokerWorkload, Shape

TAIL_PARTITION_BYTES = 1024 * 1024
LAG_PARTITION_BYTES = 64 * 1024  # a lagging consumer reads up to 64 batches of 1000 bytes per partition
LAGGING_EVERY = 4  # one consumer in four lags; the others read at the tail
LAG_RECORDS = 20_000  # how far behind the tail a lagging consumer reads
FETCH_MAX_BYTES = 1024 * 1024
STOP_TIMEOUT_S = 120  # for in-flight calls to finish after the last window
# Commits a simulated broker has under way at once: a diskless broker commits its files in order, one at a time.
# A broker behind its schedule does not pipeline to catch up; its lateness is counted in the latency instead.
COMMITS_IN_FLIGHT_PER_BROKER = 1


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
    p50_ms: float  # commit latency from the intended send time (open loop), from the send (closed loop)
    p99_ms: float
    p999_ms: float
    p50_from_send_ms: float  # the same commits timed from their actual send: what coordinated omission reports
    p99_from_send_ms: float
    send_lag_p99_ms: float  # how far behind their schedule the brokers sent (0 in the closed loop)
    send_lag_max_ms: float
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


class Event(NamedTuple):
    """One call: when it finished, its latency, the batches it carried, and how late it went out."""

    finished_at: float
    latency_s: float  # from the intended send time (open loop) or from the send (closed loop)
    batches: int
    send_lag_s: float = 0.0  # the send's delay behind the schedule; latency_s - send_lag_s is the time from the send

    @property
    def from_send_s(self) -> float:
        return self.latency_s - self.send_lag_s


def intended_send_at(first_at: float, interval_s: float, index: int, now: float) -> float:
    """When a broker's `index`-th commit is meant to go out: on the fixed schedule, or now in the closed loop.

    A product rather than a running sum, so that the schedule does not drift over a long run.
    """
    return first_at + index * interval_s if interval_s > 0 else now


def timed(intended_at: float, sent_at: float, finished_at: float, batches: int) -> Event:
    """A call's event, its latency measured from the intended send time (wrk2's correction).

    A timer that fires a hair early sends before the intended time: that call is timed from its send.
    """
    return Event(finished_at, finished_at - min(intended_at, sent_at), batches, max(0.0, sent_at - intended_at))


class Clock(Protocol):
    """The load's time: the real one, or a test's that moves only when told to."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float, stop: asyncio.Event) -> None:
        """Waits `seconds`, or less if `stop` is set."""


class RealClock:
    def now(self) -> float:
        return time.perf_counter()

    async def sleep(self, seconds: float, stop: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)


REAL_CLOCK = RealClock()


NAN = float("nan")  # a percentile of nothing, where a report says so rather than 0


def percentile_ms(latencies_s: list[float], fraction: float, empty: float = 0.0) -> float:
    """The nearest-rank percentile of latencies in seconds, in milliseconds; `empty` when there are none."""
    if not latencies_s:
        return empty
    ordered = sorted(latencies_s)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


class _Load:
    def __init__(
        self, system: System, topic: int, plan: LoadPlan, seed: int, key_prefix: str, clock: Clock = REAL_CLOCK
    ) -> None:
        self.system = system
        self.clock = clock
        self.topic = topic
        self.plan = plan
        self.seed = seed
        self.key_prefix = key_prefix
        self.stop = asyncio.Event()
        self.commits: list[Event] = []
        self.finds: list[Event] = []
        self.tail: dict[int, int] = {}
        self.started = clock.now()

    async def broker(self, broker_id: int) -> None:
        plan, clock = self.plan, self.clock
        workload = BrokerWorkload(broker_id, plan.shape, plan.duplicate_share, self.seed, self.key_prefix)
        first_at = self.started + random.Random(self.seed + broker_id).random() * plan.interval_s
        index = 0
        while not self.stop.is_set():
            # One commit in flight (COMMITS_IN_FLIGHT_PER_BROKER): the next waits for this one, however late.
            spec = workload.next_commit()  # built before its due time, as a broker uploads a file before its commit
            sent = clock.now()
            intended = intended_send_at(first_at, plan.interval_s, index, sent)  # closed loop: the send itself
            index += 1
            if intended > sent:
                await clock.sleep(intended - sent, self.stop)
                if self.stop.is_set():
                    return
                sent = clock.now()
            await self.system.commit(self.topic, spec)
            self.commits.append(timed(intended, sent, clock.now(), len(spec.batches)))
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
            # Back to back (closed loop): the latency from the send is the right one.
            sent = self.clock.now()
            outcomes = await self.system.find(self.topic, positions, FETCH_MAX_BYTES)
            self.finds.append(timed(sent, sent, self.clock.now(), sum(o.batches for o in outcomes)))
            if not lagging:
                for outcome in outcomes:
                    offsets[outcome.partition] = outcome.next_offset
                    self.tail[outcome.partition] = max(self.tail.get(outcome.partition, 0), outcome.next_offset)
            await asyncio.sleep(0)

    def figures(
        self, begin: float, end: float, before: Counters, after: Counters, client_cpu_s: float
    ) -> WindowFigures:
        elapsed = end - begin
        commits = [e for e in self.commits if begin <= e.finished_at < end]
        finds = [e for e in self.finds if begin <= e.finished_at < end]
        batches = sum(e.batches for e in commits)
        commit_latencies = [e.latency_s for e in commits]
        from_send = [e.from_send_s for e in commits]
        send_lags = [e.send_lag_s for e in commits]
        find_latencies = [e.latency_s for e in finds]
        found = sum(e.batches for e in finds)
        work = batches + found  # with consumers, CPU is charged to batches committed and returned
        fsyncs = after.fsyncs - before.fsyncs if after.fsyncs >= 0 else -1
        return WindowFigures(
            commits_per_s=len(commits) / elapsed,
            batches_per_s=batches / elapsed,
            p50_ms=percentile_ms(commit_latencies, 0.5),
            p99_ms=percentile_ms(commit_latencies, 0.99),
            p999_ms=percentile_ms(commit_latencies, 0.999),
            p50_from_send_ms=percentile_ms(from_send, 0.5),
            p99_from_send_ms=percentile_ms(from_send, 0.99),
            send_lag_p99_ms=percentile_ms(send_lags, 0.99),
            send_lag_max_ms=percentile_ms(send_lags, 1.0),
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
        """Every commit so far (`time.perf_counter` clock), its latency from the intended send time."""
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
    system: System, topic: int, plan: LoadPlan, seed: int, key_prefix: str, clock: Clock = REAL_CLOCK
) -> AsyncIterator[RunningLoad]:
    """Starts the plan's brokers and consumers; on exit stops them, waits for their calls, raises a failure."""
    load = _Load(system, topic, plan, seed, key_prefix, clock)
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
            outcome.commit_latencies_ms += [e.latency_s * 1000 for e in load.commits if begin <= e.finished_at < end]
            outcome.find_latencies_ms += [e.latency_s * 1000 for e in load.finds if begin <= e.finished_at < end]
    return outcome


async def _sleep_unless_failed(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    """Sleeps, but raises at once if a broker or consumer failed (a wrong answer ends the run)."""
    await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for task in tasks:
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
