"""A soak with time compressed: brokers commit on a fixed schedule while retention, or a tiered-storage copier and
remote retention, remove their batches (DESIGN §4a, issue #28).

    python -m bench.retention_soak [--variants retention,tiered,control] [--retention-ms 20000] [--periods 20]
                                   [--baseline-seconds 15] [--rate 250] [--brokers 4] [--commit-batches 10]
                                   [--partitions 8] [--coordinators 2] [--local-retention-ms R/2]
                                   [--copy-interval-ms L/20] [--output DIR] [--set NAME=VALUE ...]

Time is compressed by the settings, not by a clock: `retention.ms` is seconds instead of days and the check
intervals fractions of it. The node runs for real: `diskless serve` on 127.0.0.1 in a temporary directory, SQLite
and the metadata log on disk, everything over gRPC, its own clock the wall clock.

The levels must not depend on the machine's speed: what retention keeps is the batches committed in the last
`retention.ms`, so the commit rate has to be steady over that window. The brokers therefore commit on a fixed
schedule (open loop): --brokers brokers share --rate batches/s, each commit of --commit-batches batches due at t0 +
i x interval (brokers staggered), and a broker that fell behind (a slow answer) sends its next commit at once rather
than skipping it. A batch's CreateTime is its commit's due time, not its send time, so retention sees the same
timestamps whatever the machine's speed; how late the brokers ran is measured and reported (it is what would break
the levels), and commit latencies count from the due time (wrk2's correction for coordinated omission, as in
bench/driver.py), so a commit held up behind a slow one shows its wait. Each commit's WAL object is written to the
local object store first (as a broker uploads), so the file workers' deletions are counted from the object-store
directory itself.

Each variant has its node and brokers in a process of its own; they run side by side from one start line, so they
share whatever load the machine has. Each runs --baseline-seconds with `retention.ms=-1`, then AlterTopicConfigs
sets --retention-ms and it goes on for --periods periods:
- retention: the coordinators' retention removes batches older than retention.ms.
- tiered: the topic has `remote.storage.enable=true` from its creation (so retention never removes a local batch,
  DESIGN §4a); at the switch a simulated copier (bench/tiered_copier.py) starts offloading every partition's batches
  older than --local-retention-ms with CommitRemoteLogSegments every --copy-interval-ms, and expires its remote
  segments by retention.ms with DeleteRecords.
- control: retention.ms stays -1, nothing is removed: its commits over another variant's window are "the same run
  without" retention or offload, under the same machine load (the baseline phase of a variant is too, but at
  another time, and a shared machine's load moves more than the effect measured).
Every half second it samples live batches, state_bytes, log_bytes, snapshot_bytes (DescribeCoordinators, summed
over coordinators), the node's RSS, the WAL files the coordinators still know, the objects in the object store and
the commit rate. For the second half of the retention phase (after warm-up) it prints each series' spread around
its median (the issue: within ±10%), and commit p50/p99 of that steady phase against the control over the same
window and against its own baseline phase (the issue: p99 at most 1.5x). With --output it writes
samples-<variant>.csv, summary.json and soak.png (bench/retention_soak_report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import os
import platform
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.node_process import (
    START_TIMEOUT_S,
    start_node,
    status_kib,
    stop_node,
    wait_serving,
)
from bench.retention_soak_report import SAMPLE_INTERVAL_S, Run, write_report
from bench.tiered_copier import TieredCopier
from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

VARIANTS = ("retention", "tiered", "control")
BATCH_BYTES = 100
REMOTE_SEGMENT_BATCH_MAX = 1000
RETRY_BACKOFF_S = 0.1  # the node's diskless.coordinator.remote.segment.batch.max default


@dataclass(frozen=True, slots=True)
class Schedule:
    """The brokers' common time origin: monotonic for waiting, wall clock (ms) for the batches' CreateTime."""

    t0: float
    wall0_ms: int
    interval_s: float  # between two commits of one broker

    def due(self, broker: int, index: int, brokers: int) -> float:
        return self.t0 + (index + broker / brokers) * self.interval_s

    def timestamp_ms(self, due: float) -> int:
        return self.wall0_ms + round((due - self.t0) * 1000)


@dataclass(frozen=True, slots=True)
class StartLine:
    """Where the variants' processes say they are ready (a file each), and how many there are."""

    directory: str
    count: int


