"""The background workers of the runtime layer: what a coordinator runs whatever its domain, and the node's replica
fetcher. Declared here, below the node's registry (coordinator/node/worker_registry.py), which lists them with the
others in `WORKERS`, because the runtime starts them itself: a coordinator's lifecycle starts its life loop, its
snapshots and its scrub when it loads, and its ISR ticker when it becomes the leader, all on the node's
`WorkerSupervisor` (coordinator/base/workers.py).
"""

from __future__ import annotations

from coordinator.base.workers import Scope, WorkerSpec

COORDINATOR_LIFE = WorkerSpec(
    "coordinator-life", Scope.COORDINATOR, "loads the coordinator, serves it as leader (pipeline) or follower (the "
    "follower's fetch loop), loads it again after a failure or a role change",
    "coordinator.runtime.shard.lifecycle:Lifecycle.live", "reload_backoff_ms",
    # It handles its own failures (loads again with reload.backoff); one that escapes it is a bug that leaves the
    # coordinator FAILED with its pipeline answered: starting the loop again over half-closed files is not safe, so
    # the supervisor counts it and the node's health says NOT_SERVING until the coordinator is reloaded.
    restart=False,
)  # fmt: skip
SNAPSHOTS = WorkerSpec(
    "snapshots", Scope.COORDINATOR, "takes snapshots of the state by log bytes or time, and trims old ones",
    "coordinator.runtime.shard.snapshots:SnapshotScheduler.run", "snapshot_interval_ms",
)  # fmt: skip
SCRUB = WorkerSpec(
    "scrub", Scope.COORDINATOR, "reads and verifies sealed log segments, snapshots and state pages at a bounded rate",
    "coordinator.runtime.shard.scrubber:Scrubber.run", "scrub_interval_ms",
)  # fmt: skip
ISR_TICKER = WorkerSpec(
    "isr-ticker", Scope.LEADER_ONLY, "takes followers not caught up for replica.lag.time.max.ms out of the ISR",
    "coordinator.runtime.replication.leader:LeaderReplication.run_isr_ticks", "replica_lag_time_max_ms",
)  # fmt: skip
REPLICA_FETCHER = WorkerSpec(
    "replica-fetcher", Scope.NODE, "fetches every coordinator followed here from each leader node in one FetchLogs",
    # Its fetch sessions, one per leader node, are its own children (in a TaskGroup its `run` holds): one that
    # raises ends the fetcher, which the supervisor counts and starts again, every session anew.
    "coordinator.runtime.replication.fetcher:ReplicaFetcher.run", "replica_fetch_wait_max_ms",
)  # fmt: skip
RUNTIME_WORKERS = (COORDINATOR_LIFE, SNAPSHOTS, SCRUB, ISR_TICKER, REPLICA_FETCHER)
