"""Read overload: thousands of FindBatches of large answers at once, against a node and its readers, or a cluster.

    python -m bench.read_overload [--cluster] [--calls 10000] [--clients 100] [--partitions 10]
                                  [--batches 1000] [--seconds 30] [--timeout 30] [--rss-limit-mib 4096]
                                  [--server-tree DIR] [--set NAME=VALUE ...]

Starts `diskless serve` (one node with its reader processes, or with --cluster three nodes on a local etcd, as
bench/replicated.py) in a temporary directory, fills one topic of --partitions partitions with --batches batches
each, then keeps --calls FindBatches under way for --seconds over --clients connections, spread over every
address that serves FindBatches (the node and its readers; each node of the cluster, where followers answer
too). Each asks for every partition from offset 0 with 1 MiB per partition and fetch_max_bytes at its maximum,
so each answer is as large as the node makes one (find.batches.max.results batches). A refused call is retried
after a jittered backoff (100 ms doubling to 1 s), as bench/overload.py does for commits.

It prints: calls answered OK / RESOURCE_EXHAUSTED / other codes and their latencies, the answers' bytes, the
peak RSS of every process (the highest /proc VmRSS sampled every 0.25 s, and VmHWM), whether every process
is still alive at the end, and the nodes' own counts of refusals. Bounded: new calls stop after --seconds;
if the processes' RSS together passes --rss-limit-mib the servers are killed (the run then says so), so a
node that does not bound its answers cannot take the machine down. --server-tree runs the nodes from another
source tree (an older commit's worktree), the bench from this one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import re
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.arguments import node_settings
from bench.coordinator_system import CoordinatorServer
from bench.driver import NAN, percentile_ms
from bench.node_process import (
    METRICS_LINE,
    status_kib,
)
from bench.replicated import ReplicatedCluster
from bench.systems import process_tree
from coordinator.base.backoff import Backoff
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

FIND_METHOD = "/diskless.coordinator.v1.DisklessCoordinator/FindBatches"
BATCH_BYTES = 1000  # the size each batch claims in its file
PARTITION_FETCH_BYTES = 1024 * 1024 + 1  # more than the partition's batches claim: the answer is the node's max
SAMPLE_INTERVAL_S = 0.25
PROGRESS_INTERVAL_S = 5.0
READY_TIMEOUT_S = 120
MESSAGE_MAX_BYTES = 64 * 1024 * 1024
COUNTED = ("diskless_shed_calls_total", "diskless_server_response_bytes_in_progress_peak",
           "diskless_server_calls_in_progress_peak", "diskless_reader_calls_total",
           "diskless_reader_restarts")  # fmt: skip


@dataclass
class Tally:
    codes: Counter[str] = field(default_factory=Counter)
    ok_bytes: int = 0
    latencies_s: dict[str, list[float]] = field(default_factory=dict)
    details: Counter[tuple[str, str]] = field(default_factory=Counter)


@dataclass
class Watched:
    """A process whose RSS is sampled: a node or one of its children (readers), by name."""

    name: str
    pid: int
    peak_rss_kib: int = 0
    hwm_kib: int = 0


async def _ready(address: str) -> None:
    """Every coordinator has a leader that answers (a cluster: once elections are over)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        while time.monotonic() < deadline:
            with contextlib.suppress(grpc.aio.AioRpcError):
                described = await stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=2)
                if described.coordinators and all(
                    c.error_code == pb.NONE and c.leader.port for c in described.coordinators
                ):
                    return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{address}: not every coordinator has a leader")


async def _readers(address: str) -> list[str]:
    """Every reader process's address the cluster advertises."""
    async with grpc.aio.insecure_channel(address) as channel:
        described = await pb_grpc.DisklessCoordinatorStub(channel).DescribeCoordinators(
            pb.DescribeCoordinatorsRequest(), timeout=10
        )
    return sorted({a for d in described.coordinators for r in d.leader.replicas for a in r.read_addresses})


