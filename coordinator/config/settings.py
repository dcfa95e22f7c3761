"""Settings: Kafka-style names, from defaults < properties file < environment < flags.

Every bound of the service is a named setting here, declared in groups: the node's own
(`node_settings.py`), its files' (`storage_settings.py`) and the cluster's (below), gathered in one
`Settings`. Where they are read from is
`coordinator.config.loading`; the rules they must keep, `coordinator.config.rules`.
An environment variable overrides a property by the name upper-cased with
dots as underscores (`diskless.coordinator.queue.max.operations` is
`DISKLESS_COORDINATOR_QUEUE_MAX_OPERATIONS`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.config.fields import STATE_VERIFY_MODES
from coordinator.config.fields import setting as _setting
from coordinator.config.storage_settings import StorageSettings

__all__ = ["STATE_VERIFY_MODES", "Settings", "SettingsError", "describe_settings", "property_name"]


class SettingsError(ValueError):
    """A setting has a nonsense value; the message names it."""


# Settings a release removed, with what took their place. A properties file written for an earlier release still
# starts the node (as Kafka warns about a configuration it no longer knows rather than refusing it): the value is
# ignored with one warning naming the replacement. A name never known is still refused (a typo would otherwise
# silently keep a default).
RETIRED_SETTINGS: Mapping[str, str] = {
    "diskless.coordinator.snapshot.retry.backoff.max.ms": (
        "a failed snapshot is now restarted by the node's worker supervisor, with "
        "diskless.server.worker.restart.backoff.ms .. diskless.server.worker.restart.backoff.max.ms"
    ),
}
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Settings(StorageSettings):
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
    node_incarnation_mark_interval_ms: int = _setting(
        "diskless.node.incarnation.mark.interval.ms",
        5000,
        "how often the node moves its data directory's mark on (an fsync and an etcd write): a copy of the directory "
        "restored later is a new replica if the mark moved on after the copy was taken",
    )
    cluster_refresh_interval_ms: int = _setting(
        "diskless.cluster.refresh.interval.ms",
        200,
        "how often the node reads the coordinators' leaders and ISRs from etcd and elects where one is gone",
    )
    peer_death_probe_enable: bool = _setting(
        "diskless.cluster.peer.death.probe.enable",
        True,
        "a follower whose fetch finds its leader's node unreachable probes the node's port; refused twice (the "
        "process is gone: kill -9 closes its port, a partition or a stall refuses nothing), it revokes the node's "
        "etcd lease so that the coordinators it led elect at once instead of after the session timeout",
    )
    peer_death_probe_interval_ms: int = _setting(
        "diskless.cluster.peer.death.probe.interval.ms",
        100,
        "the wait between the two refused connects that confirm a node's death, and between two probes of one node",
    )
    peer_death_probe_timeout_ms: int = _setting(
        "diskless.cluster.peer.death.probe.timeout.ms",
        500,
        "how long one probe's connect may take; one that does not end by then is no refusal (the node is kept)",
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
    replica_fetch_response_max_bytes: int = _setting(
        "diskless.coordinator.replica.fetch.response.max.bytes",
        8 * 1024 * 1024,
        "log bytes one node-to-node fetch may carry for all the coordinators it fetches together (at most half the "
        "request size bound; each coordinator's part also at most replica.fetch.max.bytes)",
    )
    replica_fetch_wait_max_ms: int = _setting(
        "diskless.coordinator.replica.fetch.wait.max.ms",
        500,
        "how long the leader holds a follower's fetch when there is nothing new (long poll)",
    )
    replica_fetch_linger_ms: int = _setting(
        "diskless.coordinator.replica.fetch.linger.ms",
        5,
        "how long a leader node holds a follower node's answer for the writes it began before answering (the same "
        "append tick's other coordinators) so that they go in that answer, not the next (0: never)",
    )
    replica_fetch_stream_enable: bool = _setting(
        "diskless.coordinator.replica.fetch.stream.enable",
        True,
        "a follower node fetches from each leader node over one open stream (FetchLogsStream), one message per "
        "round, instead of a FetchLogs call per round (false: calls, as before)",
    )
    replica_apply_linger_ms: int = _setting(
        "diskless.coordinator.replica.apply.linger.ms",
        50,
        "how long a follower may hold fetched records below the high watermark before applying them to its state, "
        "so that the rounds fetched meanwhile go in the same SQLite transaction (follower reads are that much "
        "staler while fetches bring frames; an answer without frames applies at once; 0: every round applies)",
    )
    replica_apply_max_records: int = _setting(
        "diskless.coordinator.replica.apply.max.records",
        10000,
        "log records below the high watermark past which a follower applies at once, whatever its apply linger",
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
            if spec is None and name in RETIRED_SETTINGS:
                _log.warning("setting %r is no longer used and is ignored: %s", name, RETIRED_SETTINGS[name])
                continue
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
