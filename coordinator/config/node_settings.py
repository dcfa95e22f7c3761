"""The node's own settings: its identity, the edge's bounds, each coordinator's pipeline, reads, topics and
their configurations' defaults. `Settings` (`settings.py`) gathers every group; read them there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.config.fields import setting as _setting


@dataclass(frozen=True, slots=True)
class NodeSettings:
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
    thread_switch_interval_us: int = _setting(
        "diskless.node.thread.switch.interval.us",
        5000,
        "how long a thread of the node's processes runs Python before the interpreter hands the GIL to another "
        "that waits (sys.setswitchinterval): the node's loop, the edge loop, gRPC's threads and SQLite's checkpoint "
        "thread share one GIL (100..100000; 5000 is CPython's own)",
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
    worker_restart_backoff_ms: int = _setting(
        "diskless.server.worker.restart.backoff.ms",
        1000,
        "first wait before a background worker that raised is started again (doubling per failure within "
        "diskless.server.worker.failures.window.ms)",
    )
    worker_restart_backoff_max_ms: int = _setting(
        "diskless.server.worker.restart.backoff.max.ms",
        60000,
        "longest wait before a background worker that raised is started again",
    )
    worker_failures_window_ms: int = _setting(
        "diskless.server.worker.failures.window.ms",
        600000,
        "the window in which a background worker's failures count towards diskless.server.worker.failures.max",
    )
    worker_failures_max: int = _setting(
        "diskless.server.worker.failures.max",
        3,
        "failures of one background worker within the window that make it failing: health NOT_SERVING until "
        "fewer remain in the window",
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
