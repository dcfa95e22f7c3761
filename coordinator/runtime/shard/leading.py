"""What a coordinator serves with for one load: as leader, its pipeline and, in a cluster, its leader replication
(the leader epoch etcd gave, ISR changes through the cluster link by compare-and-set in etcd, damage met reading its
own log for a follower reported to the shard); as follower, its fetching of the leader's log."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from concurrent.futures import Executor

from coordinator.base.clock import Clock
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.runtime.ports import TopicRecordsApplied
from coordinator.runtime.replication.follower import Follower, NodeFetcher
from coordinator.runtime.replication.leader import LeaderReplication
from coordinator.runtime.replication.link import ClusterLink
from coordinator.runtime.replication.role import ReplicaRole
from coordinator.runtime.shard.append_ticks import AppendTicks
from coordinator.runtime.shard.loading import Loaded
from coordinator.runtime.shard.pipeline import Pipeline


def leading(
    role: ReplicaRole | None,
    link: ClusterLink | None,
    settings: Settings,
    clock: Clock,
    metrics: Metrics,
    loaded: Loaded,
    executor: Executor,
    on_flushed: Callable[[], None],
    on_topic_records: TopicRecordsApplied | None,
    report_damage: Callable[[Exception], None],
    ticks: AppendTicks | None,
) -> tuple[LeaderReplication | None, Pipeline]:
    """The leader replication (None alone, `role` None) and the pipeline that writes through it."""
    leader = None
    if role is not None:
        assert link is not None, "a role comes from a cluster, which gives a link"
        leader = leader_replication(role, link, settings, clock, loaded, executor, report_damage)
    pipeline = Pipeline(
        loaded.store.coordinator_id, settings, clock, metrics, loaded.metadata_log, loaded.store, loaded.view,
        loaded.end_offset, executor, on_flushed, on_topic_records, leader, loaded.unapplied, ticks,
    )  # fmt: skip
    return leader, pipeline


def leader_replication(
    role: ReplicaRole,
    link: ClusterLink,
    settings: Settings,
    clock: Clock,
    loaded: Loaded,
    executor: Executor,
    report_damage: Callable[[Exception], None],
) -> LeaderReplication:
    """Its ISR ticker (`run_isr_ticks`) is the lifecycle's to start, on the node's worker supervisor."""
    coordinator_id, epoch = loaded.store.coordinator_id, role.leader_epoch

    async def alter_isr(isr: tuple[int, ...], joined: Mapping[int, str]) -> tuple[int, ...] | None:
        return await link.alter_isr(coordinator_id, epoch, isr, joined)

    leader = LeaderReplication(
        coordinator_id, role, settings, clock, loaded.metadata_log, loaded.epoch_cache, executor,
        loaded.store.applied_offset, link.session_valid, alter_isr, report_damage,
    )  # fmt: skip
    return leader


def following(
    role: ReplicaRole,
    link: ClusterLink,
    settings: Settings,
    clock: Clock,
    metrics: Metrics,
    loaded: Loaded,
    executor: Executor,
    on_appended: Callable[[], None],
    on_topic_records: TopicRecordsApplied | None,
    fetcher: NodeFetcher | None,
) -> Follower:
    """The follower of one leadership, fetching through the node's fetcher (or alone without one)."""
    coordinator_id = loaded.store.coordinator_id

    def observe_fetch(seconds: float, returned_frames: bool) -> None:
        outcome = "frames" if returned_frames else "none"
        metrics.replica_fetch.labels(str(coordinator_id), outcome).observe(seconds)

    return Follower(
        coordinator_id, role, settings, clock, loaded.metadata_log, loaded.epoch_cache, loaded.store, loaded.view,
        loaded.unapplied, executor, link.internal_stub, on_appended, on_topic_records, observe_fetch,
        link.peer_unreachable, fetcher,
    )  # fmt: skip


async def tell_once_applied(pipeline: Pipeline, current: Callable[[], bool], tell: Callable[[], None]) -> None:
    """Tells the state's listeners (the readers' board) once a new leader applied its elected log, if the pipeline
    is still the coordinator's (`current`)."""
    with contextlib.suppress(Exception):  # the pipeline closed first: the next load publishes its own state
        await pipeline.wait_applied(pipeline.read_floor)
        if current():
            tell()
