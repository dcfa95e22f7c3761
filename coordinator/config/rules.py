"""The rules a node's settings must keep (checked at start-up), each refusal naming the setting it is about."""

from __future__ import annotations

import re

from coordinator.config.settings import STATE_VERIFY_MODES, Settings, SettingsError, property_name

READ_PROCESSES_MAX = 64  # each reader holds one connection per coordinator and its own gRPC server
NODE_PROCESSES_MAX = 64  # commit processes of one node: one per core is the point
# The most coordinators a node or cluster may have, at formation or after `diskless coordinators add`.
COORDINATORS_MAX = 4096
# Producers in one expiry record: a step of the pass holds its coordinator's loop a few milliseconds per thousand.
PRODUCER_EXPIRATION_BATCH_MAX = 100_000


def validated(settings: Settings) -> Settings:
    """The settings, once every rule holds; else SettingsError naming the first bad setting."""
    check(settings)
    return settings


def check(settings: Settings) -> None:
    """Raises SettingsError naming the first bad setting."""
    positive = (
        "coordinators", "queue_max_operations", "max_concurrent_rpcs", "group_commit_max_operations",
        "commit_max_batches", "request_max_bytes", "request_timeout_ms", "request_timeout_max_ms",
        "topic_partitions_max",
        "find_batches_max_results", "request_max_items", "log_segment_bytes", "replay_batch_operations",
        "state_cache_bytes", "file_keys_page_max_keys", "file_keys_streams_max", "file_keys_stream_max_ms",
    )  # fmt: skip
    for attr in positive:
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    if settings.coordinators > COORDINATORS_MAX:
        raise SettingsError(
            f"{property_name('coordinators')} must be <= {COORDINATORS_MAX}, got {settings.coordinators}"
        )
    switch_us = settings.thread_switch_interval_us
    if not 100 <= switch_us <= 100_000:
        raise SettingsError(f"{property_name('thread_switch_interval_us')} must be 100..100000, got {switch_us}")
    if settings.node_id < 0:
        raise SettingsError(f"{property_name('node_id')} must be >= 0, got {settings.node_id}")
    if not 0 <= settings.append_linger_ms <= 1000:
        raise SettingsError(f"{property_name('append_linger_ms')} must be 0..1000, got {settings.append_linger_ms}")
    for attr in ("max_pending_calls", "max_pending_ms"):
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    for attr in ("max_inflight_request_bytes", "max_inflight_response_bytes", "min_remaining_deadline_ms"):
        if getattr(settings, attr) < 0:
            raise SettingsError(f"{property_name(attr)} must be >= 0 (0: off), got {getattr(settings, attr)}")
    if settings.state_checkpoint_pages < 0:
        raise SettingsError(
            f"{property_name('state_checkpoint_pages')} must be >= 0 (0: SQLite's own checkpoint), "
            f"got {settings.state_checkpoint_pages}"
        )
    if settings.stream_window_bytes != 0 and not 65535 <= settings.stream_window_bytes < 2**31:
        raise SettingsError(
            f"{property_name('stream_window_bytes')} must be 0 (gRPC's default) or 65535..2^31-1, "
            f"got {settings.stream_window_bytes}"
        )
    if not 1 <= settings.node_processes <= min(NODE_PROCESSES_MAX, settings.coordinators):
        raise SettingsError(
            f"{property_name('node_processes')} must be 1..{min(NODE_PROCESSES_MAX, settings.coordinators)} (at most "
            f"one per coordinator), got {settings.node_processes}"
        )
    if settings.node_processes > 1 and settings.clustered:
        raise SettingsError(f"{property_name('node_processes')} must be 1 for a node of a cluster (--etcd)")
    if not 0 <= settings.read_processes <= READ_PROCESSES_MAX:
        raise SettingsError(
            f"{property_name('read_processes')} must be 0..{READ_PROCESSES_MAX}, got {settings.read_processes}"
        )
    if settings.read_process_start_timeout_ms <= 0:
        raise SettingsError(f"{property_name('read_process_start_timeout_ms')} must be > 0")
    if not 0 < settings.read_process_restart_backoff_ms <= settings.read_process_restart_backoff_max_ms:
        raise SettingsError(
            f"{property_name('read_process_restart_backoff_ms')} must be > 0 and <= "
            f"{property_name('read_process_restart_backoff_max_ms')}, got {settings.read_process_restart_backoff_ms} "
            f"and {settings.read_process_restart_backoff_max_ms}"
        )
    if not 0 < settings.worker_restart_backoff_ms <= settings.worker_restart_backoff_max_ms:
        raise SettingsError(
            f"{property_name('worker_restart_backoff_ms')} must be > 0 and <= "
            f"{property_name('worker_restart_backoff_max_ms')}, got {settings.worker_restart_backoff_ms} "
            f"and {settings.worker_restart_backoff_max_ms}"
        )
    for attr in ("worker_failures_window_ms", "worker_failures_max"):
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    for attr in ("log_retention_ms", "log_retention_bytes"):  # Kafka's: -1 (no limit) or more
        if getattr(settings, attr) < -1:
            raise SettingsError(f"{property_name(attr)} must be >= -1 (-1: no limit), got {getattr(settings, attr)}")
    if settings.acl_reload_interval_ms < 0:
        raise SettingsError(f"{property_name('acl_reload_interval_ms')} must be >= 0")
    if settings.log_format not in ("text", "json"):
        raise SettingsError(f"{property_name('log_format')} must be text or json, got {settings.log_format!r}")
    if settings.metrics_listen:
        metrics_host, _, metrics_port = settings.metrics_listen.rpartition(":")
        if not metrics_host or not metrics_port.isdigit() or int(metrics_port) > 65535:
            raise SettingsError(f"{property_name('metrics_listen')} must be HOST:PORT, got {settings.metrics_listen!r}")
    if not 0 < settings.reload_backoff_ms <= settings.reload_backoff_max_ms:
        raise SettingsError(
            f"{property_name('reload_backoff_ms')} must be > 0 and <= {property_name('reload_backoff_max_ms')}, "
            f"got {settings.reload_backoff_ms} and {settings.reload_backoff_max_ms}"
        )
    if settings.state_verify_on_load not in STATE_VERIFY_MODES:
        raise SettingsError(
            f"{property_name('state_verify_on_load')} must be one of {', '.join(STATE_VERIFY_MODES)}, "
            f"got {settings.state_verify_on_load!r}"
        )
    _snapshots(settings)
    _storage(settings)
    _files(settings)
    _producers(settings)
    _replication(settings)
    if settings.drain_timeout_ms < 0:
        raise SettingsError(f"{property_name('drain_timeout_ms')} must be >= 0")
    if settings.log_segment_bytes < 1024:
        raise SettingsError(f"{property_name('log_segment_bytes')} must be >= 1024, got {settings.log_segment_bytes}")
    if settings.request_timeout_ms > settings.request_timeout_max_ms:
        raise SettingsError(
            f"{property_name('request_timeout_ms')} ({settings.request_timeout_ms}) must be <= "
            f"{property_name('request_timeout_max_ms')} ({settings.request_timeout_max_ms})"
        )
    host, _, port = settings.listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise SettingsError(f"{property_name('listen')} must be HOST:PORT, got {settings.listen!r}")


