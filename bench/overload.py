"""Overload: many brokers with several large commits in flight each, against a node it starts.

    python -m bench.overload [--clients 200] [--in-flight 8] [--batches 1000] [--seconds 30]
                             [--timeout 30] [--backoff-ms 100] [--backoff-max-ms 1000]
                             [--set NAME=VALUE ...] [--node-log PATH]

Starts `diskless serve` on 127.0.0.1 in a temporary directory (its settings
from --set), creates a topic, then runs --clients brokers, each on its own
connection, each keeping --in-flight CommitFile calls of --batches batches
under way for --seconds (a failed call is retried after a jittered backoff
from --backoff-ms doubling up to --backoff-max-ms, as a Kafka client's
`retry.backoff.ms` and `retry.backoff.max.ms`). It prints progress, then:
calls answered OK / RESOURCE_EXHAUSTED / other codes, the latency of OK calls
and of each error code (median, p99), the commit throughput while overloaded,
the server's peak RSS (VmHWM, and the highest sampled VmRSS), the server's own
counts (from its /metrics: refusals, and gRPC's calls started / succeeded /
failed, whose difference is the calls gRPC cancelled before the node took them
up) and how many lines it logged.
Bounded: new calls stop after --seconds; calls under way end by their
--timeout; the node is stopped (SIGTERM, then SIGKILL) whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import re
import statistics
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.arguments import node_settings
from bench.driver import NAN, percentile_ms
from bench.load import create_load_topic
from bench.node_process import (
    METRICS_LINE,
    cpu_s,
    start_node,
    status_kib,
    stop_node,
    wait_serving,
)
from coordinator.base.backoff import Backoff
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

COMMIT_METHOD = "/diskless.coordinator.v1.DisklessCoordinator/CommitFile"
BATCH_BYTES = 1000  # the size each batch claims in its file
SAMPLE_INTERVAL_S = 0.25  # RSS sampling
PROGRESS_INTERVAL_S = 5.0


@dataclass
class Tally:
    ok: int = 0
    ok_batches: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    ok_latencies_s: list[float] = field(default_factory=list)
    ok_in_window: int = 0  # answered OK before new calls stopped
    ok_batches_in_window: int = 0
    error_latencies_s: dict[str, list[float]] = field(default_factory=dict)  # by status code
    details: Counter[tuple[str, str]] = field(default_factory=Counter)  # (code, details with numbers as N)


def _batches_field(topic_id: bytes, partitions: int, batches: int, client: int) -> bytes:
    """The serialised `batches` field of a commit: prepared once per client (the load's CPU stays on the node)."""
    items = [
        pb.CommitFileRequest.Batch(
            partition=(client * batches + i) % partitions,
            byte_offset=i * BATCH_BYTES,
            magic=2,
            topic_id=topic_id,
            size=BATCH_BYTES,
            base_offset=0,
            last_offset=9,
            batch_max_timestamp=1_700_000_000_000,
            timestamp_type=pb.CREATE_TIME,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            last_sequence=-1,
        )
        for i in range(batches)
    ]
    return pb.CommitFileRequest(batches=items).SerializeToString()


class Overload:
    def __init__(self, args: argparse.Namespace, address: str, pid: int) -> None:
        self.args = args
        self.address = address
        self.pid = pid
        self.tally = Tally()
        self.rss_peak_kib = 0
        self.rss_samples: list[tuple[float, int]] = []
        self.in_flight = 0

    async def slot(
        self, call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes], head: bytes, body: bytes, stop_at: float
    ) -> None:
        args, tally = self.args, self.tally
        file_size = args.batches * BATCH_BYTES
        backoff = Backoff(args.backoff_ms, args.backoff_max_ms)
        while time.monotonic() < stop_at:
            request = pb.CommitFileRequest(object_key=f"wal/{uuid.uuid4().hex}", file_size=file_size)
            sent = time.perf_counter()
            self.in_flight += 1
            try:
                raw = await call(request.SerializeToString() + head + body, timeout=args.timeout)
            except grpc.aio.AioRpcError as error:
                latency = time.perf_counter() - sent
                code = error.code().name
                tally.codes[code] += 1
                tally.error_latencies_s.setdefault(code, []).append(latency)
                tally.details[(code, re.sub(r"\d+", "N", error.details() or "")[:160])] += 1
                # As a Kafka client: retry.backoff.ms doubling up to retry.backoff.max.ms, jittered.
                await asyncio.sleep(backoff.failed() / 1000 * random.uniform(0.8, 1.2))
                continue
            finally:
                self.in_flight -= 1
            backoff.succeeded()
            tally.ok_latencies_s.append(time.perf_counter() - sent)
            response = pb.CommitFileResponse.FromString(raw)
            failed = sum(1 for b in response.batches if b.error_code != pb.NONE)
            tally.codes["OK"] += 1
            tally.ok += 1
            tally.ok_batches += len(response.batches) - failed
            if time.monotonic() < stop_at:
                tally.ok_in_window += 1
                tally.ok_batches_in_window += len(response.batches) - failed
            if failed:
                tally.codes["OK with batch errors"] += 1

    async def client(self, client: int, owners: list[int], body: bytes, stop_at: float) -> None:
        # Each broker on a connection of its own (channels with equal arguments would share one).
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", 64 << 20)]
        async with grpc.aio.insecure_channel(self.address, options=options) as channel:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                COMMIT_METHOD, request_serializer=None, response_deserializer=None
            )
            head = pb.CommitFileRequest(object_format=1, uploader_broker_id=client, owner_ids=owners)
            await asyncio.gather(
                *(self.slot(call, head.SerializeToString(), body, stop_at) for _ in range(self.args.in_flight))
            )

    async def sample(self, stop: asyncio.Event, started: float) -> None:
        last_progress = started
        last_ok = 0
        while not stop.is_set():
            rss = status_kib(self.pid, "VmRSS")
            self.rss_peak_kib = max(self.rss_peak_kib, rss)
            now = time.monotonic()
            self.rss_samples.append((now - started, rss))
            if now - last_progress >= PROGRESS_INTERVAL_S:
                t = self.tally
                rate = (t.ok - last_ok) / (now - last_progress)
                print(
                    f"  t={now - started:5.1f}s  ok={t.ok} shed={t.codes['RESOURCE_EXHAUSTED']} "
                    f"other={sum(v for k, v in t.codes.items() if k not in ('OK', 'RESOURCE_EXHAUSTED'))} "
                    f"in-flight={self.in_flight} commits/s={rate:.1f} rss={rss / 1024:.0f} MiB",
                    flush=True,
                )
                last_progress, last_ok = now, t.ok
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_INTERVAL_S)

    async def run(self) -> dict[str, float]:
        args = self.args
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = pb_grpc.DisklessCoordinatorStub(channel)
            await wait_serving(stub)
            topic_id, owners = await create_load_topic(stub, "overload", args.partitions)
        bodies = [_batches_field(topic_id, args.partitions, args.batches, c) for c in range(args.clients)]
        stop = asyncio.Event()
        started = time.monotonic()
        cpu_before = cpu_s(self.pid), cpu_s(os.getpid())
        sampler = asyncio.create_task(self.sample(stop, started))
        stop_at = started + args.seconds
        try:
            await asyncio.gather(*(self.client(c, owners, bodies[c], stop_at) for c in range(args.clients)))
        finally:
            elapsed = time.monotonic() - started
            stop.set()
            await sampler
        return {
            "elapsed_s": elapsed,
            "server_cpu_s": cpu_s(self.pid) - cpu_before[0],
            "client_cpu_s": cpu_s(os.getpid()) - cpu_before[1],
        }