async def _start_together(start: StartLine, variant: str) -> None:
    """Waits until every variant's node serves, then until the same wall-clock instant (a second after the last)."""
    Path(start.directory, variant).write_text(str(time.time()))
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        ready = [float(path.read_text() or "inf") for path in Path(start.directory).iterdir()]
        if len(ready) == start.count:
            await asyncio.sleep(max(0.0, max(ready) + 1.0 - time.time()))
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{variant}: the other variants' nodes did not start")
        await asyncio.sleep(0.05)


def _batch(topic_id: bytes, partition: int, position: int, timestamp_ms: int) -> pb.CommitFileRequest.Batch:
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=topic_id, partition=partition, byte_offset=position * BATCH_BYTES, size=BATCH_BYTES,
        base_offset=0, last_offset=9, batch_max_timestamp=timestamp_ms, timestamp_type=pb.CREATE_TIME,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip


@dataclass(slots=True)
class Soak:
    """One variant's run against one node."""

    args: argparse.Namespace
    variant: str
    stub: pb_grpc.DisklessCoordinatorAsyncStub
    topic_id: bytes
    owners: list[int]
    objects: Path  # the object store's root
    pid: int
    run: Run
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def broker(self, broker: int, schedule: Schedule) -> None:
        args, index = self.args, 0
        while True:
            due = schedule.due(broker, index, args.brokers)
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())  # the bench's own schedule, not the node's clock
            if self.stop.is_set():
                return
            timestamp = schedule.timestamp_ms(due)
            first = broker + index * args.commit_batches
            batches = [
                _batch(self.topic_id, (first + i) % args.partitions, i, timestamp) for i in range(args.commit_batches)
            ]
            key = f"wal/{uuid.uuid4().hex}"
            (self.objects / key).write_bytes(bytes(BATCH_BYTES * len(batches)))  # the broker's upload
            request = pb.CommitFileRequest(
                object_key=key, object_format=1, file_size=BATCH_BYTES * len(batches), uploader_broker_id=1,
                owner_ids=self.owners, batches=batches,
            )  # fmt: skip
            sent = time.monotonic()
            while True:  # a broker retries a refused commit (the same file); its latency counts from the first try
                answer = await self.stub.CommitFile(request, timeout=60)
                refused = [b for b in answer.batches if b.error_code != pb.NONE]
                if not refused:
                    break
                self.run.errors[f"{pb.ErrorCode.Name(refused[0].error_code)}: {refused[0].error_message}"] += 1
                await asyncio.sleep(RETRY_BACKOFF_S)
            answered = time.monotonic()
            self.run.commits.append((sent, answered, sent - due))
            index += 1

    async def sample(self, copier: TieredCopier | None) -> dict[str, float]:
        described = (await self.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=10)).coordinators
        now = time.monotonic()
        window = SAMPLE_INTERVAL_S * 4
        recent = [c for c in self.run.commits[-10_000:] if c[1] >= now - window]
        return {
            "t": now - self.run.started,
            # Batches committed per second over the last two seconds: what retention keeps is this rate x retention.ms.
            "batches_per_s": len(recent) * self.args.commit_batches / window,
            "late_ms": max((late for _, _, late in recent), default=0.0) * 1000,
            "live_batches": sum(c.live_batch_count for c in described),
            "state_bytes": sum(c.state_bytes for c in described),
            "log_bytes": sum(c.log_bytes for c in described),
            "snapshot_bytes": sum(c.snapshot_bytes for c in described),
            "rss_bytes": status_kib(self.pid, "VmRSS") * 1024,
            "known_files": sum(
                c.live_file_count + c.files_awaiting_handover + c.files_awaiting_deletion for c in described
            ),
            "object_files": sum(1 for _ in os.scandir(self.objects / "wal")),
            "remote_batches": copier.remote_batches if copier is not None else 0,
            "load_1m": os.getloadavg()[0],
        }

    async def set_retention(self) -> None:
        change = pb.AlterTopicConfigsRequest.Topic(
            topic_id=self.topic_id, set=[pb.TopicConfig(name="retention.ms", value=str(self.args.retention_ms))]
        )
        answer = await self.stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(topics=[change]), timeout=30)
        assert answer.topics[0].error_code == pb.NONE, answer