def _replication(settings: Settings) -> None:
    for attr in (
        "replication_factor", "min_insync_replicas", "replica_lag_time_max_ms", "node_heartbeat_interval_ms",
        "cluster_refresh_interval_ms", "replica_fetch_wait_max_ms", "replica_fetch_backoff_ms",
        "etcd_request_timeout_ms", "replica_buffer_bytes", "replica_socket_timeout_ms",
        "leader_imbalance_check_interval_ms", "node_incarnation_mark_interval_ms", "peer_death_probe_interval_ms",
        "peer_death_probe_timeout_ms",
    ):  # fmt: skip
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    if settings.min_insync_replicas > settings.replication_factor:
        raise SettingsError(
            f"{property_name('min_insync_replicas')} ({settings.min_insync_replicas}) must be <= "
            f"{property_name('replication_factor')} ({settings.replication_factor})"
        )
    if settings.node_session_timeout_ms < 1000 or settings.node_session_timeout_ms % 1000:
        raise SettingsError(
            f"{property_name('node_session_timeout_ms')} must be whole seconds >= 1000 (an etcd lease TTL), "
            f"got {settings.node_session_timeout_ms}"
        )
    if settings.node_heartbeat_interval_ms * 2 > settings.node_session_timeout_ms:
        raise SettingsError(
            f"{property_name('node_heartbeat_interval_ms')} ({settings.node_heartbeat_interval_ms}) must be at most "
            f"half of {property_name('node_session_timeout_ms')} ({settings.node_session_timeout_ms})"
        )
    if settings.replica_fetch_wait_max_ms >= settings.replica_lag_time_max_ms:
        raise SettingsError(
            f"{property_name('replica_fetch_wait_max_ms')} ({settings.replica_fetch_wait_max_ms}) must be below "
            f"{property_name('replica_lag_time_max_ms')} ({settings.replica_lag_time_max_ms})"
        )
    if settings.replica_socket_timeout_ms <= settings.replica_fetch_wait_max_ms:
        raise SettingsError(
            f"{property_name('replica_socket_timeout_ms')} ({settings.replica_socket_timeout_ms}) must be above "
            f"{property_name('replica_fetch_wait_max_ms')} ({settings.replica_fetch_wait_max_ms})"
        )
    if not 0 <= settings.replica_fetch_linger_ms < settings.replica_fetch_wait_max_ms:
        raise SettingsError(
            f"{property_name('replica_fetch_linger_ms')} must be >= 0 and below "
            f"{property_name('replica_fetch_wait_max_ms')}, got {settings.replica_fetch_linger_ms}"
        )
    if not 0 <= settings.replica_apply_linger_ms < settings.replica_lag_time_max_ms:
        raise SettingsError(
            f"{property_name('replica_apply_linger_ms')} must be >= 0 and below "
            f"{property_name('replica_lag_time_max_ms')}, got {settings.replica_apply_linger_ms}"
        )
    if settings.replica_apply_max_records < 1:
        raise SettingsError(f"{property_name('replica_apply_max_records')} must be >= 1")
    if settings.replica_fetch_max_bytes < 1024:
        raise SettingsError(f"{property_name('replica_fetch_max_bytes')} must be >= 1024")
    if settings.replica_fetch_response_max_bytes < 1024:
        raise SettingsError(f"{property_name('replica_fetch_response_max_bytes')} must be >= 1024")
    if settings.advertise:
        host, _, port = settings.advertise.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingsError(f"{property_name('advertise')} must be HOST:PORT, got {settings.advertise!r}")


