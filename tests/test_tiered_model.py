"""The tiered-storage position rules (DESIGN §4a) without a server, against a model: offloads, their retries and
refusals, DeleteRecords below and above the local log start, KIP-950's disable (its remote data deleted) and
re-enable; the view, SQLite and ListOffsets agreeing with the model after every step."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.base.errors import ErrorCode
from coordinator.machine.state import reads
from coordinator.reads import offset_lookup
from coordinator.topics import partition_checks
from coordinator.topics.config_checks import TopicConfigsChange, check_topic_configs
from coordinator.topics.remote_segments import (
    RemoteSegments,
    check_commit_remote_log_segments,
    retention_removes_local_batches,
)
from coordinator.topics.topic_configs import ConfigDefaults, TopicConfigs
from protos import coordinator_pb2 as pb
from tests.harness import batch
from tests.lanes import sized
from tests.test_producer_expiry_core import TOPIC, Coordinator, _commit, _coordinator

BATCH_MAX = 3
BASE_TIMESTAMP = 1_000_000


@dataclass
class Model:
    """One partition as Kafka's tiered storage has it: the three positions and the batches the coordinator holds."""

    log_start: int = 0
    local_start: int = 0
    high_watermark: int = 0
    held: list[tuple[int, int, int]] = field(default_factory=list)  # (base, last, timestamp), ascending
    remote_max_timestamp: int = -1
    remote_storage: bool = False
    copy_disabled: bool = False

    @property
    def remote_end(self) -> int:
        return self.local_start - 1 if self.log_start < self.local_start else -1

    def offload(self, start: int, end: int, batches_left: int) -> tuple[ErrorCode, int]:
        """The outcome of one offload and the batches it takes out."""
        if not self.remote_storage or self.copy_disabled:
            return ErrorCode.POLICY_VIOLATION, 0
        if start < 0 or end < start:
            return ErrorCode.INVALID_REQUEST, 0
        if end <= self.local_start:
            return ErrorCode.NONE, 0
        if end > self.high_watermark:
            return ErrorCode.OFFSET_OUT_OF_RANGE, 0
        if start > self.local_start:
            return ErrorCode.INVALID_REQUEST, 0
        leaving = [b for b in self.held if b[1] < end]
        if len(leaving) > batches_left or not leaving or leaving[-1][1] != end - 1:
            return ErrorCode.INVALID_REQUEST, 0
        self.remote_max_timestamp = max(self.remote_max_timestamp, *(b[2] for b in leaving))
        self.held = self.held[len(leaving) :]
        self.local_start = end
        return ErrorCode.NONE, len(leaving)

    def delete_records(self, offset: int) -> ErrorCode:
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        if target > self.log_start:
            self.log_start = target
            if target >= self.local_start:  # nothing remote any more: the batches below go as ever
                self.local_start = target
                self.remote_max_timestamp = -1
                self.held = [b for b in self.held if b[1] >= target]
        return ErrorCode.NONE

    def list_offset(self, timestamp: int) -> tuple[ErrorCode, int, int]:
        if timestamp == -2:
            return ErrorCode.NONE, -1, self.log_start
        if timestamp == -4:
            return ErrorCode.NONE, -1, self.local_start
        if timestamp == -5:
            return ErrorCode.NONE, -1, self.remote_end
        if self.remote_end >= 0 and timestamp <= self.remote_max_timestamp:
            return ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE, -1, -1
        found = next((b for b in self.held if b[2] >= timestamp), None)
        return (ErrorCode.NONE, -1, -1) if found is None else (ErrorCode.NONE, found[2], max(found[0], self.log_start))


def _configs(coordinator: Coordinator, values: dict[str, str]) -> None:
    result = check_topic_configs(coordinator.view, TopicConfigsChange(TOPIC, tuple(values.items())), 0)
    assert result.response.error_code == ErrorCode.NONE, result.response
    coordinator.append(result)


def _check_state(coordinator: Coordinator, model: Model, timestamps: list[int]) -> None:
    partition = coordinator.view.partition(TOPIC, 0)
    assert partition is not None
    view_positions = (partition.log_start_offset, partition.local_log_start_offset, partition.remote_log_end_offset)
    assert view_positions == (model.log_start, model.local_start, model.remote_end)
    coordinator.apply()
    with coordinator.store.read_transaction() as db:
        offsets = reads.partition_offsets(db, TOPIC, 0)
        assert offsets is not None
        assert (offsets.log_start_offset, offsets.local_log_start_offset, offsets.high_watermark) == (
            model.log_start, model.local_start, model.high_watermark,
        )  # fmt: skip
        held = db.execute(
            "SELECT base_offset, last_offset, max_timestamp FROM batches WHERE partition_key = ? ORDER BY last_offset",
            (offsets.partition_key,),
        ).fetchall()
        assert [tuple(row) for row in held] == model.held
        for timestamp in (-2, -4, -5, *timestamps):
            assert offset_lookup.list_offset(db, offsets, timestamp) == model.list_offset(timestamp), timestamp


