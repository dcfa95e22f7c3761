"""The functional core without a server: checks are pure, and replay (view) agrees with apply (SQLite)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.base.errors import ErrorCode
from coordinator.commits import parts, rules
from coordinator.machine import kinds
from coordinator.machine.state.store import StateStore
from coordinator.machine.view import CoordinatorView
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb
from tests.harness import batch, laid_out
from tests.lanes import sized

TOPIC = bytes(range(1, 17))
OTHER_TOPIC = bytes(range(2, 18))


def view_facts(view: CoordinatorView) -> dict[str, Any]:
    return {
        "partitions": sorted(
            (p.key, p.topic_id, p.topic_name, p.partition, p.log_start_offset, p.high_watermark)
            for p in view.partitions()
        ),
        "producers": sorted(
            (p.key, producer, view.producer_window(p.key, producer))
            for p in view.partitions()
            for producer in range(4)
            if view.producer_window(p.key, producer) is not None
        ),
        "counters": (view.next_partition_key, view.next_batch_id, view.next_file_id, view.leader_epoch),
    }


def commit_part(batches: list[pb.CommitFileRequest.Batch], key: str) -> parts.CommitPart:
    size = sum(b.size for b in batches)
    read = parts.request_batches(batches)
    return parts.CommitPart(key, size, 1, (0,), tuple(read), tuple(rules.batch_structure_problems(read, size)))


operation = st.one_of(
    st.tuples(st.just("create"), st.sampled_from([TOPIC, OTHER_TOPIC]), st.integers(1, 3)),
    st.tuples(
        st.just("commit"),
        st.lists(
            st.tuples(
                st.sampled_from([TOPIC, OTHER_TOPIC]),
                st.integers(0, 3),
                st.integers(1, 5),
                st.integers(-1, 3),
                st.integers(0, 2),
                st.integers(0, 12),
            ),
            min_size=1,
            max_size=6,
        ),
    ),
    st.tuples(st.just("delete_records"), st.sampled_from([TOPIC, OTHER_TOPIC]), st.integers(0, 3), st.integers(-2, 30)),
    st.tuples(st.just("delete_topic"), st.sampled_from([TOPIC, OTHER_TOPIC])),
)


@settings(max_examples=sized(60, 20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=25))
def test_replay_into_the_view_equals_apply_into_sqlite(operations: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = StateStore(Path(directory) / "state.sqlite", 0)
        view = store.load_view()
        end_offset = store.applied_offset
        for number, op in enumerate(operations):
            before = view_facts(view)
            result = _check(view, op, number)
            assert view_facts(view) == before, "a check must not change the view"
            if result.records:
                end_offset += len(result.records)
                for record in result.records:
                    kinds.replay(view, record, end_offset)
                store.apply([(end_offset, result.records)])
            assert view_facts(store.load_view()) == view_facts(view), f"after {op}"
        store.close()


def _check(view: CoordinatorView, op: tuple[Any, ...], number: int) -> Any:
    kind = op[0]
    if kind == "create":
        name = "a" if op[1] == TOPIC else "b"
        return partition_checks.check_create_partitions(
            view, partition_checks.CreatePartitions(op[1], name, tuple(range(op[2]))), 1000 + number
        )
    if kind == "delete_records":
        return partition_checks.check_delete_records(
            view, partition_checks.DeleteRecords(((op[1], op[2], op[3]),)), number
        )
    if kind == "delete_topic":
        return partition_checks.check_delete_topic(view, partition_checks.DeleteTopic(op[1]), number)
    batches = laid_out(
        [
            batch(topic, partition, records, producer_id=producer, epoch=epoch, sequence=sequence)
            for topic, partition, records, producer, epoch, sequence in op[1]
        ]
    )
    return rules.check_commit_part(view, commit_part(batches, f"wal/{number}"), 1000 + number)


def test_commit_check_assigns_contiguous_offsets_and_one_append_time() -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = StateStore(Path(directory) / "state.sqlite", 0)
        view = store.load_view()
        created = partition_checks.check_create_partitions(
            view, partition_checks.CreatePartitions(TOPIC, "a", (0, 1)), 0
        )
        for record in created.records:
            kinds.replay(view, record, 2)
        batches = laid_out(
            [batch(TOPIC, 0, 3), batch(TOPIC, 1, 2), batch(TOPIC, 0, 4, timestamp_type=pb.LOG_APPEND_TIME)]
        )
        result = rules.check_commit_part(view, commit_part(batches, "wal/x"), 777)
        assert [(o.error_code, o.assigned_base_offset, o.log_append_time) for o in result.response] == [
            (ErrorCode.NONE, 0, -1),
            (ErrorCode.NONE, 0, -1),
            (ErrorCode.NONE, 3, 777),
        ]
        (record,) = result.records
        assert record.file_committed.append_time_ms == 777
        store.close()