def _storage(settings: Settings) -> None:
    if settings.storage_backend not in ("local", "s3"):
        raise SettingsError(f"{property_name('storage_backend')} must be local or s3, got {settings.storage_backend!r}")
    if settings.storage_backend == "s3" and not settings.storage_s3_bucket:
        raise SettingsError(f"{property_name('storage_s3_bucket')} must be set when the backend is s3")
    if settings.storage_request_timeout_ms <= 0:
        raise SettingsError(f"{property_name('storage_request_timeout_ms')} must be > 0")


def _files(settings: Settings) -> None:
    for attr in (
        "file_worker_interval_ms", "file_worker_max_files", "file_retry_backoff_ms", "topic_purge_batch_max",
        "topic_purge_interval_ms", "retention_check_interval_ms", "retention_batch_max", "remote_segment_batch_max",
        "switch_producers_max", "partition_move_chunk_batches", "partition_move_return_files",
        "partition_move_interval_ms", "partition_move_retry_backoff_ms", "partition_move_catch_up_rounds",
        "replace_batch_max", "merge_work_files_max", "merge_work_batches_max", "merge_work_file_bytes_max",
        "file_worker_step_files", "known_files_step_lookups",
    ):  # fmt: skip
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    for attr in (
        "file_deletion_grace_period_ms", "file_handover_probe_delay_ms", "orphan_scan_grace_period_ms",
        "partition_move_timeout_ms", "partition_move_freeze_tail_batches",
    ):  # fmt: skip
        if getattr(settings, attr) < 0:
            raise SettingsError(f"{property_name(attr)} must be >= 0, got {getattr(settings, attr)}")
    if settings.file_worker_max_files > 1000:  # one S3 DeleteObjects call takes at most 1,000 keys
        raise SettingsError(f"{property_name('file_worker_max_files')} must be <= 1000")
    if settings.partition_move_retry_backoff_max_ms < settings.partition_move_retry_backoff_ms:
        raise SettingsError(
            f"{property_name('partition_move_retry_backoff_max_ms')} must be >= "
            f"{property_name('partition_move_retry_backoff_ms')}"
        )
    if settings.file_worker_step_files > settings.file_worker_max_files:
        raise SettingsError(
            f"{property_name('file_worker_step_files')} must be <= {property_name('file_worker_max_files')}"
        )
    if not 1 <= settings.file_worker_duty_percent <= 100:
        raise SettingsError(f"{property_name('file_worker_duty_percent')} must be 1..100")
    if settings.file_retry_backoff_max_ms < settings.file_retry_backoff_ms:
        raise SettingsError(
            f"{property_name('file_retry_backoff_max_ms')} must be >= {property_name('file_retry_backoff_ms')}"
        )
    if settings.orphan_scan_interval_ms <= 0:
        raise SettingsError(f"{property_name('orphan_scan_interval_ms')} must be > 0")
    if settings.consolidation_min_age_ms < 0:
        raise SettingsError(f"{property_name('consolidation_min_age_ms')} must be >= 0")
    for attr in (
        "consolidation_target_object_bytes",
        "consolidation_max_files",
        "consolidation_object_max_batches",
        "consolidation_task_runs",
        "consolidation_task_bytes",
        "consolidation_stall_timeout_ms",
    ):
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    if not 0 <= settings.consolidation_job_nice <= 19:  # Linux's range of niceness a process may take
        raise SettingsError(f"{property_name('consolidation_job_nice')} must be 0..19")
    if not 1 <= settings.consolidation_replace_duty_percent <= 100:
        raise SettingsError(f"{property_name('consolidation_replace_duty_percent')} must be 1..100")
    if not 0 <= settings.orphan_scan_max_orphan_percent <= 100:
        raise SettingsError(f"{property_name('orphan_scan_max_orphan_percent')} must be 0..100")
    try:
        re.compile(settings.orphan_scan_key_pattern)
    except re.error as error:
        raise SettingsError(
            f"{property_name('orphan_scan_key_pattern')} is not a regular expression: {error}"
        ) from None


