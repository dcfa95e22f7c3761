"""The typed seam between router and shard: operations, the pipeline behind its log Protocol, the read API.

The pipeline runs here over an in-memory log and state (the Protocols of
coordinator.runtime.ports), as a replicated log will stand in later; then a
real node shows the catalog following applied records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from coordinator.base.clock import SystemClock
from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.base.metrics import Metrics
from coordinator.base.result import Result
from coordinator.config.settings import Settings
from coordinator.machine import records
from coordinator.machine.view import CoordinatorView
from coordinator.node.node import Node
from coordinator.runtime.ports import AppliedFrame
from coordinator.runtime.shard import Operation, ShardState
from coordinator.runtime.shard.pipeline import Pipeline
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec

TOPIC = bytes(range(1, 17))


def echo_time(view: CoordinatorView, request: str, now_ms: int) -> Result[tuple[str, int]]:
    return Result([], (request, now_ms))


def test_an_operation_uses_the_call_wide_time_when_it_has_one() -> None:
    view = CoordinatorView(0, lambda key: None)
    assert Operation(echo_time, "a").run(view, 5).response == ("a", 5)
    assert Operation(echo_time, "b", now_ms=9).run(view, 5).response == ("b", 9)


# ---------------------------------------------------------------- the pipeline over in-memory ports


class MemoryLog:
    """A LogAppender that keeps frames in memory; `fail` makes the next append raise."""

    def __init__(self) -> None:
        self.appends: list[tuple[int, int]] = []  # (end offset, epoch)
        self.fail = False

    def append(self, frames: bytes, end_offset: int, last_epoch: int) -> None:
        if self.fail:
            raise OSError("disk gone")
        self.appends.append((end_offset, last_epoch))


class MemoryState:
    """An AppliedState that keeps applied records in memory."""

    def __init__(self) -> None:
        self.frames: list[AppliedFrame] = []

    @property
    def applied_offset(self) -> int:
        return self.frames[-1][0] if self.frames else 0

    def apply(self, frames: Sequence[AppliedFrame]) -> None:
        self.frames.extend(frames)


async def run_pipeline(
    metadata_log: MemoryLog, state: MemoryState, events: list[str]
) -> tuple[BaseException | None, Pipeline]:
    """Runs one CreatePartitions through a pipeline, as the lifecycle would; returns its answer or error."""

    def topic_records(coordinator_id: int, applied: Sequence[rec.MetadataRecord]) -> None:
        events.append(f"reported {[r.WhichOneof('record') for r in applied]} of {coordinator_id}")

    with ThreadPoolExecutor(max_workers=1) as executor:
        pipeline = Pipeline(
            3,
            Settings(),
            SystemClock(),
            Metrics(),
            metadata_log,
            state,
            CoordinatorView(3, lambda key: None),
            0,
            executor,
            lambda: events.append("flushed"),
            topic_records,
        )
        running = asyncio.create_task(pipeline.run())
        create = Operation(
            partition_checks.check_create_partitions, partition_checks.CreatePartitions(TOPIC, "orders", (0, 1))
        )
        future = pipeline.submit(create, may_linger=False)
        future.add_done_callback(lambda _: events.append("answered"))
        await asyncio.wait({future, running}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if running.done():  # the pipeline failed: the lifecycle answers everything waiting
            failure = running.result()
            assert failure is not None
            await pipeline.fail_everything(CoordinatorUnavailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(failure)))
        else:
            pipeline.close()
            assert await asyncio.wait_for(running, 10) is None
        assert future.done()
        return future.exception(), pipeline


def test_the_pipeline_appends_applies_reports_then_answers() -> None:
    metadata_log, state, events = MemoryLog(), MemoryState(), []
    error, pipeline = asyncio.run(run_pipeline(metadata_log, state, events))
    assert error is None
    assert metadata_log.appends == [(2, 0)]
    assert [(end, [r.WhichOneof("record") for r in frame]) for end, frame in state.frames] == [
        (2, ["partition_created", "partition_created"])
    ]
    assert events == ["flushed", "reported ['partition_created', 'partition_created'] of 3", "answered"]
    assert pipeline.statistics().applied_offset == pipeline.speculative_end_offset == 2


def test_a_failed_append_answers_the_operation_unavailable_and_reports_nothing() -> None:
    metadata_log, state, events = MemoryLog(), MemoryState(), []
    metadata_log.fail = True
    error, _ = asyncio.run(run_pipeline(metadata_log, state, events))
    assert isinstance(error, CoordinatorUnavailable)
    assert error.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "disk gone" in error.message
    assert state.frames == [] and events == ["answered"]


# ---------------------------------------------------------------- a node: the catalog follows applied records


def test_the_catalog_follows_created_and_deleted_partitions_and_is_rebuilt_on_load(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, coordinators=2)

    async def first_life() -> None:
        node = Node(settings)
        assert await node.load()
        try:
            topic = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC, name="orders", num_partitions=3)
            created = await node.router.create_partitions(pb.CreatePartitionsRequest(topics=[topic]))
            assert created.topics[0].error_code == pb.NONE
            # Reported by the coordinators before they answered: no patching by the router.
            holders = {p: node.catalog.coordinator_of(TOPIC, p) for p in range(3)}
            assert None not in holders.values()
            for partition, coordinator_id in holders.items():
                assert coordinator_id is not None
                shard = node.shards[coordinator_id]
                assert (TOPIC, "orders", partition) in shard.partitions()
                assert shard.leader_epoch == 1
            other = pb.CreatePartitionsRequest.Topic(topic_id=bytes(range(2, 18)), name="gone", num_partitions=2)
            await node.router.create_partitions(pb.CreatePartitionsRequest(topics=[other]))
            deleted = await node.router.delete_topics(pb.DeleteTopicsRequest(topic_ids=[other.topic_id]))
            assert deleted.topics[0].error_code == pb.NONE
            assert node.catalog.topic(other.topic_id) is None and node.catalog.topic_id_of("gone") is None
            with node.shards[0].read_transaction() as db:
                assert db.execute("SELECT count(*) FROM partitions").fetchall()[0][0] == sum(
                    1 for c in holders.values() if c == 0
                )
        finally:
            await node.close()

    async def second_life() -> None:
        node = Node(settings)
        assert await node.load()
        try:
            assert all(shard.state is ShardState.ACTIVE for shard in node.shards)
            entry = node.catalog.topic(TOPIC)
            assert entry is not None and sorted(entry.partitions) == [0, 1, 2]
            assert node.catalog.topic_id_of("gone") is None
            assert node.shards[0].leader_epoch == 2
        finally:
            await node.close()

    asyncio.run(first_life())
    asyncio.run(second_life())


def test_records_of_other_kinds_leave_the_catalog_alone() -> None:
    from coordinator.machine.catalog import TopicCatalog

    catalog = TopicCatalog()
    catalog.apply_records(0, [records.leader_change(1, 0), records.records_deleted(0, 5)])
    assert catalog.topic(TOPIC) is None
