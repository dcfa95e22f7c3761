"""Retention (DESIGN §4a): each coordinator's leader removes expired batches from the log start, in bounded steps.

Through the real gRPC socket on an in-process node whose clock the test moves: every
`diskless.coordinator.retention.check.interval.ms` of that clock a pass removes whole batches from each partition's
log start while they are expired by `retention.ms` (effective timestamp) or `retention.bytes`, stopping at the first
kept; FindBatches and ListOffsets(-2) see the new log start, commits go on from the high watermark, emptied files go
on to deletion, and a restart or a replay of the log gives the same state. The pure choice of a step is checked
against a model of Kafka's rounds with hypothesis.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.machine.state import reads
from coordinator.machine.view import CoordinatorView, PartitionView
from coordinator.node.gauges import coordinator_gauges
from coordinator.node.worker_registry import RETENTION
from coordinator.runtime.operation import Operation
from coordinator.topics.retention import (
    LogStartMove,
    RetentionOutcome,
    RetentionStep,
    StoredBatch,
    check_retention,
    select_retention,
)
from coordinator.topics.retention_worker import RetentionWorker
from coordinator.topics.topic_configs import ConfigDefaults, effective_configs
from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    assert_state_equals_log_rebuild,
    batch,
    coordinator_of,
    describe_file,
    fetch,
    list_offset,
    topic_name,
)
from tests.in_process import InProcessNode
from tests.lanes import sized

INTERVAL_MS = 60_000
BATCH_MAX = 3
RETENTION_MS = 100_000
HOUR_MS = 3_600_000


@pytest.fixture
def node(tmp_path: Path) -> Iterator[InProcessNode]:
    node = InProcessNode(
        tmp_path / "data",
        coordinators=2,
        settings={
            "diskless.coordinator.retention.check.interval.ms": str(INTERVAL_MS),
            "diskless.coordinator.retention.batch.max": str(BATCH_MAX),
        },
    ).start()
    yield node
    if node.is_running():
        node.stop()


def create(broker: Broker, partitions: int, **configs: str) -> bytes:
    topic_id = uuid.uuid4().bytes
    given = [pb.TopicConfig(name=name.replace("_", "."), value=value) for name, value in configs.items()]
    topic = pb.CreatePartitionsRequest.Topic(
        topic_id=topic_id, name=topic_name("ret"), num_partitions=partitions, configs=given
    )
    assert broker.stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[topic])).topics[0].error_code == pb.NONE
    return topic_id


def commit_one(broker: Broker, topic_id: bytes, timestamp: int, **fields: int) -> tuple[str, int]:
    """One batch in a file of its own: (the file's key, the batch's base offset)."""
    key = f"wal/{uuid.uuid4()}"
    (result,) = broker.commit([batch(topic_id, 0, max_timestamp=timestamp, **fields)], object_key=key).batches
    assert result.error_code == pb.NONE, result
    return key, result.assigned_base_offset


def counter(node: InProcessNode, name: str, coordinator_id: int) -> float:
    value = node.node.metrics.registry.get_sample_value(f"{name}_total", {"coordinator": str(coordinator_id)})
    return value or 0.0


def pass_age_s(node: InProcessNode, coordinator_id: int) -> float:
    for found, _, _, labels, value in node.loop.call(lambda: list(coordinator_gauges(node.node))):
        if found == "diskless_coordinator_retention_pass_age_seconds" and labels["coordinator"] == str(coordinator_id):
            return value
    raise AssertionError(f"no retention pass age for coordinator {coordinator_id}")


def offsets(node: InProcessNode, topic_id: bytes) -> tuple[int, int]:
    """(log start, high watermark) by ListOffsets -2 and -1."""
    return list_offset(node.stub, topic_id, 0, -2).offset, list_offset(node.stub, topic_id, 0, -1).offset


def test_a_pass_takes_at_most_the_bound_per_step(node: InProcessNode, monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker's own bound (diskless.coordinator.retention.batch.max), not only select_retention's: seven expired
    # batches of one partition leave in steps of 3, 3 and 1, each its own operation, and commits run between them.
    broker = Broker(node.stub, node.coordinators)
    topic = create(broker, 1, retention_ms=str(RETENTION_MS))
    owner = coordinator_of(node.stub, topic, 0)
    for _ in range(7):
        commit_one(broker, topic, node.clock.now_ms() - 2 * RETENTION_MS)
    worker = node.node.running_workers(RETENTION.name)[owner]
    assert isinstance(worker, RetentionWorker)
    assert worker.coordinator_id == owner
    submitted: list[int] = []
    submit = worker._submit

    async def counting(operation: Operation[RetentionStep, RetentionOutcome], what: str) -> RetentionOutcome:
        submitted.append(sum(move.batches for move in operation.request.moves))
        return await submit(operation, what)

    monkeypatch.setattr(worker, "_submit", counting)
    done = node.loop.run(worker.run_pass())  # the clock stands still: no periodic pass runs meanwhile
    assert submitted == [BATCH_MAX, BATCH_MAX, 1]
    assert (done.steps, done.batches) == (3, 7)
    assert offsets(node, topic) == (7, 7)


def test_a_step_the_view_refuses_is_not_taken_again_in_the_pass(
    node: InProcessNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A step cut inside a partition (its budget spent) that the check refuses (the view moved meanwhile) resumes
    # past that partition: the pass ends instead of choosing the same refused step again and again.
    broker = Broker(node.stub, node.coordinators)
    topic = create(broker, 1, retention_ms=str(RETENTION_MS))
    owner = coordinator_of(node.stub, topic, 0)
    for _ in range(2 * BATCH_MAX):
        commit_one(broker, topic, node.clock.now_ms() - 2 * RETENTION_MS)
    worker = node.node.running_workers(RETENTION.name)[owner]
    assert isinstance(worker, RetentionWorker)
    steps: list[RetentionStep] = []

    async def refused(operation: Operation[RetentionStep, RetentionOutcome], what: str) -> RetentionOutcome:
        steps.append(operation.request)
        return RetentionOutcome(frozenset(), 0, 0)

    monkeypatch.setattr(worker, "_submit", refused)
    done = node.loop.run(worker.run_pass(), timeout_s=30)
    assert len(steps) == 1 and steps[0].cut_key is not None, steps  # submitted once, then past that partition
    assert done.batches == 0
    assert offsets(node, topic) == (0, 2 * BATCH_MAX)


def test_a_pass_reads_no_batch_past_the_first_kept_one_and_none_of_a_topic_without_limits(
    node: InProcessNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk stops at the first batch kept, and so must the reading: rows are pulled from SQLite as the walk goes
    # (a list read the budget's worth of every partition on the node's loop, seconds per pass on long partitions).
    broker = Broker(node.stub, node.coordinators)
    kept = create(broker, 1, retention_ms=str(RETENTION_MS))
    unlimited = create(broker, 1, retention_ms="-1")
    for topic in (kept, unlimited):
        for _ in range(2 * BATCH_MAX):
            commit_one(broker, topic, node.clock.now_ms())  # fresh: nothing expires
    pulled: list[int] = []
    read = reads.retention_batches

    def counting(db: Any, partition_key: int, offset: int, limit: int) -> Iterator[tuple[int, int, int]]:
        for row in read(db, partition_key, offset, limit):
            pulled.append(partition_key)
            yield row

    monkeypatch.setattr(reads, "retention_batches", counting)
    for owner in {coordinator_of(node.stub, topic, 0) for topic in (kept, unlimited)}:  # one pass each
        worker = node.node.running_workers(RETENTION.name)[owner]
        assert isinstance(worker, RetentionWorker)
        assert node.loop.run(worker.run_pass()).batches == 0
    assert len(pulled) == 1, pulled  # the kept topic's first batch; not one of the unlimited topic's
    assert offsets(node, kept) == (0, 2 * BATCH_MAX) and offsets(node, unlimited) == (0, 2 * BATCH_MAX)


def test_expired_batches_leave_from_the_log_start_and_commits_go_on(node: InProcessNode) -> None:
    broker = Broker(node.stub, node.coordinators)
    topic = create(broker, 1, retention_ms=str(RETENTION_MS))
    unlimited = create(broker, 1)
    owner = coordinator_of(node.stub, topic, 0)
    now = node.clock.now_ms()
    old, new = now - 2 * RETENTION_MS, now
    # Four old batches, a new one, an old one after it (kept: the walk stops at the first kept batch), a new one.
    layout = [old, old, old, old, new, old, new]
    keys = [commit_one(broker, topic, timestamp)[0] for timestamp in layout]
    kept_key, _ = commit_one(broker, unlimited, old)

    node.advance(INTERVAL_MS - 1)  # not yet a pass
    assert offsets(node, topic) == (0, 7)
    node.advance(1)  # a pass, in steps of at most BATCH_MAX batches
    assert offsets(node, topic) == (4, 7)
    below = fetch(node.stub, topic, 0, 3)
    assert (below.error_code, below.log_start_offset, below.high_watermark) == (pb.OFFSET_OUT_OF_RANGE, 4, 7)
    assert [b.base_offset for b in fetch(node.stub, topic, 0, 4).batches] == [4, 5, 6]
    assert [describe_file(node.stub, key).state for key in keys[:5]] == [pb.FILE_STATE_AWAITING_DELETION] * 4 + [
        pb.FILE_STATE_LIVE
    ]
    assert offsets(node, unlimited) == (0, 1) and describe_file(node.stub, kept_key).state == pb.FILE_STATE_LIVE
    assert counter(node, "diskless_retention_expired_batches", owner) == 4
    assert counter(node, "diskless_retention_expired_bytes", owner) == 400
    assert pass_age_s(node, owner) == 0
    node.advance(1000)
    assert pass_age_s(node, owner) == 1

    # Commits go on from the high watermark; once everything is old, the log start reaches the high watermark.
    _, next_offset = commit_one(broker, topic, node.clock.now_ms())
    assert next_offset == 7
    node.advance(2 * RETENTION_MS)
    assert offsets(node, topic) == (8, 8)
    empty = fetch(node.stub, topic, 0, 8)
    assert (empty.error_code, list(empty.batches), empty.log_start_offset) == (pb.NONE, [], 8)
    assert commit_one(broker, topic, node.clock.now_ms())[1] == 8
    assert offsets(node, topic) == (8, 9)
    assert counter(node, "diskless_retention_expired_batches", owner) == 8


def test_retention_bytes_keeps_the_newest_batches_that_fit_and_log_append_time_counts_the_append(
    node: InProcessNode, tmp_path: Path
) -> None:
    broker = Broker(node.stub, node.coordinators)
    by_size = create(broker, 1)
    by_append_time = create(broker, 1, retention_ms=str(HOUR_MS))
    for _ in range(5):
        commit_one(broker, by_size, node.clock.now_ms())  # 100 bytes each
        # A producer's timestamp far in the past, but LogAppendTime: the append time (now) is what expires.
        commit_one(broker, by_append_time, 0, timestamp_type=pb.LOG_APPEND_TIME)
    altered = node.stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(topics=[pb.AlterTopicConfigsRequest.Topic(
        topic_id=by_size, set=[pb.TopicConfig(name="retention.bytes", value="250")]
    )]))  # fmt: skip
    assert altered.topics[0].error_code == pb.NONE
    node.advance(INTERVAL_MS)
    assert offsets(node, by_size) == (2, 5)  # 500 → 300 bytes: one more would leave 200 < 250
    assert offsets(node, by_append_time) == (0, 5)
    node.advance(HOUR_MS)
    assert offsets(node, by_size) == (2, 5)
    assert offsets(node, by_append_time) == (5, 5)

    node.restart()  # the state and the log hold the moves: nothing comes back
    assert offsets(node, by_size) == (2, 5) and offsets(node, by_append_time) == (5, 5)
    node.stop()
    assert_state_equals_log_rebuild(node.data_dir, node.coordinators, tmp_path / "rebuilt")


def test_a_batch_without_a_timestamp_ages_from_its_append_time(node: InProcessNode) -> None:
    broker = Broker(node.stub, node.coordinators)
    topic = create(broker, 1, retention_ms=str(HOUR_MS))
    commit_one(broker, topic, -1)  # CreateTime, no timestamp (a producer that set none)
    commit_one(broker, topic, -1, magic=0, timestamp_type=-1)  # magic 0: no timestamps at all
    node.advance(INTERVAL_MS)  # a pass: appended just now, neither has expired
    assert offsets(node, topic) == (0, 2)
    node.advance(HOUR_MS)  # an hour after their append: both have
    assert offsets(node, topic) == (2, 2)


def test_tiering_on_keeps_everything_here_and_copies_disabled_expire_once_nothing_is_remote(
    node: InProcessNode,
) -> None:
    """DESIGN §4a: while tiering is on, batches leave only by offload; with `remote.log.copy.disable=true` the
    coordinator's retention removes diskless batches once nothing is remote (here nothing ever was)."""
    broker = Broker(node.stub, node.coordinators)
    tiered = create(broker, 1, retention_ms="1", remote_storage_enable="true")
    retained = create(broker, 1, retention_ms="1", remote_storage_enable="true", remote_log_copy_disable="true")
    for topic in (tiered, retained):
        commit_one(broker, topic, 0)
    node.advance(2 * INTERVAL_MS)
    assert offsets(node, tiered) == (0, 1) and offsets(node, retained) == (1, 1)