async def _fill(address: str, partitions: int, batches: int) -> bytes:
    """A topic of `partitions` partitions of `batches` batches each: its id."""
    async with grpc.aio.insecure_channel(address, options=[("grpc.max_send_message_length", MESSAGE_MAX_BYTES)]) as ch:
        stub = pb_grpc.DisklessCoordinatorStub(ch)
        topic_id = os.urandom(16)
        created = await stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=f"reads-{topic_id.hex()[:8]}",
                                                         num_partitions=partitions)]
            ), timeout=30,
        )  # fmt: skip
        assert created.topics[0].error_code == pb.NONE, created
        found = await stub.FindCoordinator(
            pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(partitions))]
            ), timeout=30,
        )  # fmt: skip
        leaders = {e.coordinator_id: f"{e.host}:{e.port}" for e in found.coordinators}
        owner = {p.partition: p.coordinator_id for p in found.topics[0].partitions}
    for partition in range(partitions):
        coordinator = owner[partition]
        request = pb.CommitFileRequest(
            object_key=f"wal/{os.urandom(16).hex()}", object_format=1, file_size=batches * BATCH_BYTES,
            uploader_broker_id=1, owner_ids=[coordinator],
            batches=[
                pb.CommitFileRequest.Batch(
                    partition=partition, byte_offset=i * BATCH_BYTES, magic=2, topic_id=topic_id, size=BATCH_BYTES,
                    base_offset=0, last_offset=9, batch_max_timestamp=1_700_000_000_000,
                    timestamp_type=pb.CREATE_TIME, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                    last_sequence=-1,
                )
                for i in range(batches)
            ],
        )  # fmt: skip
        async with grpc.aio.insecure_channel(leaders.get(coordinator, address)) as channel:
            committed = await pb_grpc.DisklessCoordinatorStub(channel).CommitFile(request, timeout=60)
        assert all(b.error_code == pb.NONE for b in committed.batches), committed.batches[0]
    return topic_id


def _find_request(topic_id: bytes, partitions: int) -> bytes:
    wanted = [
        pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=PARTITION_FETCH_BYTES)
        for p in range(partitions)
    ]
    return pb.FindBatchesRequest(
        fetch_max_bytes=2**31 - 1, topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=wanted)]
    ).SerializeToString()


class Flood:
    def __init__(self, args: argparse.Namespace, targets: list[str], request: bytes, watched: list[Watched]) -> None:
        self.args = args
        self.targets = targets
        self.request = request
        self.watched = watched
        self.tally = Tally()
        self.in_flight = 0
        self.over_limit = False
        self.done = asyncio.Event()

    async def slot(self, call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes], stop_at: float) -> None:
        backoff = Backoff(100, 1000)
        tally = self.tally
        while time.monotonic() < stop_at and not self.over_limit:
            sent = time.perf_counter()
            self.in_flight += 1
            try:
                answer = await call(self.request, timeout=self.args.timeout)
            except grpc.aio.AioRpcError as error:
                code = error.code().name
                tally.codes[code] += 1
                tally.latencies_s.setdefault(code, []).append(time.perf_counter() - sent)
                tally.details[(code, re.sub(r"\d+", "N", error.details() or "")[:140])] += 1
                await asyncio.sleep(backoff.failed() / 1000 * random.uniform(0.8, 1.2))
                continue
            finally:
                self.in_flight -= 1
            backoff.succeeded()
            tally.codes["OK"] += 1
            tally.ok_bytes += len(answer)
            tally.latencies_s.setdefault("OK", []).append(time.perf_counter() - sent)

    async def client(self, index: int, slots: int, stop_at: float) -> None:
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", MESSAGE_MAX_BYTES)]
        target = self.targets[index % len(self.targets)]
        async with grpc.aio.insecure_channel(target, options=options) as channel:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                FIND_METHOD, request_serializer=None, response_deserializer=None
            )
            await asyncio.gather(*(self.slot(call, stop_at) for _ in range(slots)))

    async def sample(self, started: float, kill: list[CoordinatorServer]) -> None:
        last = started
        while not self.done.is_set():
            total_kib = 0
            for process in self.watched:
                rss = status_kib(process.pid, "VmRSS")
                process.peak_rss_kib = max(process.peak_rss_kib, rss)
                process.hwm_kib = max(process.hwm_kib, status_kib(process.pid, "VmHWM"))
                total_kib += rss
            if total_kib > self.args.rss_limit_mib * 1024 and not self.over_limit:
                self.over_limit = True
                print(f"  RSS {total_kib / 1024:.0f} MiB past --rss-limit-mib: killing the servers", flush=True)
                for server in kill:
                    server.kill()
            now = time.monotonic()
            if now - last >= PROGRESS_INTERVAL_S:
                t = self.tally
                print(
                    f"  t={now - started:5.1f}s ok={t.codes['OK']} shed={t.codes['RESOURCE_EXHAUSTED']} "
                    f"other={sum(v for k, v in t.codes.items() if k not in ('OK', 'RESOURCE_EXHAUSTED'))} "
                    f"in-flight={self.in_flight} rss={total_kib / 1024:.0f} MiB",
                    flush=True,
                )
                last = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), SAMPLE_INTERVAL_S)

    async def run(self, kill: list[CoordinatorServer]) -> float:
        args = self.args
        started = time.monotonic()
        sampler = asyncio.create_task(self.sample(started, kill))
        per_client, extra = divmod(args.calls, args.clients)
        stop_at = started + args.seconds
        try:
            await asyncio.gather(*(self.client(c, per_client + (c < extra), stop_at) for c in range(args.clients)))
        finally:
            self.done.set()
            await sampler
        return time.monotonic() - started


