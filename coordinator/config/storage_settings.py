"""Settings of a coordinator's files and their failures: out of service and back, snapshots, the state, the
metadata log, WAL files and object storage. `Settings` (`settings.py`) gathers every group."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.config.fields import setting as _setting
from coordinator.config.node_settings import NodeSettings


@dataclass(frozen=True, slots=True)
class StorageSettings(NodeSettings):
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
        "wait before looking again at a snapshot asked for while the coordinator did not serve (a snapshot that "
        "failed is started again by the worker supervisor: diskless.server.worker.restart.backoff.ms)",
    )
    scrub_bytes_per_second: int = _setting(
        "diskless.coordinator.scrub.bytes.per.second",
        8 * 1024 * 1024,
        "rate of the scrub, a background pass per coordinator that reads and verifies its sealed log segments, "
        "snapshots and state pages so that damage is found before a read needs them (0: no background pass; one "
        "asked for is then unpaced)",
    )
    scrub_interval_ms: int = _setting(
        "diskless.coordinator.scrub.interval.ms",
        3600000,
        "wait between the end of one scrub pass of a coordinator and the start of the next (the first starts one "
        "interval after the coordinator's start)",
    )
    scrub_step_bytes: int = _setting(
        "diskless.coordinator.scrub.step.bytes",
        1024 * 1024,
        "bytes one scrub step reads (and holds) before it yields to the coordinator's loads and paces itself",
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
    file_worker_step_files: int = _setting(
        "diskless.coordinator.file.worker.step.files",
        100,
        "WAL files one step of a file-worker cycle carries at most (one HandOverFiles or KnownFiles call, one "
        "deletion request to the store, one record batch); the worker yields to the node's other work between "
        "steps (<= diskless.coordinator.file.worker.max.files)",
    )
    file_worker_duty_percent: int = _setting(
        "diskless.coordinator.file.worker.duty.percent",
        20,
        "after a file-worker step that took t, the worker pauses t * (100 / this - 1) before its next step, so "
        "that hand-overs, probes and deletions (thousands at once after a consolidation job) keep the node's loop "
        "busy at most this share of the time and commits do not queue behind them; 100: no pause (1..100)",
    )
    known_files_step_lookups: int = _setting(
        "diskless.coordinator.known.files.step.lookups",
        200,
        "lookups (keys times coordinators asked) a KnownFiles call makes before it yields to the node's other "
        "work; each lookup is answered on its own, as before",
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
    switch_producers_max: int = _setting(
        "diskless.coordinator.switch.producers.max",
        10000,
        "producers one partition's InitDisklessLog may carry over from the classic log at most (one record holds "
        "them all); a partition with more is refused (INVALID_REQUEST)",
    )
    # Partition moves (design §5a).
    partition_move_chunk_batches: int = _setting(
        "diskless.partition.move.chunk.batches",
        1000,
        "batches of a moved partition one PartitionAdoptionChunk record stages at the target at most (one apply); a "
        "larger chunk is refused (INVALID_REQUEST)",
    )
    partition_move_return_files: int = _setting(
        "diskless.partition.move.return.files",
        100,
        "loan rows (WAL files borrowed by a move's target, design §5a) the move worker returns to their lenders per "
        "pass at most: each is one FileLoanReturned at its lender and one FileReturned here",
    )
    partition_move_interval_ms: int = _setting(
        "diskless.partition.move.interval.ms",
        1000,
        "how often a coordinator's leader passes over the partitions it has frozen for a move (its move worker); each "
        "pass takes every such move as far as it goes, a chunk at a time",
    )
    partition_move_retry_backoff_ms: int = _setting(
        "diskless.partition.move.retry.backoff.ms",
        200,
        "first wait before a move step that failed (the target's leader away, a chunk made to wait) is tried again; "
        "doubled per failure in a row up to diskless.partition.move.retry.backoff.max.ms",
    )
    partition_move_retry_backoff_max_ms: int = _setting(
        "diskless.partition.move.retry.backoff.max.ms",
        10000,
        "longest wait before a failed move step is tried again",
    )
    partition_move_freeze_tail_batches: int = _setting(
        "diskless.partition.move.freeze.tail.batches",
        1000,
        "a move's catch-up (design §5a) ends, and the partition is frozen (its commits answer NOT_COORDINATOR), once "
        "at most this many of its batches are left to copy to the target: the freeze then covers only that tail; 0 "
        "freezes only once the copy has caught up exactly (or stalled)",
    )
    partition_move_catch_up_rounds: int = _setting(
        "diskless.partition.move.catch.up.rounds",
        20,
        "chunks a move's catch-up sends in a row without the batches left to copy falling below their fewest so far "
        "(commits as fast as the copy); after that many the partition is frozen anyway and the rest copied frozen",
    )
    partition_move_timeout_ms: int = _setting(
        "diskless.partition.move.timeout.ms",
        600000,
        "a move that has made no step for this long is cancelled, only while its target has not adopted it (the "
        "source then serves the partition again); 0 never cancels",
    )
    # Object consolidation (DESIGN §4c).
    replace_batch_max: int = _setting(
        "diskless.coordinator.replace.batch.max",
        10000,
        "batches one ReplaceBatches call may move in one coordinator at most (one apply); an extent past what is left "
        "of it is refused (INVALID_REQUEST): the merge job replaces smaller runs",
    )
    merge_work_files_max: int = _setting(
        "diskless.coordinator.merge.work.files.max",
        100,
        "files one GetFileMergeWorkItem answer names at most (the cap on its max_files)",
    )
    merge_work_batches_max: int = _setting(
        "diskless.coordinator.merge.work.batches.max",
        10000,
        "live batches one GetFileMergeWorkItem answer lists at most, over its files (its first file is whole even "
        "if it holds more)",
    )
    merge_work_file_bytes_max: int = _setting(
        "diskless.coordinator.merge.work.file.bytes.max",
        8388608,
        "GetFileMergeWorkItem's default max_file_size: only files of at most this size are worth merging",
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
    # Object consolidation (`diskless consolidate`, spark/consolidation.py; DESIGN §4c).
    consolidation_min_age_ms: int = _setting(
        "diskless.consolidation.min.age.ms",
        300000,
        "`diskless consolidate` plans only WAL files committed at least this long ago (consumers at the tail read "
        "the newest files; merging them would only race the brokers' next ones)",
    )
    consolidation_target_object_bytes: int = _setting(
        "diskless.consolidation.target.object.bytes",
        64 * 1024 * 1024,
        "`diskless consolidate` writes one object per run of a partition's batches of at most this many bytes "
        "(a batch larger than it is left where it is)",
    )
    consolidation_object_max_batches: int = _setting(
        "diskless.consolidation.object.max.batches",
        200,
        "`diskless consolidate` puts at most this many batches in one object, and so in one ReplaceBatches call "
        "(a longer run of a partition becomes several objects); the coordinator applies a call in one go on its "
        "loop, and commits wait behind it (a 6,250-batch call took up to 3.7 s under load; at 100,000 files, "
        "commit p99 during the job 63.5 ms with 500, 35.2 ms with 200, for 13,000 and 32,000 objects); capped by "
        "diskless.coordinator.replace.batch.max",
    )
    consolidation_replace_group_batches: int = _setting(
        "diskless.consolidation.replace.group.batches",
        0,
        "`diskless consolidate` plans a coordinator's runs that start in the same source file side by side; above "
        "0, a run task sends consecutive calls of one coordinator together while their batches add up to at most "
        "this many (one call at least), and the coordinator commits them in one group, so the source files' rows "
        "and index pages they share are written once (at 100,000 files, 1000: 38% fewer bytes written by the node); "
        "but it applies the group in one go on its loop, and commits wait behind it as behind one call of that many "
        "batches (the same run: commit p99 during the job 63.5 -> 75.9 ms); 0: one call at a time",
    )
    consolidation_max_files: int = _setting(
        "diskless.consolidation.max.files",
        10000,
        "WAL files one `diskless consolidate` run plans per coordinator at most (the oldest first); a rerun "
        "takes the next ones",
    )
    consolidation_job_nice: int = _setting(
        "diskless.consolidation.job.nice",
        19,
        "niceness (0..19) of the processes `diskless consolidate` starts (the Spark JVM and its Python workers): "
        "19, the lowest CPU priority, lets a coordinator node on the same machine keep its CPU while the job runs",
    )
    consolidation_job_cpu_idle: bool = _setting(
        "diskless.consolidation.job.cpu.idle",
        True,
        "whether the processes `diskless consolidate` starts also run under Linux's SCHED_IDLE policy (a core only "
        "when nothing else wants it, as `chrt --idle 0`): a node on the same machine then never waits for the job's "
        "threads to leave a core; on a machine busy for good the job stalls and its watchdog ends it",
    )
    consolidation_replace_duty_percent: int = _setting(
        "diskless.consolidation.replace.duty.percent",
        20,
        "`diskless consolidate` paces its ReplaceBatches calls: after a call that took t, a run task pauses "
        "t * (100 / this - 1) before its next run, so that each task keeps a coordinator's loop busy at most this "
        "share of the time (the record applies there, and commits wait behind it); its planning pages "
        "(GetFileMergeWorkItem) likewise, this share split over the coordinators asked at once; 100: no pause "
        "(1..100)",
    )
    consolidation_task_runs: int = _setting(
        "diskless.consolidation.task.runs",
        8,
        "`diskless consolidate` ships its plan to the executors as data, in Spark tasks of at most this many runs "
        "each (a task's runs travel in the task itself, so the bound keeps every task small)",
    )
    consolidation_task_bytes: int = _setting(
        "diskless.consolidation.task.bytes",
        512 * 1024,
        "`diskless consolidate`: the most bytes of compressed plan one Spark task carries (a single run larger than "
        "this goes alone in its task; a run is never split); under Spark's recommended largest task (1000 KiB)",
    )
    consolidation_stall_timeout_ms: int = _setting(
        "diskless.consolidation.stall.timeout.ms",
        600000,
        "`diskless consolidate` ends with an error when Spark's scheduler is stopped, or when no task of the moving "
        "finished for this long (a scheduler that died leaves the job waiting otherwise); what was committed stays",
    )
    drain_timeout_ms: int = _setting(
        "diskless.shutdown.drain.timeout.ms", 10000, "on SIGTERM, how long in-flight calls may take to finish"
    )
