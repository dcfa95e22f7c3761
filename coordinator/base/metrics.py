"""Prometheus metrics and their HTTP listener (`diskless.metrics.listen`, GET /metrics).

Counters are updated where things happen (the gRPC edge, the router, the
pipelines); per-coordinator gauges are read from the coordinators when
scraped. The listener runs on the event loop, so collectors read state on the
loop's own thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Summary, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

REQUEST_HEAD_MAX_BYTES = 8192  # a scrape request is a few hundred bytes
REQUEST_READ_TIMEOUT_S = 5.0
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """Every metric of a node, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpc_requests = Counter(
            "diskless_rpc_requests", "Calls answered, by RPC and gRPC status code.", ["method", "code"], registry=r
        )
        self.rpc_duration = Histogram(
            "diskless_rpc_duration_seconds", "Time to answer a call, by RPC.", ["method"], registry=r,
            buckets=LATENCY_BUCKETS_S,
        )  # fmt: skip
        self.committed_batches = Counter(
            "diskless_committed_batches", "Batches given offsets, by coordinator.", ["coordinator"], registry=r
        )
        self.committed_bytes = Counter(
            "diskless_committed_bytes", "Bytes of the batches given offsets, by coordinator.", ["coordinator"],
            registry=r,
        )  # fmt: skip
        self.duplicate_batches = Counter(
            "diskless_duplicate_batches", "Retried idempotent batches answered with their original offsets.",
            ["coordinator"], registry=r,
        )  # fmt: skip
        self.retried_commits = Counter(
            "diskless_retried_commits", "CommitFile parts answered again as retries of a commit, by coordinator.",
            ["coordinator"], registry=r,
        )  # fmt: skip
        self.rejected_batches = Counter(
            "diskless_rejected_batches", "CommitFile batches answered with an error, by Kafka error code.", ["error"],
            registry=r,
        )  # fmt: skip
        self.overloaded_calls = Counter(
            "diskless_overloaded_calls", "Calls refused with RESOURCE_EXHAUSTED: a coordinator's queue was full.",
            ["coordinator"], registry=r,
        )  # fmt: skip
        self.shed_calls = Counter(
            "diskless_shed_calls", "Calls refused with RESOURCE_EXHAUSTED at the edge, before parsing, by RPC and "
            "reason: calls or request_bytes (a bound of calls in progress), deadline (too little of it left).",
            ["method", "reason"], registry=r,
        )  # fmt: skip
        self.undecodable_requests = Counter(
            "diskless_undecodable_requests", "Calls refused with INVALID_ARGUMENT: the request was not a valid "
            "protobuf message of the RPC's request type.", ["method"], registry=r,
        )  # fmt: skip
        self.denied_calls = Counter(
            "diskless_denied_calls", "Calls refused by authentication or authorisation.", ["method", "reason"],
            registry=r,
        )  # fmt: skip
        self.worker_failures = Counter(
            "diskless_worker_failures", "Background workers that raised (each started again after a backoff), by "
            "worker and coordinator (empty for the node's own).", ["worker", "coordinator"], registry=r,
        )  # fmt: skip
        self.file_transitions = Counter(
            "diskless_file_transitions",
            "WAL files handed over, taken, scheduled for deletion or deleted, by coordinator and step",
            ["coordinator", "step"],
            registry=self.registry,
        )
        self.file_worker_failures = Counter(
            "diskless_file_worker_failures",
            "failed hand-overs, ownership probes and deletions (each retried with backoff)",
            ["coordinator", "step"],
            registry=self.registry,
        )
        self.producers_expired = Counter(
            "diskless_producers_expired", "Idempotent producers' states (one per partition) this node forgot as the "
            "coordinator's leader, their last batch older than diskless.coordinator.producer.id.expiration.ms.",
            ["coordinator"], registry=r,
        )  # fmt: skip
        self.purged_batches = Counter(
            "diskless_purged_batches", "Batches of deleted topics removed by the purge passes, by coordinator.",
            ["coordinator"], registry=r,
        )  # fmt: skip
        self.retention_expired_batches = Counter(
            "diskless_retention_expired_batches", "Batches removed by retention (retention.ms, retention.bytes) as "
            "the coordinator's leader, by coordinator.", ["coordinator"], registry=r,
        )  # fmt: skip
        self.retention_expired_bytes = Counter(
            "diskless_retention_expired_bytes", "Bytes (batch sizes) of the batches removed by retention as the "
            "coordinator's leader, by coordinator.", ["coordinator"], registry=r,
        )  # fmt: skip
        self.offloaded_batches = Counter(
            "diskless_offloaded_batches", "Batches taken out by CommitRemoteLogSegments (now remote), by coordinator.",
            ["coordinator"], registry=r,
        )  # fmt: skip
        self.replaced_batches = Counter(
            "diskless_replaced_batches", "Batches moved into merged objects (ReplaceBatches), by coordinator.",
            ["coordinator"], registry=r,
        )  # fmt: skip
        self.coordinator_failures = Counter(
            "diskless_coordinator_failures",
            "Times a coordinator went out of service, by kind (disk_full, io_error, log_damaged, state_damaged, "
            "needs_operator, invariant, error); diskless_coordinator_up says whether it serves now.",
            ["coordinator", "kind"], registry=r,
        )  # fmt: skip
        self.coordinator_repairs = Counter(
            "diskless_coordinator_repairs",
            "What a coordinator did about damage it found, by coordinator and repair: state_from_snapshot and "
            "state_from_log (its state set aside and rebuilt), snapshot_skipped (a snapshot that did not verify passed "
            "over for an older one), epoch_checkpoint (its leader-epoch checkpoint rebuilt from the log), "
            "from_replica (its files set aside to fetch a healthy replica's copy).",
            ["coordinator", "repair"], registry=r,
        )  # fmt: skip
        self.scrubbed_bytes = Counter(
            "diskless_scrub_bytes", "Bytes the scrub read and verified (sealed log segments, snapshots, state pages), "
            "by coordinator.", ["coordinator"], registry=r,
        )  # fmt: skip
        self.scrub_damage = Counter(
            "diskless_scrub_damage", "Damage the scrub found before any read met it, by coordinator and file kind "
            "(log segment, snapshot, state).", ["coordinator", "kind"], registry=r,
        )  # fmt: skip
        self.scrub_passes = Summary(
            "diskless_scrub_pass_seconds", "Scrub passes over a coordinator's files and how long each took (paced "
            "by diskless.coordinator.scrub.bytes.per.second), by coordinator.", ["coordinator"], registry=r,
        )  # fmt: skip
        self.replica_fetch = Histogram(
            "diskless_replica_fetch_seconds", "A follower's FetchLog round trips to its leader, by coordinator and "
            "whether the answer carried records (an empty one includes the leader's long-poll wait).",
            ["coordinator", "returned"], registry=r, buckets=LATENCY_BUCKETS_S,
        )  # fmt: skip
        self.group_operations = Histogram(
            "diskless_coordinator_group_operations", "Operations per group commit (one log write and fsync).",
            ["coordinator"], registry=r, buckets=GROUP_BUCKETS,
        )  # fmt: skip

    def watch(self, collector: Collector) -> None:
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class GaugeCollector(Collector):
    """Metrics read at scrape time from `read()`: a list of (name, help, kind, labels, value)."""

    def __init__(self, read: Callable[[], Iterable[tuple[str, str, str, dict[str, str], float]]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Any]:
        families: dict[str, Any] = {}
        for name, help_text, kind, labels, value in self._read():
            family = families.get(name)
            if family is None:
                family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
                family = families[name] = family_type(name, help_text, labels=list(labels))
            family.add_metric(list(labels.values()), value)
        return list(families.values())

    def describe(self) -> Iterable[Any]:
        return []


async def serve_metrics(host: str, port: int, render: Callable[[], bytes]) -> asyncio.Server:
    """A minimal HTTP/1.0 listener answering GET /metrics in the Prometheus text format."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_READ_TIMEOUT_S)
            parts = head.split(b"\r\n", 1)[0].split()
            if len(parts) >= 2 and parts[0] == b"GET" and parts[1].split(b"?")[0] == b"/metrics":
                body, status = render(), b"200 OK"
                content_type = b"text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, content_type = b"not found: try GET /metrics\n", b"404 Not Found", b"text/plain"
            writer.write(
                b"HTTP/1.0 " + status + b"\r\nContent-Type: " + content_type
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )  # fmt: skip
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a scraper that went away or sent nonsense; nothing to answer
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, limit=REQUEST_HEAD_MAX_BYTES)
