"""A model of Kafka's ProducerStateManager rules driven by hypothesis (DESIGN §4b): every CommitFile's answers,
the LSO, the aborted list and read_committed reads compared with the model after each file, the view with
SQLite, and at the end a state rebuilt by replaying the log with the live one."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.base.errors import ErrorCode
from coordinator.machine.state.store import StateStore
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from tests.lanes import sized
from tests.test_producer_expiry_core import TOPIC, _commit, _coordinator
from tests.test_transactions_core import NOW, PARTITIONS, data, find, marker


@dataclass
class ModelProducer:
    epoch: int
    next_sequence: int  # the next batch's base sequence at this epoch (0 after a marker set the epoch)
    open_first: int = -1
    coordinator_epoch: int = -1


@dataclass
class ModelPartition:
    high_watermark: int = 0
    log_start: int = 0
    producers: dict[int, ModelProducer] = field(default_factory=dict)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (producer, first, marker offset)
    batches: list[tuple[int, int]] = field(default_factory=list)  # (base, last)

    def lso(self) -> int:
        firsts = [p.open_first for p in self.producers.values() if p.open_first >= 0]
        return min(max(min(firsts), self.log_start), self.high_watermark) if firsts else self.high_watermark

    def data(self, producer: int, epoch: int, sequence: int, records: int, transactional: bool) -> int:
        state = self.producers.get(producer)
        if state is not None:
            if epoch < state.epoch:
                return ErrorCode.INVALID_PRODUCER_EPOCH
            expected = 0 if epoch > state.epoch else state.next_sequence
            if sequence != expected:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            if state.open_first >= 0 and not transactional:
                return ErrorCode.INVALID_TXN_STATE
        else:
            state = self.producers[producer] = ModelProducer(epoch, 0)
        state.epoch, state.next_sequence = epoch, sequence + records
        if transactional and state.open_first < 0:
            state.open_first = self.high_watermark
        self.batches.append((self.high_watermark, self.high_watermark + records - 1))
        self.high_watermark += records
        return ErrorCode.NONE

    def marker(self, producer: int, epoch: int, commit: bool, coordinator_epoch: int) -> int:
        state = self.producers.get(producer)
        if state is not None and epoch < state.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if state is not None and state.coordinator_epoch > coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        if state is None:
            state = self.producers[producer] = ModelProducer(epoch, 0)
        elif epoch > state.epoch:
            state.epoch, state.next_sequence = epoch, 0
        if state.open_first >= 0 and not commit:
            self.aborted.append((producer, state.open_first, self.high_watermark))
        state.open_first, state.coordinator_epoch = -1, coordinator_epoch
        self.batches.append((self.high_watermark, self.high_watermark))
        self.high_watermark += 1
        return ErrorCode.NONE

    def read_committed(self, offset: int) -> tuple[list[int], list[tuple[int, int]]]:
        stable = self.lso()
        bases = [base for base, last in self.batches if last >= offset and last < stable]
        if not bases:
            return [], []
        last_returned = max(last for base, last in self.batches if base == bases[-1])
        aborted = sorted(
            (first, producer) for producer, first, end in self.aborted if end >= offset and first <= last_returned
        )
        return bases, [(producer, first) for first, producer in aborted]


PRODUCER_IDS = (1, 2, 3)
batch_op = st.tuples(
    st.just("data"),
    st.integers(0, PARTITIONS - 1),
    st.sampled_from(PRODUCER_IDS),
    st.sampled_from(["same", "same", "same", "bump", "stale", "gap"]),
    st.integers(1, 3),
    st.booleans(),
)
marker_op = st.tuples(
    st.just("marker"),
    st.integers(0, PARTITIONS - 1),
    st.sampled_from(PRODUCER_IDS),
    st.sampled_from(["same", "same", "bump", "stale"]),
    st.booleans(),
    st.integers(-1, 2),  # the coordinator epoch, relative to the producer's last
)
delete_op = st.tuples(st.just("delete"), st.integers(0, PARTITIONS - 1), st.floats(0, 1))
operation = st.one_of(batch_op, batch_op, marker_op, delete_op, st.tuples(st.just("apply")))


def _epoch(state: ModelProducer | None, choice: str) -> int:
    current = 0 if state is None else state.epoch
    return {"same": current, "bump": current + 1, "stale": max(current - 1, 0), "gap": current}[choice]


@settings(
    max_examples=sized(60, 15), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(st.lists(operation, min_size=1, max_size=4), min_size=1, max_size=14))
def test_every_answer_matches_a_model_of_kafkas_transaction_rules(files: list[list[Any]]) -> None:
    """Each inner list is one CommitFile (its batches checked in order against what the earlier ones did); reads,
    the LSO and the aborted list are compared after every file, the view with SQLite, and at the end a state
    rebuilt by replaying the log with the live one."""
    with tempfile.TemporaryDirectory() as directory:
        log: list[Any] = []
        coordinator = _coordinator(directory)
        with coordinator.store.read_transaction() as db:  # the partitions' creation, applied by _coordinator
            assert db.execute("SELECT count(*) FROM partitions").fetchall() == [(PARTITIONS,)]

        def flush() -> None:
            log.extend(records for _, records in coordinator.pending)
            coordinator.apply()

        model = [ModelPartition(), ModelPartition()]
        files_sent = 0
        batches: list[Any] = []
        expected: list[int] = []

        def send() -> None:
            """The batches so far as one CommitFile (a delete or an apply comes between two files)."""
            nonlocal files_sent
            if batches:
                assert _commit(coordinator, batches, f"wal/{files_sent}", NOW) == expected, files
                files_sent += 1
            batches.clear()
            expected.clear()

        for operations in files:
            for op in operations:
                if op[0] == "apply":
                    send()
                    flush()
                    continue
                partition = model[op[1]]
                if op[0] == "delete":
                    send()
                    offset = partition.log_start + int(op[2] * (partition.high_watermark - partition.log_start))
                    request = partition_checks.DeleteRecords(((TOPIC, op[1], offset),))
                    result = partition_checks.check_delete_records(coordinator.view, request, NOW)
                    coordinator.append(result)
                    partition.log_start = max(partition.log_start, offset)
                    partition.aborted = [a for a in partition.aborted if a[2] >= partition.log_start]
                    partition.batches = [b for b in partition.batches if b[1] >= partition.log_start]
                    continue
                state = partition.producers.get(op[2])
                epoch = _epoch(state, op[3])
                if op[0] == "data":
                    _, key, producer, choice, records, transactional = op
                    sequence = 0 if state is None or epoch > state.epoch else state.next_sequence
                    sequence += 2 if choice == "gap" else 0
                    batches.append(data(key, records, producer, epoch, sequence, transactional))
                    expected.append(partition.data(producer, epoch, sequence, records, transactional))
                else:
                    _, key, producer, _, commit_it, relative = op
                    coordinator_epoch = max(0, (-1 if state is None else state.coordinator_epoch) + relative)
                    batches.append(marker(key, producer, epoch, commit_it, coordinator_epoch))
                    expected.append(partition.marker(producer, epoch, commit_it, coordinator_epoch))
            send()
            flush()
            for key, partition in enumerate(model):
                assert coordinator.view.last_stable_offset(coordinator.view.partitions_by_key[key]) == partition.lso()
                offset = partition.log_start
                answer = find(coordinator, key, offset)
                assert answer.last_stable_offset == partition.lso()
                bases, aborted = partition.read_committed(offset)
                assert [b[0] for b in answer.batches] == bases, (key, files)
                assert answer.aborted == aborted, (key, files)
                event(f"aborted listed: {min(len(aborted), 2)}+")
            loaded = coordinator.store.load_view()
            assert loaded.open_transactions == coordinator.view.open_transactions
            assert loaded.coordinator_epochs == coordinator.view.coordinator_epochs
            assert loaded.producer_windows == coordinator.view.producer_windows
        coordinator.store.close()
        _assert_replay_rebuilds(Path(directory) / "state.sqlite", log)


def _creation_log() -> list[Any]:
    """The records _coordinator applied before the test's own: the partitions' creation."""
    with tempfile.TemporaryDirectory() as directory:
        store = StateStore(Path(directory) / "state.sqlite", 0)
        request = partition_checks.CreatePartitions(TOPIC, "orders", tuple(range(PARTITIONS)))
        records = partition_checks.check_create_partitions(store.load_view(), request, 0).records
        store.close()
        return [list(records)]


def _assert_replay_rebuilds(path: Path, log: list[Any]) -> None:
    """The state of the log replayed from nothing is the live one (invariant I1, the state check's)."""
    with tempfile.TemporaryDirectory() as other:
        rebuilt = StateStore(Path(other) / "state.sqlite", 0)
        rebuilt.apply([(end, records) for end, records in enumerate(_creation_log() + log, start=1)])
        rebuilt.close()
        live, again = logical_dump(path), logical_dump(Path(other) / "state.sqlite")
        for table in ("producers", "producer_transactions", "aborted_transactions", "batches", "partitions"):
            assert live[table] == again[table], table
