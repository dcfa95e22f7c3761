"""Settings: Kafka-style names, from defaults < properties file < environment < flags.

Every bound of the service is a named setting here. Where they are read from is
`coordinator.config.loading`; the rules they must keep, `coordinator.config.rules`.
An environment variable overrides a property by the name upper-cased with
dots as underscores (`diskless.coordinator.queue.max.operations` is
`DISKLESS_COORDINATOR_QUEUE_MAX_OPERATIONS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_VERIFY_MODES = ("unclean", "always", "never")


class SettingsError(ValueError):
    """A setting has a nonsense value; the message names it."""


def _setting(name: str, default: Any, doc: str) -> Any:
    return field(default=default, metadata={"name": name, "doc": doc})


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = _setting(
        "diskless.data.dir", Path("./data"), "where coordinators keep their logs and SQLite state"
    )
    listen: str = _setting(
        "diskless.listen", "127.0.0.1:50051", "HOST:PORT the gRPC server listens on (port 0 picks one)"
    )
    node_id: int = _setting("diskless.node.id", 0, "this node's id, reported as the coordinators' leader")
    coordinators: int = _setting(
        "diskless.metadata.topic.num.partitions",
        8,
        "coordinators (metadata-log partitions) on this node (KIP-1164 name)",
    )
    queue_max_operations: int = _setting(
        "diskless.coordinator.queue.max.operations",
        1024,
        "operations waiting per coordinator; past it calls get RESOURCE_EXHAUSTED",
    )
    group_commit_max_operations: int = _setting(
        "diskless.coordinator.group.commit.max.operations", 256, "operations one group commit (one fsync) may carry"
    )
    append_linger_ms: int = _setting(
        "diskless.coordinator.append.linger.ms",
        5,
        "how long a group waits for more operations before its write, when other callers' commits are under way "
        "(a lone caller's is written at once; 0: never wait); every coordinator of a process that waits is "
        "written at the same tick",
    )
    pipeline_enable: bool = _setting(
        "diskless.coordinator.pipeline.enable",
        True,
        "check the next operations while a write is in flight and group them (false: one at a time, for baselines)",
    )
    commit_max_batches: int = _setting(
        "diskless.coordinator.commit.max.batches", 10000, "batches one CommitFile may carry; past it INVALID_ARGUMENT"
    )
    max_concurrent_rpcs: int = _setting(
        "diskless.server.max.concurrent.rpcs",
        4096,
        "calls the node works on at once; past it a call is refused at once with RESOURCE_EXHAUSTED",
    )
    # Admission at the gRPC edge: what is past these bounds is refused before its request is parsed, never queued.
    max_inflight_request_bytes: int = _setting(
        "diskless.server.max.inflight.request.bytes",
        8 * 1024 * 1024,
        "request bytes (as received) of the calls the node works on at once; past it a call is refused at once with "
        "RESOURCE_EXHAUSTED, but a call alone is always taken (0: no bound). Parsed, a request takes a few times "
        "its size in memory; the bound also caps the work queued ahead of an admitted call",
    )
    max_inflight_response_bytes: int = _setting(
        "diskless.server.max.inflight.response.bytes",
        128 * 1024 * 1024,
        "answer bytes of the FindBatches calls the node (and each reader process) works on or is still sending at "
        "once: a call holds its answer's bound (find.batches.max.results entries of the longest object key, at most "
        "request.max.bytes) until the answer is built, then the answer's size until gRPC has sent it; past it a "
        "call is refused at once with RESOURCE_EXHAUSTED, before any work, but a call alone is always taken "
        "(0: no bound)",
    )
    min_remaining_deadline_ms: int = _setting(
        "diskless.server.min.remaining.deadline.ms",
        50,
        "a call whose deadline leaves less than this when the node takes it up (it waited in gRPC's queues) is "
        "refused with RESOURCE_EXHAUSTED, not run (0: off; calls without a deadline are always run)",
    )
    max_pending_calls: int = _setting(
        "diskless.server.max.pending.calls",
        2048,
        "calls of one RPC gRPC holds until the edge loop takes them up (to run or refuse them); past it gRPC "
        "cancels further calls at once (CANCELLED: never run). Each holds at most stream.window.bytes",
    )
    max_pending_ms: int = _setting(
        "diskless.server.max.pending.ms",
        10000,
        "longest a call waits in gRPC for the busy node to take it up; past it gRPC cancels it (CANCELLED: never "
        "run). In whole seconds, rounded up (gRPC's own default is 30 s). The loop takes calls up between applies, "
        "which for commits of thousands of batches can take a second or more: a tighter bound cancels ordinary load",
    )
    stream_window_bytes: int = _setting(
        "diskless.server.stream.window.bytes",
        256 * 1024,
        "bytes of a call's request gRPC reads before the node asks for them (the HTTP/2 stream window), so calls "
        "waiting in gRPC hold at most max.pending.calls x this (0: gRPC's default, whose windows grow to whole "
        "requests; else >= 65535)",
    )
    edge_loop: bool = _setting(
        "diskless.server.edge.loop",
        True,
        "take calls up, admit or refuse and parse them on an event loop of their own, in a thread beside the node's "
        "loop, so that an overloaded node refuses the excess with RESOURCE_EXHAUSTED within milliseconds instead of "
        "leaving it in gRPC's queue (false: the gRPC server runs on the node's one loop)",
    )
    node_processes: int = _setting(
        "diskless.node.processes",
        1,
        "processes the node's coordinators are spread over, one event loop and interpreter each, so that commits "
        "use every core: coordinator c is led by commit process c mod N, each on its own port (the listen port + 1 "
        "+ its index when the listen port is fixed) and named by FindCoordinator; this process then routes callers "
        "that send everything to the listen address, holds the catalog and the reader processes. 1: the node is one "
        "process. Not with --etcd",
    )
    read_processes: int = _setting(
        "diskless.server.read.processes",
        1,
        "reader processes serving FindBatches from the coordinators' state files, each on its own port advertised "
        "by FindCoordinator (the node still serves FindBatches itself). 0: none. In a cluster (--etcd) each node's "
        "readers serve the replicas it hosts, up to each one's high watermark, and are named in its etcd "
        "registration",
    )
    read_process_start_timeout_ms: int = _setting(
        "diskless.server.read.process.start.timeout.ms",
        30000,
        "how long a reader process may take to start listening before it is counted as failed and started again",
    )
    read_process_restart_backoff_ms: int = _setting(
        "diskless.server.read.process.restart.backoff.ms",
        200,
        "first wait before a reader process that died is started again (doubling per failure in a row)",
    )
    read_process_restart_backoff_max_ms: int = _setting(
        "diskless.server.read.process.restart.backoff.max.ms",
        10000,
        "longest wait before a reader process that died is started again",
    )
    request_max_bytes: int = _setting(
        "diskless.coordinator.request.max.bytes", 16 * 1024 * 1024, "largest gRPC message accepted (bytes)"
    )
    request_timeout_ms: int = _setting(
        "diskless.coordinator.request.timeout.ms",
        30000,
        "wait for an operation when the request's timeout_ms is <= 0 (REQUEST_TIMED_OUT past it)",
    )
    request_timeout_max_ms: int = _setting(
        "diskless.coordinator.request.timeout.max.ms", 300000, "cap on a request's own timeout_ms"
    )
    topic_partitions_max: int = _setting(
        "diskless.coordinator.topic.partitions.max", 100000, "partitions a topic may have; more is INVALID_PARTITIONS"
    )
    # Topic configurations' defaults (DESIGN §4a): a topic without its own retention.ms / retention.bytes takes
    # these, read when they are used (as Kafka's log.retention.ms and log.retention.bytes).
    log_retention_ms: int = _setting(
        "diskless.log.retention.ms",
        -1,
        "retention.ms of a topic that sets none: batches older than this go (-1: no time limit; a broker passes its "
        "topics' own values)",
    )
    log_retention_bytes: int = _setting(
        "diskless.log.retention.bytes",
        -1,
        "retention.bytes of a topic that sets none: a partition's oldest batches go while it holds more (-1: no limit)",
    )
    find_batches_max_results: int = _setting(
        "diskless.coordinator.find.batches.max.results", 10000, "batches one FindBatches call returns at most"
    )
    request_max_items: int = _setting(
        "diskless.coordinator.request.max.items",
        10000,
        "items (partitions, topics, keys) one non-commit call may carry; past it INVALID_ARGUMENT",
    )
    file_keys_page_max_keys: int = _setting(
        "diskless.coordinator.file.keys.page.max.keys",
        10000,
        "object keys one ListFileKeys page carries at most (the orphan scan's known keys); a page also stays within "
        "half of diskless.coordinator.request.max.bytes",
    )
    file_keys_streams_max: int = _setting(
        "diskless.coordinator.file.keys.streams.max",
        16,
        "ListFileKeys streams a node serves at once; past it RESOURCE_EXHAUSTED. Each holds a read transaction of its "
        "own on a coordinator's SQLite state, which keeps that state's WAL from being checkpointed while it runs",
    )
    file_keys_stream_max_ms: int = _setting(
        "diskless.coordinator.file.keys.stream.max.ms",
        600000,
        "a ListFileKeys stream still running after this long ends with REQUEST_TIMED_OUT (checked before each page), "
        "so that a slow reader cannot hold a state's WAL checkpoints back for longer",
    )
    log_segment_bytes: int = _setting(
        "diskless.coordinator.log.segment.bytes", 64 * 1024 * 1024, "size at which a metadata-log segment rolls"
    )
    state_cache_bytes: int = _setting(
        "diskless.coordinator.state.cache.bytes",
        64 * 1024 * 1024,
        "SQLite page cache of each coordinator's state writer (bytes)",
    )
    state_checkpoint_pages: int = _setting(
        "diskless.coordinator.state.checkpoint.pages",
        1000,
        "WAL pages of a coordinator's state after which they are checkpointed into its file, on a thread of the "
        "state's own while applies go on (0: by SQLite itself past 1000 pages, inside the apply that passes them, on "
        "the node's event loop; a baseline)",
    )
    state_page_checksums: bool = _setting(
        "diskless.coordinator.state.page.checksums",
        True,
        "every page of a coordinator's SQLite state carries a checksum verified on each read (SQLite's cksumvfs), and "
        "every page read from its WAL is checked against the WAL's frame checksums; a mismatch is damage: the "
        "coordinator goes out of service and rebuilds its state. A state file without them is converted when it "
        "loads (VACUUM). false: new files without checksums, the WAL unchecked (files that have them stay verified)",
    )
    replay_batch_operations: int = _setting(
        "diskless.coordinator.replay.batch.operations", 2000, "log batches applied per SQLite transaction on replay"
    )
    # Out of service and back (a full disk, an I/O error, damage found on disk).
    reload_backoff_ms: int = _setting(
        "diskless.coordinator.reload.backoff.ms",
        200,
        "first wait before a coordinator that failed (a full disk, an I/O error) tries to load again; doubles per try",
    )
    reload_backoff_max_ms: int = _setting(
        "diskless.coordinator.reload.backoff.max.ms", 5000, "longest wait between two load attempts of a coordinator"
    )
    state_verify_on_load: str = _setting(
        "diskless.coordinator.state.verify.on.load",
        "unclean",
        "check the SQLite state (PRAGMA integrity_check) when a coordinator loads: unclean (after a crash or a "
        "failure, whenever the node did not close it), always, or never; a damaged state is set aside and rebuilt",
    )
    snapshot_interval_bytes: int = _setting(
        "diskless.coordinator.snapshot.interval.bytes",
        64 * 1024 * 1024,
        "log bytes appended after which a coordinator snapshots its state (0: no size trigger; "
        "else >= the segment size, since a smaller interval frees no log)",
    )
    snapshot_interval_ms: int = _setting(
        "diskless.coordinator.snapshot.interval.ms",
        3600000,
        "time after which a coordinator snapshots its state if anything was applied since (0: no time trigger)",
    )
    snapshot_retained_count: int = _setting(
        "diskless.coordinator.snapshot.retained.count",
        2,
        "newest snapshots kept per coordinator; log segments wholly below the oldest kept one are deleted",
    )
    damaged_retained_count: int = _setting(
        "diskless.coordinator.damaged.retained.count",
        3,
        "in a cluster, folders of damaged files (`damaged-<ms>/`, set aside before a replica repairs from a healthy "
        "one) kept per coordinator for the operator; older ones are deleted",
    )
    snapshot_copy_step_pages: int = _setting(
        "diskless.coordinator.snapshot.copy.step.pages",
        1024,
        "SQLite pages a snapshot copies per backup step, each flushed before the next, so that the metadata "
        "log's fsyncs never wait behind more than one step",
    )
    snapshot_copy_max_bytes_per_second: int = _setting(
        "diskless.coordinator.snapshot.copy.max.bytes.per.second",
        320 * 1024 * 1024,
        "rate bound of a snapshot copy, which leaves the disk gaps between steps (0: no bound)",
    )
    snapshot_retry_backoff_ms: int = _setting(
        "diskless.coordinator.snapshot.retry.backoff.ms",
        1000,
        "wait before retrying a failed snapshot; doubles per failure up to the max",
    )
    snapshot_retry_backoff_max_ms: int = _setting(
        "diskless.coordinator.snapshot.retry.backoff.max.ms", 60000, "cap of the wait between snapshot retries"
    )
    storage_backend: str = _setting(
        "diskless.storage.backend", "local", "object storage of WAL files: local (a directory) or s3"
    )
    storage_local_root: str = _setting(
        "diskless.storage.local.root", "", "directory of the local object store (empty: <data dir>/objects)"
    )
    storage_s3_bucket: str = _setting("diskless.storage.s3.bucket", "", "S3 bucket of WAL files (backend s3)")
    storage_s3_prefix: str = _setting(
        "diskless.storage.s3.prefix", "", "key prefix where brokers write WAL files and where the orphan scan looks"
    )
    storage_s3_endpoint_url: str = _setting(
        "diskless.storage.s3.endpoint.url", "", "S3 endpoint (empty: AWS's own for the region)"
    )
    storage_s3_region: str = _setting("diskless.storage.s3.region", "us-east-1", "S3 region")
    storage_request_timeout_ms: int = _setting(
        "diskless.storage.request.timeout.ms", 30000, "connect and read timeout of one object-store request"
    )
    file_deletion_grace_period_ms: int = _setting(
        "diskless.coordinator.file.deletion.grace.period.ms",
        60000,
        "how long the last owner of a WAL file with no live batch waits before deleting the object",
    )
    file_handover_probe_delay_ms: int = _setting(
        "diskless.coordinator.file.handover.probe.delay.ms",
        60000,
        "how long after a file's commit a coordinator that waits for its ownership asks the owners before it "
        "whether any knows the file (a commit that reached only some owners)",
    )
    file_worker_interval_ms: int = _setting(
        "diskless.coordinator.file.worker.interval.ms",
        1000,
        "how often a coordinator looks for WAL files to hand over or delete",
    )
    file_worker_max_files: int = _setting(
        "diskless.coordinator.file.worker.max.files",
        1000,
        "WAL files one hand-over call or one deletion cycle carries at most (<= 1000)",
    )
    file_retry_backoff_ms: int = _setting(
        "diskless.coordinator.file.retry.backoff.ms",
        500,
        "wait before retrying a failed hand-over or deletion; doubles per failure up to the max",
    )
    file_retry_backoff_max_ms: int = _setting(
        "diskless.coordinator.file.retry.backoff.max.ms", 30000, "cap of the wait between hand-over or deletion retries"
    )
    producer_id_expiration_ms: int = _setting(
        "diskless.coordinator.producer.id.expiration.ms",
        86400000,
        "an idempotent producer whose last batch on a partition has an effective timestamp older than this is "
        "forgotten there; its next batch is an unknown producer's (Kafka's producer.id.expiration.ms)",
    )
    producer_id_expiration_check_interval_ms: int = _setting(
        "diskless.coordinator.producer.id.expiration.check.interval.ms",
        600000,
        "how often each coordinator's leader looks for expired producers (Kafka's "
        "producer.id.expiration.check.interval.ms)",
    )
    producer_id_expiration_batch_max: int = _setting(
        "diskless.coordinator.producer.id.expiration.batch.max",
        1000,
        "producers one step of an expiry pass reads and expires at most (one record); a pass goes over every "
        "producer in such steps, letting commits run between them (<= 100000)",
    )
    topic_purge_batch_max: int = _setting(
        "diskless.coordinator.topic.purge.batch.max",
        1000,
        "batches of deleted topics one purge pass of a coordinator's leader removes at most (one record, one apply)",
    )
    topic_purge_interval_ms: int = _setting(
        "diskless.coordinator.topic.purge.interval.ms",
        100,
        "pause between two purge passes of a coordinator's leader while deleted topics' batches remain",
    )
    retention_check_interval_ms: int = _setting(
        "diskless.coordinator.retention.check.interval.ms",
        300000,
        "how often each coordinator's leader removes its partitions' expired batches by retention.ms and "
        "retention.bytes (Kafka's log.retention.check.interval.ms)",
    )
    retention_batch_max: int = _setting(
        "diskless.coordinator.retention.batch.max",
        1000,
        "batches one retention step removes at most (one record, one apply; a partition looked at costs at least "
        "one); a retention pass goes over every partition in such steps, letting commits run between them",
    )
    remote_segment_batch_max: int = _setting(
        "diskless.coordinator.remote.segment.batch.max",
        1000,
        "batches one CommitRemoteLogSegments call may take out of a coordinator at most (one apply); a segment "
        "naming more is refused (INVALID_REQUEST): the copier commits smaller segments",
    )
    orphan_scan_interval_ms: int = _setting(
        "diskless.coordinator.orphan.scan.interval.ms",
        86400000,
        "time between two orphan scans in `diskless orphan-scan --periodic` (KIP-1164 name)",
    )
    orphan_scan_grace_period_ms: int = _setting(
        "diskless.coordinator.orphan.scan.grace.period.ms",
        86400000,
        "an object is an orphan candidate only if older than the oldest live file minus this (KIP-1164 name)",
    )
    orphan_scan_key_pattern: str = _setting(
        "diskless.coordinator.orphan.scan.key.pattern",
        r"wal/[0-9a-f]{2}/[0-9a-f]{32}\.wal",
        "regular expression a key (after the storage prefix) must match in full to be an orphan candidate",
    )
    orphan_scan_max_orphan_percent: int = _setting(
        "diskless.coordinator.orphan.scan.max.orphan.percent",
        50,
        "the scan aborts without deleting when orphans exceed this share of the listed WAL files (percent)",
    )
    drain_timeout_ms: int = _setting(
        "diskless.shutdown.drain.timeout.ms", 10000, "on SIGTERM, how long in-flight calls may take to finish"
    )
    # A cluster of nodes (DESIGN §6a): used only with etcd endpoints (`serve --etcd`).
    etcd_endpoints: str = _setting(
        "diskless.cluster.etcd.endpoints", "", "HOST:PORT[,HOST:PORT...] of etcd (flag --etcd); empty: one node alone"
    )
    etcd_prefix: str = _setting("diskless.cluster.etcd.prefix", "/diskless", "the cluster's keys in etcd start here")
    etcd_request_timeout_ms: int = _setting(
        "diskless.cluster.etcd.request.timeout.ms", 2000, "deadline of one etcd request"
    )
    advertise: str = _setting(
        "diskless.advertise",
        "",
        "HOST:PORT other nodes and brokers reach this node at (flag --advertise; empty: the listen address)",
    )
    replication_factor: int = _setting(
        "diskless.coordinator.replication.factor",
        3,
        "replicas of each coordinator's metadata log; the first node's value is stored in etcd and wins",
    )
    min_insync_replicas: int = _setting(
        "diskless.coordinator.min.insync.replicas",
        2,
        "in-sync replicas a write needs; fewer: NOT_ENOUGH_REPLICAS before anything is appended",
    )
    replica_lag_time_max_ms: int = _setting(
        "diskless.coordinator.replica.lag.time.max.ms",
        10000,
        "a follower not caught up with the leader for this long leaves the ISR",
    )
    node_session_timeout_ms: int = _setting(
        "diskless.node.session.timeout.ms",
        3000,
        "the node's etcd lease (whole seconds): a node silent this long is gone and its leaderships move",
    )
    node_heartbeat_interval_ms: int = _setting(
        "diskless.node.heartbeat.interval.ms", 500, "how often the node renews its etcd lease"
    )
    cluster_refresh_interval_ms: int = _setting(
        "diskless.cluster.refresh.interval.ms",
        200,
        "how often the node reads the coordinators' leaders and ISRs from etcd and elects where one is gone",
    )
    auto_leader_rebalance_enable: bool = _setting(
        "diskless.cluster.auto.leader.rebalance.enable",
        True,
        "move leadership back to each coordinator's preferred replica (its first) once it is in the ISR, every "
        "leader.imbalance.check.interval.ms (Kafka's auto.leader.rebalance.enable)",
    )
    leader_imbalance_check_interval_ms: int = _setting(
        "diskless.cluster.leader.imbalance.check.interval.ms",
        300000,
        "how often the cluster's lowest live node runs the preferred leader elections (when enabled)",
    )
    replica_fetch_max_bytes: int = _setting(
        "diskless.coordinator.replica.fetch.max.bytes",
        4 * 1024 * 1024,
        "log bytes one follower fetch may carry (at most half the request size bound)",
    )
    replica_fetch_wait_max_ms: int = _setting(
        "diskless.coordinator.replica.fetch.wait.max.ms",
        500,
        "how long the leader holds a follower's fetch when there is nothing new (long poll)",
    )
    replica_socket_timeout_ms: int = _setting(
        "diskless.coordinator.replica.socket.timeout.ms",
        10000,
        "deadline of a follower's call to its leader (a fetch: beyond its long-poll wait; a snapshot: between chunks)",
    )
    replica_fetch_backoff_ms: int = _setting(
        "diskless.coordinator.replica.fetch.backoff.ms",
        50,
        "first wait after a failed follower fetch; doubles up to the session timeout",
    )
    replica_buffer_bytes: int = _setting(
        "diskless.coordinator.replica.buffer.bytes",
        8 * 1024 * 1024,
        "newest log bytes the leader keeps in memory for followers' fetches (older ones are read from disk)",
    )
    ssl_certificate_location: str = _setting(
        "diskless.ssl.certificate.location", "", "PEM certificate chain of this node; set with the key to serve TLS"
    )
    ssl_key_location: str = _setting("diskless.ssl.key.location", "", "PEM private key of this node's certificate")
    ssl_ca_location: str = _setting(
        "diskless.ssl.ca.location", "", "PEM CA certificates that sign callers' certificates (mutual TLS)"
    )
    ssl_client_auth: str = _setting(
        "diskless.ssl.client.auth",
        "none",
        "none, or required (mutual TLS: callers need a certificate the CA signed; principal User:<subject CN>)",
    )
    acl_file: str = _setting(
        "diskless.acl.file",
        "",
        "ACL file (`User:<name> PERMISSION,...`), re-read on change; none = no authorisation (plaintext loopback only)",
    )
    acl_reload_interval_ms: int = _setting(
        "diskless.acl.reload.interval.ms", 1000, "how often a call may look whether the ACL file changed"
    )
    allow_plaintext: bool = _setting(
        "diskless.allow.plaintext", False, "serve without TLS on a non-loopback address (flag --allow-plaintext)"
    )
    metrics_listen: str = _setting(
        "diskless.metrics.listen", "", "HOST:PORT of the Prometheus /metrics listener (off when empty)"
    )
    log_format: str = _setting("diskless.log.format", "text", "text (human-readable) or json (one object per line)")

    def with_overrides(self, overrides: Mapping[str, Any]) -> Settings:
        """A copy with the given property names set (values may be strings)."""
        by_name = {f.metadata["name"]: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for name, raw in overrides.items():
            spec = by_name.get(name)
            if spec is None:
                raise SettingsError(f"unknown setting {name!r}")
            changes[spec.name] = _convert(name, raw, type(getattr(self, spec.name)))
        return dataclasses.replace(self, **changes)

    @property
    def clustered(self) -> bool:
        """Whether this node is one of a cluster (etcd endpoints given)."""
        return bool(self.etcd_endpoints)

    @property
    def storage_local_directory(self) -> Path:
        """The local object store's root: the setting, or <data dir>/objects."""
        return Path(self.storage_local_root) if self.storage_local_root else self.data_dir / "objects"


def property_name(attr: str) -> str:
    """The Kafka-style name of a Settings attribute."""
    return next(str(f.metadata["name"]) for f in dataclasses.fields(Settings) if f.name == attr)


def describe_settings() -> list[tuple[str, str, str]]:
    """(name, default, meaning) of every setting, for docs and `--help`."""
    return [(f.metadata["name"], str(f.default), f.metadata["doc"]) for f in dataclasses.fields(Settings)]


def _convert(name: str, raw: Any, kind: type) -> Any:
    if not isinstance(raw, str):
        return kind(raw)
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise SettingsError(f"{name} must be true or false, got {raw!r}")
        return raw.lower() == "true"
    if kind is int:
        try:
            return int(raw.replace("_", ""))
        except ValueError:
            raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if issubclass(kind, Path):
        return Path(raw)
    return raw