def _watched(servers: list[CoordinatorServer]) -> list[Watched]:
    found = []
    for index, server in enumerate(servers):
        for pid in process_tree(server.pid):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            kind = "node" if pid == server.pid else ("reader" if b"spawn_main" in command else "child")
            found.append(Watched(f"node{index}" + ("" if kind == "node" else f"/{kind} {pid}"), pid))
    return found


def _metrics(server: CoordinatorServer) -> dict[str, float]:
    match = METRICS_LINE.search("".join(server.output))
    if not match or not server.running:
        return {}
    try:
        with urllib.request.urlopen(match.group(1), timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(COUNTED) and ("shed_calls" not in line or "FindBatches" in line):
            name, value = line.rsplit(" ", 1)
            counts[name] = float(value)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", action="store_true", help="three nodes on a local etcd, not one node")
    parser.add_argument("--calls", type=int, default=10000, help="FindBatches kept under way at once")
    parser.add_argument("--clients", type=int, default=100, help="connections the calls are spread over")
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--batches", type=int, default=1000, help="batches per partition")
    parser.add_argument("--coordinators", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30, help="how long new calls are sent")
    parser.add_argument("--timeout", type=float, default=30, help="each call's deadline (seconds)")
    parser.add_argument("--rss-limit-mib", type=int, default=4096, help="kill the servers past this RSS, summed")
    parser.add_argument("--server-tree", type=Path, help="run the nodes from this source tree")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a node setting")
    args = parser.parse_args(argv)
    if args.calls > 20000 or args.seconds > 600 or args.timeout > 120:
        parser.error("bounded by design: at most 20000 calls at once, 600 s, a 120 s timeout")
    settings = node_settings(parser, args.set, {"diskless.metrics.listen": "127.0.0.1:0"})
    what = "a 3-node cluster" if args.cluster else "one node"
    print(
        f"read overload: {args.calls} FindBatches at once over {args.clients} connections for {args.seconds:g} s "
        f"against {what} ({args.partitions} partitions x {args.batches} batches) from {args.server_tree or 'here'}, "
        f"on {platform.node()} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}), settings {settings}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="read-overload-") as directory:
        cluster = (
            ReplicatedCluster(Path(directory), args.coordinators, settings, install=False) if args.cluster else None
        )
        servers = (
            cluster.nodes if cluster else [CoordinatorServer(Path(directory) / "node", args.coordinators, settings)]
        )
        for server in servers:
            if args.server_tree is not None:
                server.tree = args.server_tree.resolve()
        try:
            if cluster is not None:
                cluster.start()
            else:
                servers[0].start()
            import uvloop

            async def prepare() -> tuple[bytes, list[str]]:
                await asyncio.gather(*(_ready(server.address) for server in servers))
                topic_id = await _fill(servers[0].address, args.partitions, args.batches)
                await asyncio.sleep(2)  # followers catch up, readers are up and see the state files
                return topic_id, await _readers(servers[0].address)

            topic_id, readers = uvloop.run(prepare())
            targets = [server.address for server in servers] + readers
            watched = _watched(servers)
            flood = Flood(args, targets, _find_request(topic_id, args.partitions), watched)
            elapsed = uvloop.run(flood.run(servers))
            alive = {w.name: Path(f"/proc/{w.pid}").exists() for w in watched}
            counts = {f"node{i} {k}": v for i, server in enumerate(servers) for k, v in _metrics(server).items()}
        finally:
            if cluster is not None:
                cluster.stop()
            else:
                servers[0].stop()
    _report(flood, elapsed, targets, alive, counts)
    return 0


def _report(flood: Flood, elapsed: float, targets: list[str], alive: dict[str, bool], counts: dict[str, float]) -> None:
    t = flood.tally
    print(f"targets: {targets}; {elapsed:.0f} s")
    print(f"calls: {dict(t.codes.most_common())}")
    ok = t.codes["OK"]
    print(f"answers: {t.ok_bytes / max(ok, 1) / 1024:.0f} KiB each on average, {t.ok_bytes / 2**20:.0f} MiB in all")
    for code, latencies in sorted(t.latencies_s.items()):
        print(
            f"{code} latency: median {percentile_ms(latencies, 0.5, empty=NAN):.0f} ms, "
            f"p99 {percentile_ms(latencies, 0.99, empty=NAN):.0f} ms"
        )
    for (code, detail), count in t.details.most_common(4):
        print(f"  {count} x {code}: {detail!r}")
    if flood.over_limit:
        print("THE SERVERS' RSS PASSED --rss-limit-mib: they were killed")
    for process in flood.watched:
        print(
            f"{process.name}: peak RSS {process.peak_rss_kib / 1024:.0f} MiB sampled, VmHWM "
            f"{process.hwm_kib / 1024:.0f} MiB, {'alive' if alive.get(process.name) else 'GONE'} at the end"
        )
    for name, value in sorted(counts.items()):
        print(f"metric {name} = {value:.0f}")


if __name__ == "__main__":
    raise SystemExit(main())