commit = st.tuples(st.just("commit"), st.integers(1, 3), st.integers(0, 20))
offload = st.tuples(st.just("offload"), st.integers(-2, 2), st.integers(-1, 12), st.booleans())
delete = st.tuples(st.just("delete"), st.integers(-2, 12))
copy = st.tuples(st.just("copy"), st.booleans())
storage = st.tuples(st.just("storage"), st.booleans())


@settings(max_examples=sized(40, 12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(commit, commit, offload, offload, delete, copy, storage), min_size=1, max_size=30),
    st.lists(st.integers(BASE_TIMESTAMP - 1, BASE_TIMESTAMP + 21), min_size=1, max_size=3),
)
def test_positions_follow_the_model_through_offloads_deletions_and_kip_950(
    operations: list[Any], timestamps: list[int]
) -> None:
    """The offload's end is drawn near a held batch's end (`at_batch`: one past the n-th held batch's last offset,
    else relative to the high watermark), its start relative to the local start, so that most offloads succeed and
    every refusal is reached. Every answer is the model's; the view, SQLite and ListOffsets agree with it."""
    with tempfile.TemporaryDirectory() as directory:
        coordinator = _coordinator(directory)
        model = Model()
        _configs(coordinator, {"remote.storage.enable": "true"})
        model.remote_storage = True
        for number, operation in enumerate(operations):
            if operation[0] == "commit":
                _, records, timestamp = operation
                written = batch(TOPIC, 0, records, max_timestamp=BASE_TIMESTAMP + timestamp)
                assert _commit(coordinator, [written], f"wal/{number}", 0) == [pb.NONE]
                model.held.append(
                    (model.high_watermark, model.high_watermark + records - 1, BASE_TIMESTAMP + timestamp)
                )
                model.high_watermark += records
            elif operation[0] == "offload":
                _, start_delta, end_choice, at_batch = operation
                if at_batch and model.held:
                    end = model.held[min(end_choice, len(model.held) - 1) if end_choice >= 0 else 0][1] + 1
                else:
                    end = model.high_watermark + end_choice - 6
                start = model.local_start + start_delta
                request = RemoteSegments(((TOPIC, 0, start, end),), ConfigDefaults(), BATCH_MAX)
                result = check_commit_remote_log_segments(coordinator.view, request, 0)
                expected, _ = model.offload(start, end, BATCH_MAX)
                (outcome,) = result.response
                assert outcome.error_code == expected, (start, end, outcome, model)
                event(f"offload {expected.name}")
                if expected == ErrorCode.NONE:
                    assert (outcome.log_start_offset, outcome.local_log_start_offset) == (
                        model.log_start, model.local_start,
                    )  # fmt: skip
                    assert outcome.remote_log_end_offset == model.remote_end
                coordinator.append(result)
            elif operation[0] == "delete":
                request = partition_checks.DeleteRecords(((TOPIC, 0, operation[1]),))
                result = partition_checks.check_delete_records(coordinator.view, request, 0)
                assert result.response[0].error_code == model.delete_records(operation[1])
                if result.response[0].error_code == ErrorCode.NONE:
                    assert result.response[0].low_watermark == model.log_start
                coordinator.append(result)
            elif operation[0] == "copy":
                _configs(coordinator, {"remote.log.copy.disable": str(operation[1]).lower()})
                model.copy_disabled = operation[1]
            else:
                on = operation[1]
                _configs(
                    coordinator, {"remote.storage.enable": str(on).lower(), "remote.log.delete.on.disable": "true"}
                )
                model.remote_storage = on
                if not on:  # KIP-950 "delete": the remote range is forgotten
                    model.log_start = model.local_start
                    model.remote_max_timestamp = -1
            if number % 3 == 2 or number == len(operations) - 1:
                _check_state(coordinator, model, timestamps)
        coordinator.store.close()


def test_retention_removes_local_batches_only_where_tiering_leaves_them_to_it() -> None:
    """The hook retention consults (DESIGN §4a): never with tiering on; with copies disabled ("retain") only once
    nothing is remote; never tiered, or remote data deleted: as any topic."""

    def configs(enable: bool, copy_disable: bool) -> TopicConfigs:
        return TopicConfigs(-1, -1, enable, copy_disable, False)

    assert not retention_removes_local_batches(configs(True, False), 0, 0)
    assert not retention_removes_local_batches(configs(True, False), 0, 5)
    assert not retention_removes_local_batches(configs(True, True), 0, 5)
    assert retention_removes_local_batches(configs(True, True), 5, 5)
    assert retention_removes_local_batches(configs(False, False), 5, 5)
    assert retention_removes_local_batches(configs(False, True), 0, 0)