# ---------------------------------------------------------------- the choice of a step, against a model

DEFAULTS = ConfigDefaults()
NOW_MS = 1_000_000


def kafka_rounds(batches: list[StoredBatch], retention_ms: int, retention_bytes: int) -> int:
    """How many oldest batches Kafka's rounds remove: time, then size, again until neither removes one."""
    removed = 0
    while True:
        before = removed
        while retention_ms >= 0 and removed < len(batches) and batches[removed].timestamp < NOW_MS - retention_ms:
            removed += 1
        total = sum(b.size for b in batches[removed:])
        while retention_bytes >= 0 and removed < len(batches) and total - batches[removed].size >= retention_bytes:
            total -= batches[removed].size
            removed += 1
        if removed == before:
            return removed


stored_batches = st.lists(
    st.tuples(st.integers(1, 3), st.integers(1, 100), st.integers(NOW_MS - 1000, NOW_MS)), max_size=12
)  # (records, size, timestamp)


@settings(max_examples=sized(200, 50), deadline=None)
@given(
    partitions=st.lists(
        st.tuples(stored_batches, st.sampled_from([-1, 0, 300, 1000]), st.sampled_from([-1, 0, 150, 400])),
        min_size=1,
        max_size=6,
    ),
    batch_max=st.integers(1, 8),
)
def test_a_pass_of_bounded_steps_removes_what_kafkas_rounds_remove(
    partitions: list[tuple[list[tuple[int, int, int]], int, int]], batch_max: int
) -> None:
    stored: dict[int, list[StoredBatch]] = {}
    views: dict[int, PartitionView] = {}
    configs: dict[bytes, dict[str, str]] = {}
    for key, (batches, retention_ms, retention_bytes) in enumerate(partitions):
        offset, stored[key] = 0, []
        for records, size, timestamp in batches:
            offset += records
            stored[key].append(StoredBatch(offset - 1, size, timestamp))
        topic_id = bytes([key]) * 16
        views[key] = PartitionView(key, topic_id, "t", 0, 0, offset, 0)
        configs[topic_id] = {"retention.ms": str(retention_ms), "retention.bytes": str(retention_bytes)}
    expected = {
        key: kafka_rounds(stored[key], retention_ms, retention_bytes)
        for key, (_, retention_ms, retention_bytes) in enumerate(partitions)
    }
    removed = dict.fromkeys(stored, 0)
    original = {key: list(batches) for key, batches in stored.items()}
    next_key: int | None = 0
    while next_key is not None:
        step = select_retention(
            [views[k] for k in sorted(views) if k >= next_key],
            configs,
            DEFAULTS,
            lambda key, offset, limit: [b for b in stored[key] if b.last_offset >= offset][: limit + 1],
            lambda key: sum(b.size for b in stored[key]),
            NOW_MS,
            batch_max,
        )
        assert sum(move.batches for move in step.moves) <= batch_max
        for move in step.moves:
            kept = [b for b in stored[move.partition_key] if b.last_offset >= move.log_start_offset]
            assert len(stored[move.partition_key]) - len(kept) == move.batches > 0
            stored[move.partition_key] = kept
            removed[move.partition_key] += move.batches
            views[move.partition_key].log_start_offset = move.log_start_offset
        assert next_key is None or step.resume_key is None or step.resume_key >= next_key
        next_key = step.resume_key
    assert removed == expected
    for key, view in views.items():  # the first kept batch's base offset (its predecessor's end), or the high watermark
        assert view.log_start_offset == (original[key][removed[key] - 1].last_offset + 1 if removed[key] else 0)
        if not stored[key]:
            assert view.log_start_offset in (0, view.high_watermark)
            continue
        _, retention_ms, retention_bytes = partitions[key]  # the first kept batch is expired by neither rule
        first = stored[key][0]
        assert retention_ms < 0 or first.timestamp >= NOW_MS - retention_ms
        assert retention_bytes < 0 or sum(b.size for b in stored[key]) - first.size < retention_bytes