async def _create_topic(stub: pb_grpc.DisklessCoordinatorAsyncStub, args: argparse.Namespace, tiered: bool) -> bytes:
    topic_id = uuid.uuid4().bytes
    configs = [pb.TopicConfig(name="remote.storage.enable", value="true")] if tiered else []
    topic = pb.CreatePartitionsRequest.Topic(
        topic_id=topic_id, name="soak", num_partitions=args.partitions, configs=configs
    )
    created = await stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[topic]))
    assert created.topics[0].error_code == pb.NONE, created
    return topic_id


async def _run(args: argparse.Namespace, variant: str, address: str, pid: int, objects: Path, start: StartLine) -> Run:
    run = Run(variant, commit_batches=args.commit_batches)
    async with grpc.aio.insecure_channel(address) as channel, RoutingClient(address) as client:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        await wait_serving(stub)
        topic_id = await _create_topic(stub, args, variant == "tiered")
        found = await stub.FindCoordinator(pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(args.partitions))]
        ))  # fmt: skip
        owners = sorted({p.coordinator_id for p in found.topics[0].partitions})
        soak = Soak(args, variant, stub, topic_id, owners, objects, pid, run)
        copier = None
        if variant == "tiered":
            copier = TieredCopier(
                client, topic_id, args.partitions, args.local_retention_ms, args.retention_ms,
                args.copy_interval_ms / 1000, REMOTE_SEGMENT_BATCH_MAX // args.partitions,
            )  # fmt: skip
        await _start_together(start, variant)
        run.started = time.monotonic()
        schedule = Schedule(run.started, time.time_ns() // 1_000_000, args.brokers * args.commit_batches / args.rate)
        tasks = [asyncio.create_task(soak.broker(b, schedule)) for b in range(args.brokers)]
        run.retention_from = run.started + args.baseline_seconds
        run.end = run.retention_from + args.periods * args.retention_ms / 1000
        switched = False
        try:
            while time.monotonic() < run.end:
                if not switched and time.monotonic() >= run.retention_from and variant != "control":
                    await soak.set_retention()
                    if copier is not None:
                        tasks.append(asyncio.create_task(copier.run(soak.stop)))
                    run.retention_from, switched = time.monotonic(), True
                    run.end = run.retention_from + args.periods * args.retention_ms / 1000
                    print(f"{variant}: retention.ms={args.retention_ms} set at {run.retention_from - run.started:.1f} s"
                          f"{', copier started' if copier else ''}", flush=True)  # fmt: skip
                run.samples.append(await soak.sample(copier))
                await asyncio.sleep(SAMPLE_INTERVAL_S)
        finally:
            soak.stop.set()
            await asyncio.gather(*tasks)
        if copier is not None:
            run.copier = copier.stats
    return run


def _settings(args: argparse.Namespace, objects: Path) -> dict[str, str]:
    settings = {
        "diskless.metrics.listen": "127.0.0.1:0",
        "diskless.storage.local.root": str(objects),
        # A check every 1/30 of retention.ms: live batches swing by that much between two passes.
        "diskless.coordinator.retention.check.interval.ms": str(max(100, args.retention_ms // 30)),
        "diskless.coordinator.file.worker.interval.ms": "250",
        "diskless.coordinator.file.deletion.grace.period.ms": "0",
        # Small segments and frequent snapshots, so that the metadata log is trimmed within the run. The log kept
        # spans from the oldest retained snapshot: between (count - 1) and count snapshot intervals, a sawtooth of
        # one interval; 8 of them keep it within about ±7% (the default 2 would swing between 1x and 2x).
        "diskless.coordinator.log.segment.bytes": str(64 * 1024),
        "diskless.coordinator.snapshot.interval.bytes": str(128 * 1024),
        "diskless.coordinator.snapshot.retained.count": "8",
    }
    for setting in args.set:
        name, _, value = setting.partition("=")
        settings[name] = value
    return settings


def _run_variant(args: argparse.Namespace, variant: str, start: StartLine) -> Run:
    with tempfile.TemporaryDirectory(prefix="retention-soak-") as directory:
        objects = Path(directory) / "objects"
        (objects / "wal").mkdir(parents=True)
        settings = _settings(args, objects)
        print(f"{variant}: node settings {settings}", flush=True)
        process, address, log_path = start_node(Path(directory), args.coordinators, settings)
        try:
            import uvloop

            return uvloop.run(_run(args, variant, address, process.pid, objects, start))
        finally:
            stop_node(process)
            if args.output is not None:  # the node's log outlives its directory
                args.output.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(log_path, args.output / f"node-{variant}.log")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"a comma-separated list of {', '.join(VARIANTS)}"
    )
    parser.add_argument("--retention-ms", type=int, default=20000)
    parser.add_argument("--periods", type=int, default=20, help="retention periods the retention phase lasts")
    parser.add_argument("--baseline-seconds", type=float, default=15)
    parser.add_argument("--rate", type=float, default=250, help="batches per second, all brokers together")
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--commit-batches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--coordinators", type=int, default=2)
    parser.add_argument("--local-retention-ms", type=int, default=None, help="tiered: default retention-ms / 2")
    parser.add_argument("--copy-interval-ms", type=int, default=None, help="tiered: default local-retention-ms / 20")
    parser.add_argument("--output", type=Path, default=None, help="a directory for the samples, summary and plot")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a node setting")
    args = parser.parse_args(argv)
    if args.periods * args.retention_ms > 3_600_000 or args.brokers > 100 or args.baseline_seconds > 600:
        parser.error("bounded by design: at most an hour of retention phase, 100 brokers, 600 s of baseline")
    if not 0 < args.rate <= 100_000 or args.commit_batches < 1 or args.partitions < 1 or args.retention_ms < 1:
        parser.error("--rate must be in (0, 100000], --commit-batches, --partitions and --retention-ms >= 1")
    if any("=" not in setting for setting in args.set):
        parser.error("--set takes NAME=VALUE")
    args.local_retention_ms = args.local_retention_ms or max(1, args.retention_ms // 2)
    args.copy_interval_ms = args.copy_interval_ms or max(50, args.local_retention_ms // 20)
    variants = [name.strip() for name in args.variants.split(",") if name.strip()]
    if not variants or any(name not in VARIANTS for name in variants) or len(set(variants)) < len(variants):
        parser.error(f"--variants: a comma-separated list of {', '.join(VARIANTS)}, each at most once")
    print(
        f"retention soak ({', '.join(variants)}): {args.brokers} brokers commit {args.commit_batches}-batch files "
        f"at {args.rate:.0f} batches/s to {args.partitions} partitions on {args.coordinators} coordinators; "
        f"{args.baseline_seconds} s baseline, then retention.ms={args.retention_ms} for {args.periods} periods "
        f"(tiered: local retention {args.local_retention_ms} ms, a copy every {args.copy_interval_ms} ms); on "
        f"{platform.node()} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.2f})",
        flush=True,
    )
    # Side by side, each with its node and brokers in a process of its own, from one start: they share whatever
    # load the machine has at the time, so the control's latencies are the "same run without" for the others.
    context = multiprocessing.get_context("spawn")
    with (
        tempfile.TemporaryDirectory(prefix="retention-soak-start-") as directory,
        concurrent.futures.ProcessPoolExecutor(len(variants), mp_context=context) as pool,
    ):
        start = StartLine(directory, len(variants))
        runs = list(pool.map(_run_variant, [args] * len(variants), variants, [start] * len(variants)))
    write_report(args, runs, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