def _producers(settings: Settings) -> None:
    for attr in (
        "producer_id_expiration_ms", "producer_id_expiration_check_interval_ms", "producer_id_expiration_batch_max",
    ):  # fmt: skip
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    if settings.producer_id_expiration_batch_max > PRODUCER_EXPIRATION_BATCH_MAX:
        raise SettingsError(
            f"{property_name('producer_id_expiration_batch_max')} must be <= {PRODUCER_EXPIRATION_BATCH_MAX}, "
            f"got {settings.producer_id_expiration_batch_max}"
        )


def _snapshots(settings: Settings) -> None:
    for attr in ("snapshot_retained_count", "snapshot_copy_step_pages", "snapshot_retry_backoff_ms",
                 "damaged_retained_count"):  # fmt: skip
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    for attr in ("scrub_interval_ms", "scrub_step_bytes"):
        if getattr(settings, attr) <= 0:
            raise SettingsError(f"{property_name(attr)} must be > 0, got {getattr(settings, attr)}")
    for attr in ("snapshot_interval_bytes", "snapshot_interval_ms", "snapshot_copy_max_bytes_per_second",
                 "scrub_bytes_per_second"):  # fmt: skip
        if getattr(settings, attr) < 0:
            raise SettingsError(f"{property_name(attr)} must be >= 0 (0: off), got {getattr(settings, attr)}")
    if 0 < settings.snapshot_interval_bytes < settings.log_segment_bytes:
        raise SettingsError(
            f"{property_name('snapshot_interval_bytes')} ({settings.snapshot_interval_bytes}) must be 0 or >= "
            f"{property_name('log_segment_bytes')} ({settings.log_segment_bytes})"
        )