def _view_with(partition: PartitionView, configs: dict[str, str]) -> CoordinatorView:
    view = CoordinatorView(0, lambda key: None)
    view.load_partition(partition)
    view.load_topic_configs(partition.topic_id, configs)
    return view


def test_the_check_keeps_only_moves_the_speculative_view_still_allows() -> None:
    topic_id = b"t" * 16
    configs = {"retention.ms": "10"}
    move = LogStartMove(0, topic_id, 5, 5, 500, effective_configs(configs, DEFAULTS))
    step = RetentionStep((move,), DEFAULTS, None, None)

    applied = check_retention(_view_with(PartitionView(0, topic_id, "t", 0, 0, 9, 0), configs), step, NOW_MS)
    assert [r.retention_applied.starts[0].log_start_offset for r in applied.records] == [5]
    assert (applied.response.batches, applied.response.bytes, applied.response.applied_keys) == (5, 500, {0})
    # DeleteRecords went further meanwhile; the limits changed; the topic went; remote storage was enabled.
    for view in (
        _view_with(PartitionView(0, topic_id, "t", 0, 6, 9, 6), configs),
        _view_with(PartitionView(0, topic_id, "t", 0, 0, 9, 0), {"retention.ms": "20"}),
        CoordinatorView(0, lambda key: None),
        _view_with(PartitionView(0, topic_id, "t", 0, 0, 9, 0), {**configs, "remote.storage.enable": "true"}),
    ):
        refused = check_retention(view, step, NOW_MS)
        assert (refused.records, refused.response.batches, refused.response.applied_keys) == ([], 0, frozenset())


def test_a_commit_after_a_pass_answers_the_log_start_the_pass_moved(node: InProcessNode) -> None:
    """The pass's record moves the log start in SQLite and in the view; a commit's answer reads the view, so it tells
    the broker the new start. Kills `replay_log_start(...)` removed from RetentionApplied's view effect
    (machine/kinds/retention.py; a survivor of the mutation run, docs/testing.md): every read from SQLite still says
    4, only the view would lag."""
    broker = Broker(node.stub, node.coordinators)
    topic = create(broker, 1, retention_ms=str(RETENTION_MS))
    for _ in range(4):
        commit_one(broker, topic, node.clock.now_ms() - 2 * RETENTION_MS)
    node.advance(INTERVAL_MS)
    assert offsets(node, topic) == (4, 4)
    (result,) = broker.commit([batch(topic, 0, max_timestamp=node.clock.now_ms())], object_key="wal/after").batches
    assert (result.error_code, result.assigned_base_offset, result.log_start_offset) == (pb.NONE, 4, 4)