def _scrape_refusals(log_path: Path) -> dict[str, float]:
    """The node's own counts of refused calls, by metric and labels, from its /metrics."""
    match = METRICS_LINE.search(log_path.read_text(errors="replace"))
    if not match:
        return {}
    with urllib.request.urlopen(match.group(1), timeout=10) as answer:
        text = answer.read().decode()
    wanted = ("diskless_rpc_requests_total", "diskless_shed_calls_total", "diskless_overloaded_calls_total",
              "diskless_server_calls_in_progress_peak", "diskless_server_request_bytes_in_progress_peak",
              "diskless_grpc_calls_")  # fmt: skip
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(wanted):
            name, value = line.rsplit(" ", 1)
            counts[name] = float(value)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200, help="brokers, each on its own connection")
    parser.add_argument("--in-flight", type=int, default=8, help="commits each broker keeps under way")
    parser.add_argument("--batches", type=int, default=1000, help="batches per commit")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--coordinators", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30, help="how long new calls are sent")
    parser.add_argument("--timeout", type=float, default=30, help="each call's deadline (seconds)")
    parser.add_argument("--backoff-ms", type=int, default=100, help="first wait after a refusal (doubles per retry)")
    parser.add_argument("--backoff-max-ms", type=int, default=1000, help="longest wait between retries")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a node setting")
    parser.add_argument("--node-log", type=Path, help="keep a copy of the node's log there")
    args = parser.parse_args(argv)
    if args.clients * args.in_flight > 20000 or args.seconds > 600 or args.timeout > 120:
        parser.error("bounded by design: at most 20000 calls in flight, 600 s, a 120 s timeout")
    settings = node_settings(parser, args.set, {"diskless.metrics.listen": "127.0.0.1:0"})
    print(
        f"overload: {args.clients} clients x {args.in_flight} in flight x {args.batches} batches for "
        f"{args.seconds:g} s on {platform.node()} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}), "
        f"settings {settings}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="overload-") as directory:
        process, address, log_path = start_node(Path(directory), args.coordinators, settings)
        try:
            import uvloop

            load = Overload(args, address, process.pid)
            times = uvloop.run(load.run())
            hwm_kib = status_kib(process.pid, "VmHWM")
            refusals = _scrape_refusals(log_path)
        finally:
            stop_node(process)
        log_text = log_path.read_text(errors="replace")
        if args.node_log is not None:
            args.node_log.write_text(log_text)
    _report(args, load, times, hwm_kib, refusals, log_text)
    return 0


def _report(
    args: argparse.Namespace,
    load: Overload,
    times: dict[str, float],
    hwm_kib: int,
    refusals: dict[str, float],
    log_text: str,
) -> None:
    t = load.tally
    window = min(times["elapsed_s"], args.seconds)
    print(f"calls: {dict(t.codes.most_common())}")
    print(
        f"OK latency: median {percentile_ms(t.ok_latencies_s, 0.5, empty=NAN):.0f} ms, "
        f"p99 {percentile_ms(t.ok_latencies_s, 0.99, empty=NAN):.0f} ms"
    )
    for code, latencies in sorted(t.error_latencies_s.items()):
        print(
            f"{code} latency: median {percentile_ms(latencies, 0.5, empty=NAN):.1f} ms, "
            f"p99 {percentile_ms(latencies, 0.99, empty=NAN):.1f} ms, "
            f"max {percentile_ms(latencies, 1.0, empty=NAN):.1f} ms"
        )
    for (code, detail), count in t.details.most_common(6):
        print(f"  {count} x {code}: {detail!r}")
    print(
        f"throughput while overloaded: {t.ok_in_window / window:.1f} commits/s, "
        f"{t.ok_batches_in_window / window:.0f} batches/s (answers within the {window:.0f} s of load; "
        f"the last calls under way ended after {times['elapsed_s']:.0f} s)"
    )
    sampled_peak = max((rss for _, rss in load.rss_samples), default=0)
    late = [rss for at, rss in load.rss_samples if at >= window / 2]
    print(
        f"server RSS: peak {hwm_kib / 1024:.0f} MiB (VmHWM), highest sample {sampled_peak / 1024:.0f} MiB, "
        f"median over the second half {statistics.median(late) / 1024 if late else 0:.0f} MiB"
    )
    print(f"CPU: server {times['server_cpu_s']:.1f} s, load generator {times['client_cpu_s']:.1f} s")
    for name, value in sorted(refusals.items()):
        print(f"node metric {name} = {value:.0f}")
    lines = log_text.splitlines()
    print(f"node log: {len(lines)} lines, {len(log_text)} bytes")
    for line in lines[-5:]:
        print(f"  | {line[:200]}")


if __name__ == "__main__":
    raise SystemExit(main())
