"""Producer-id expiry without a server (DESIGN §4a): the decision against a model, the view and SQLite agreeing."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.commits import rules
from coordinator.commits.producer_expiry import ExpiryRequest, check_expire_producers
from coordinator.machine import kinds
from coordinator.machine.producers import effective_timestamp, producer_expired
from coordinator.machine.state.store import StateStore
from coordinator.machine.view import CoordinatorView
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec
from tests.harness import batch, laid_out
from tests.lanes import sized
from tests.test_core import commit_part

TOPIC = bytes(range(1, 17))
PARTITIONS = 2
PRODUCERS = 4
EXPIRATION_MS = 1000
START_MS = 10_000
CANDIDATES = tuple((key, producer) for key in range(PARTITIONS + 1) for producer in range(PRODUCERS + 1))


def test_the_effective_timestamp_is_the_append_time_for_log_append_time_or_no_timestamp() -> None:
    assert effective_timestamp(500, pb.CREATE_TIME, 900) == 500
    assert effective_timestamp(500, pb.LOG_APPEND_TIME, 900) == 900
    assert effective_timestamp(-1, pb.CREATE_TIME, 900) == 900
    assert effective_timestamp(-1, pb.NO_TIMESTAMP_TYPE, 900) == 900  # magic 0


def test_a_producer_exactly_as_old_as_the_expiration_is_expired_as_kafka_does() -> None:
    assert producer_expired(999, 1000)
    assert producer_expired(1000, 1000)  # Kafka: now - last timestamp >= producer.id.expiration.ms
    assert not producer_expired(1001, 1000)
    with tempfile.TemporaryDirectory() as directory:
        coordinator = _coordinator(directory)
        first = batch(TOPIC, 0, 1, producer_id=5, epoch=0, sequence=0, timestamp_type=pb.LOG_APPEND_TIME)
        assert _commit(coordinator, [first], "wal/1", START_MS) == [ErrorCode.NONE]
        coordinator.apply()
        request = ExpiryRequest(((0, 5),), EXPIRATION_MS)
        assert check_expire_producers(coordinator.view, request, START_MS + EXPIRATION_MS - 1).response == 0
        exactly = check_expire_producers(coordinator.view, request, START_MS + EXPIRATION_MS)
        assert exactly.response == 1
        coordinator.append(exactly)  # its record passes replay's check and apply's: the state goes everywhere
        coordinator.apply()
        assert _producers(coordinator.view) == _producers(coordinator.store.load_view()) == {}
        coordinator.store.close()


@dataclass
class Coordinator:
    """A coordinator's core: its view, its SQLite state and its log's end, records replayed and applied alike."""

    store: StateStore
    view: CoordinatorView
    end_offset: int
    pending: list[tuple[int, list[rec.MetadataRecord]]] = field(default_factory=list)

    def append(self, result: Result[Any]) -> None:
        """Into the view at once (the leader's check of the next operation sees them); SQLite later."""
        if result.records:
            self.end_offset += len(result.records)
            for record in result.records:
                kinds.replay(self.view, record, self.end_offset)
            self.pending.append((self.end_offset, list(result.records)))

    def apply(self) -> None:
        self.store.apply(self.pending)
        self.pending = []


def _coordinator(directory: str) -> Coordinator:
    store = StateStore(Path(directory) / "state.sqlite", 0)
    coordinator = Coordinator(store, store.load_view(), store.applied_offset)
    request = partition_checks.CreatePartitions(TOPIC, "orders", tuple(range(PARTITIONS)))
    coordinator.append(partition_checks.check_create_partitions(coordinator.view, request, 0))
    coordinator.apply()
    return coordinator


def _commit(coordinator: Coordinator, batches: list[pb.CommitFileRequest.Batch], key: str, now_ms: int) -> list[int]:
    result = rules.check_commit_part(coordinator.view, commit_part(laid_out(batches), key), now_ms)
    coordinator.append(result)
    return [outcome.error_code for outcome in result.response]


def _producers(view: CoordinatorView) -> dict[tuple[int, int], int]:
    """(partition key, producer id) -> the last batch's effective timestamp, as the view holds them."""
    return {
        (key, producer): window.last_timestamp
        for key, windows in view.producer_windows.items()
        for producer, window in windows.items()
    }


# A commit: (partition, producer, timestamp type, max timestamp or -1 relative to now, ms the clock moves first);
# an expiry pass: (ms the clock moves first, whether a commit is still pending when it is decided).
commit = st.tuples(
    st.just("commit"),
    st.integers(0, PARTITIONS - 1),
    st.integers(0, PRODUCERS - 1),
    st.sampled_from([pb.CREATE_TIME, pb.LOG_APPEND_TIME]),
    st.one_of(st.just(None), st.integers(-3 * EXPIRATION_MS, EXPIRATION_MS)),
    st.integers(0, 2 * EXPIRATION_MS),
)
expire = st.tuples(st.just("expire"), st.integers(0, 2 * EXPIRATION_MS), st.booleans())


@settings(max_examples=sized(60, 20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(commit, expire), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_expiry_forgets_exactly_the_producers_a_model_says_and_sqlite_agrees(operations: list[Any], rng: Any) -> None:
    """The model: each (partition, producer) keeps its next sequence and last effective timestamp; a pass at `now`
    forgets those older than now - expiration. A producer the model does not know commits at a random sequence,
    which must be accepted (an unknown producer's); one it knows commits its next sequence."""
    with tempfile.TemporaryDirectory() as directory:
        coordinator = _coordinator(directory)
        model: dict[tuple[int, int], tuple[int, int]] = {}  # (partition key, producer) -> (next sequence, last ts)
        now = START_MS
        for number, operation in enumerate(operations):
            if operation[0] == "commit":
                _, partition, producer, timestamp_type, offset_ms, advance_ms = operation
                now += advance_ms
                max_timestamp = -1 if offset_ms is None else now + offset_ms
                known = model.get((partition, producer))
                sequence = known[0] if known is not None else rng.randrange(0, 2**31 - 5)
                records = rng.randint(1, 3)
                produced = batch(TOPIC, partition, records, producer_id=producer, epoch=0, sequence=sequence,
                                 timestamp_type=timestamp_type, max_timestamp=max_timestamp)  # fmt: skip
                assert _commit(coordinator, [produced], f"wal/{number}", now) == [ErrorCode.NONE]
                last = now if timestamp_type == pb.LOG_APPEND_TIME or max_timestamp < 0 else max_timestamp
                model[(partition, producer)] = ((sequence + records) % 2**31, last)
                coordinator.apply()
                continue
            _, advance_ms, with_pending = operation
            now += advance_ms
            pending_producer = (number % PARTITIONS, number % PRODUCERS)
            if with_pending:  # a commit appended, not yet applied, when the expiry is decided
                known = model.get(pending_producer)
                sequence = known[0] if known is not None else 7
                produced = batch(TOPIC, pending_producer[0], 1, producer_id=pending_producer[1], epoch=0,
                                 sequence=sequence, timestamp_type=pb.LOG_APPEND_TIME)  # fmt: skip
                assert _commit(coordinator, [produced], f"wal/{number}", now) == [ErrorCode.NONE]
                model[pending_producer] = ((sequence + 1) % 2**31, now)
            expired = {k for k, (_, last) in model.items() if producer_expired(last, now - EXPIRATION_MS)}
            result = check_expire_producers(coordinator.view, ExpiryRequest(CANDIDATES, EXPIRATION_MS), now)
            assert result.response == len(expired)
            assert len(result.records) == (1 if expired else 0)
            for record in result.records:
                assert {(p.partition_key, p.producer_id) for p in record.producers_expired.producers} == expired
            event(f"a pass forgets {min(len(expired), 2)}+ producers")
            for key in expired:
                del model[key]
            coordinator.append(result)
            coordinator.apply()
            assert _producers(coordinator.view) == {k: last for k, (_, last) in model.items()}, f"after {operation}"
            assert _producers(coordinator.store.load_view()) == _producers(coordinator.view)
            assert coordinator.store.producer_count == len(model)
        coordinator.store.close()


def test_a_producer_that_wrote_after_the_decision_keeps_its_state_everywhere() -> None:
    """Applying the record removes only the state the decision saw: a later batch of the producer keeps it."""
    with tempfile.TemporaryDirectory() as directory:
        coordinator = _coordinator(directory)
        first = batch(TOPIC, 0, 1, producer_id=5, epoch=0, sequence=0, timestamp_type=pb.LOG_APPEND_TIME)
        assert _commit(coordinator, [first], "wal/1", START_MS) == [ErrorCode.NONE]
        coordinator.apply()
        decided = check_expire_producers(coordinator.view, ExpiryRequest(((0, 5),), EXPIRATION_MS), START_MS * 2)
        assert decided.response == 1
        # A log where the producer's next batch comes first (no leader writes this, a replay must still agree).
        again = batch(TOPIC, 0, 1, producer_id=5, epoch=0, sequence=1, timestamp_type=pb.LOG_APPEND_TIME)
        assert _commit(coordinator, [again], "wal/2", START_MS + 1) == [ErrorCode.NONE]
        coordinator.append(decided)
        coordinator.apply()
        assert _producers(coordinator.view) == {(0, 5): START_MS + 1}
        assert _producers(coordinator.store.load_view()) == {(0, 5): START_MS + 1}
        assert coordinator.store.producer_count == 1
        coordinator.store.close()


def test_an_expiry_and_the_producers_next_batch_in_one_transaction_leave_the_new_state() -> None:
    with tempfile.TemporaryDirectory() as directory:
        coordinator = _coordinator(directory)
        first = batch(TOPIC, 1, 1, producer_id=9, epoch=0, sequence=0, timestamp_type=pb.LOG_APPEND_TIME)
        assert _commit(coordinator, [first], "wal/1", START_MS) == [ErrorCode.NONE]
        coordinator.apply()
        later = START_MS + EXPIRATION_MS + 1
        coordinator.append(check_expire_producers(coordinator.view, ExpiryRequest(((1, 9),), EXPIRATION_MS), later))
        # Unknown now: any sequence; applied in the same transaction as the expiry.
        fresh = batch(TOPIC, 1, 1, producer_id=9, epoch=0, sequence=4242, timestamp_type=pb.LOG_APPEND_TIME)
        assert _commit(coordinator, [fresh], "wal/2", later) == [ErrorCode.NONE]
        coordinator.apply()
        assert _producers(coordinator.store.load_view()) == _producers(coordinator.view) == {(1, 9): later}
        window = coordinator.view.producer_window(1, 9)
        assert window is not None and [e.base_sequence for e in window.entries] == [4242]
        assert coordinator.store.producer_count == 1
        coordinator.store.close()


@pytest.mark.parametrize("stale", ["epoch", "offset", "timestamp"])
def test_a_record_naming_another_state_than_the_one_kept_removes_nothing(stale: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        coordinator = _coordinator(directory)
        first = batch(TOPIC, 0, 1, producer_id=3, epoch=2, sequence=0, timestamp_type=pb.LOG_APPEND_TIME)
        assert _commit(coordinator, [first], "wal/1", START_MS) == [ErrorCode.NONE]
        coordinator.apply()
        (record,) = check_expire_producers(
            coordinator.view, ExpiryRequest(((0, 3),), EXPIRATION_MS), START_MS + 2 * EXPIRATION_MS
        ).records
        seen = record.producers_expired.producers[0]
        if stale == "epoch":
            seen.producer_epoch = 1
        elif stale == "offset":
            seen.last_batch_offset = 5
        else:
            seen.last_timestamp = START_MS - 1
        coordinator.append(Result([record], 0))
        coordinator.apply()
        assert _producers(coordinator.view) == _producers(coordinator.store.load_view()) == {(0, 3): START_MS}
        coordinator.store.close()
