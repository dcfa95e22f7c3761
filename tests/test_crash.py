"""kill -9 in the middle of concurrent commits, restart on the same data: nothing acknowledged is lost.

Each round: 16 committers (threads, each with its own channel; some are idempotent producers)
commit files of several batches over several topics and coordinators; the server is killed
with SIGKILL while they run; it restarts on the same data directory; then every acknowledged
batch must be found where it was acknowledged, per partition the offsets must run from 0
with no gap and no overlap (I3), and after a clean stop every coordinator's SQLite state must
equal a rebuild from its log (I1). Rounds: DISKLESS_CRASH_ROUNDS (default 3).
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import (
    Broker,
    ServerProcess,
    assert_state_equals_log_rebuild,
    batch,
    coordinators_of,
    describe_coordinators,
    fetch_all_batches,
    laid_out,
)

pytestmark = pytest.mark.slow

ROUNDS = int(os.environ.get("DISKLESS_CRASH_ROUNDS", "3"))
COMMITTERS = 16
IDEMPOTENT_EVERY = 3  # committers 0, 3, 6, ... are idempotent producers
COORDINATORS = 4
TOPICS = {f"crash-{i}": 4 for i in range(6)}  # 24 partitions over 4 coordinators
SETTINGS = {"diskless.coordinator.log.segment.bytes": "65536"}  # segments roll during the test

PartitionKey = tuple[bytes, int]


@dataclass(frozen=True)
class Placement:
    """Where a batch of a file lives: what FindBatches must answer for an acknowledged batch."""

    object_key: str
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int


@dataclass
class Ledger:
    """What the committers know: acknowledged batches, and every batch ever sent (acknowledged or not)."""

    acknowledged: dict[PartitionKey, list[Placement]] = field(default_factory=dict)
    sent: dict[tuple[str, int, int], tuple[PartitionKey, int]] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    commits_acknowledged: int = 0
    calls_cut_by_the_kill: int = 0
    retried_duplicates: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record_sent(self, request: pb.CommitFileRequest) -> None:
        with self.lock:
            for b in request.batches:
                self.sent[(request.object_key, b.byte_offset, b.size)] = (
                    (b.topic_id, b.partition),
                    b.last_offset - b.base_offset + 1,
                )

    def record_acknowledged(self, key: PartitionKey, placement: Placement) -> None:
        with self.lock:
            self.acknowledged.setdefault(key, []).append(placement)


@dataclass
class Producer:
    """An idempotent producer's state, kept across rounds: its id, epoch and next sequence per partition."""

    producer_id: int
    epoch: int = 0
    next_sequence: dict[PartitionKey, int] = field(default_factory=dict)
    unanswered: pb.CommitFileRequest | None = None  # the call the kill cut, retried after the restart


class Committer(threading.Thread):
    def __init__(
        self,
        index: int,
        address: str,
        partitions: list[PartitionKey],
        coordinator_of: dict[PartitionKey, int],
        ledger: Ledger,
        stop: threading.Event,
        producer: Producer | None,
        seed: int,
    ) -> None:
        super().__init__(name=f"committer-{index}", daemon=True)
        self.index = index
        self.address = address
        self.partitions = partitions
        self.coordinator_of = coordinator_of
        self.ledger = ledger
        self.stop_event = stop
        self.producer = producer
        self.random = random.Random(seed)

    def next_request(self) -> pb.CommitFileRequest:
        chosen = [self.random.choice(self.partitions) for _ in range(self.random.randint(2, 6))]
        batches = []
        for topic_id, partition in chosen:
            records = self.random.randint(1, 5)
            if self.producer is not None:
                sequence = self.producer.next_sequence.get((topic_id, partition), 0)
                self.producer.next_sequence[(topic_id, partition)] = sequence + records
                batches.append(
                    batch(
                        topic_id,
                        partition,
                        records,
                        size=self.random.randint(50, 900),
                        producer_id=self.producer.producer_id,
                        epoch=self.producer.epoch,
                        sequence=sequence,
                    )
                )
            else:
                batches.append(batch(topic_id, partition, records, size=self.random.randint(50, 900)))
        batches = laid_out(batches)
        owners = sorted({self.coordinator_of[(b.topic_id, b.partition)] for b in batches})
        self.random.shuffle(owners)
        return pb.CommitFileRequest(
            object_key=f"wal/{uuid.uuid4()}",
            object_format=1,
            file_size=batches[-1].byte_offset + batches[-1].size,
            uploader_broker_id=self.index,
            owner_ids=owners,
            batches=batches,
        )

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address)
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        try:
            while not self.stop_event.is_set():
                request = self.next_request()
                self.ledger.record_sent(request)
                try:
                    response = stub.CommitFile(request, timeout=20)
                except grpc.RpcError:
                    # The kill cut the call: it may or may not be durable.
                    with self.ledger.lock:
                        self.ledger.calls_cut_by_the_kill += 1
                    if self.producer is not None:
                        self.producer.unanswered = request
                    return
                record_answer(self.ledger, request, response, None)
        finally:
            channel.close()


def record_answer(
    ledger: Ledger, request: pb.CommitFileRequest, response: pb.CommitFileResponse, original_key: str | None
) -> None:
    """Books each NONE answer; a duplicate (of an earlier call of `original_key`) keeps its original place."""
    assert len(response.batches) == len(request.batches)
    for sent, answer in zip(request.batches, response.batches, strict=True):
        if answer.error_code != pb.NONE:
            ledger.unexpected.append(f"{request.object_key}: {pb.ErrorCode.Name(answer.error_code)} {answer}")
            continue
        if answer.is_duplicate and original_key is None:
            ledger.unexpected.append(f"{request.object_key}: a first attempt answered as a duplicate: {answer}")
            continue
        key = original_key if answer.is_duplicate else request.object_key
        if answer.is_duplicate:
            with ledger.lock:
                ledger.retried_duplicates += 1
        records = sent.last_offset - sent.base_offset + 1
        ledger.record_acknowledged(
            (sent.topic_id, sent.partition),
            Placement(
                key, sent.byte_offset, sent.size, answer.assigned_base_offset, answer.assigned_base_offset + records - 1
            ),
        )
    with ledger.lock:
        ledger.commits_acknowledged += 1


def retry_unanswered(server: ServerProcess, producers: list[Producer], ledger: Ledger) -> int:
    """An idempotent producer retries the batches of its cut call in a new file: a duplicate or a first commit."""
    retried = 0
    for producer in producers:
        if producer.unanswered is None:
            continue
        original, producer.unanswered = producer.unanswered, None
        retry = pb.CommitFileRequest()
        retry.CopyFrom(original)
        retry.object_key = f"wal/{uuid.uuid4()}"
        ledger.record_sent(retry)
        response = server.stub.CommitFile(retry, timeout=30)
        record_answer(ledger, retry, response, original.object_key)
        retried += 1
    return retried


def verify_everything_acknowledged_is_served(server: ServerProcess, ledger: Ledger, topics: dict[bytes, int]) -> int:
    """Every acknowledged batch at its offsets and place; I3 per partition; nothing that was never sent."""
    batches_found = 0
    for topic_id, partition_count in topics.items():
        for partition in range(partition_count):
            key = (topic_id, partition)
            found, log_start, high_watermark = fetch_all_batches(server.stub, topic_id, partition)
            assert log_start == 0
            expected_base = 0
            for info in found:
                assert info.base_offset == expected_base, (
                    f"I3: partition {partition}: a batch at {info.base_offset}..{info.last_offset} after offset "
                    f"{expected_base - 1} ({'overlap' if info.base_offset < expected_base else 'gap'})"
                )
                assert info.last_offset >= info.base_offset
                expected_base = info.last_offset + 1
                origin = ledger.sent.get((info.object_key, info.byte_offset, info.byte_size))
                assert origin is not None, f"a batch nobody sent is served: {info}"
                assert origin == (key, info.last_offset - info.base_offset + 1), f"{info} was sent as {origin}"
            assert expected_base == high_watermark, f"partition {partition}: batches end at {expected_base}"
            served = {
                info.base_offset: Placement(
                    info.object_key, info.byte_offset, info.byte_size, info.base_offset, info.last_offset
                )
                for info in found
            }
            for placement in ledger.acknowledged.get(key, []):
                assert served.get(placement.base_offset) == placement, (
                    f"acknowledged {placement} is served as {served.get(placement.base_offset)}"
                )
            batches_found += len(found)
    return batches_found


def test_kill_during_concurrent_commits_loses_nothing_acknowledged(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        broker = Broker(server.stub, COORDINATORS)
        topics = {broker.create_topic(name, count): count for name, count in TOPICS.items()}
        coordinator_of = coordinators_of(server.stub, topics)
        assert set(coordinator_of.values()) == set(range(COORDINATORS)), "the topics must span every coordinator"
        partitions = sorted(coordinator_of)
        ledger = Ledger()
        producers = [Producer(producer_id=1000 + i) for i in range(0, COMMITTERS, IDEMPOTENT_EVERY)]
        rng = random.Random(1164)

        for round_number in range(ROUNDS):
            stop = threading.Event()
            committers = [
                Committer(
                    i,
                    server.address,
                    partitions,
                    coordinator_of,
                    ledger,
                    stop,
                    producers[i // IDEMPOTENT_EVERY] if i % IDEMPOTENT_EVERY == 0 else None,
                    seed=rng.getrandbits(32),
                )
                for i in range(COMMITTERS)
            ]
            acknowledged_before = ledger.commits_acknowledged
            for committer in committers:
                committer.start()
            # Kill in the middle of the load: once commits flow, after a random extra moment.
            deadline = time.monotonic() + 30
            while ledger.commits_acknowledged - acknowledged_before < 100 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.05, 0.4))
            assert all(c.is_alive() for c in committers), "every committer must still be committing at the kill"
            server.kill()
            stop.set()
            for committer in committers:
                committer.join(timeout=60)
                assert not committer.is_alive()
            assert ledger.commits_acknowledged - acknowledged_before >= 100
            assert ledger.calls_cut_by_the_kill > 0

            server.start()  # the same data directory
            for description in describe_coordinators(server.stub).values():
                assert description.error_code == pb.NONE and description.state == "ACTIVE", description
                assert description.applied_offset == description.high_watermark == description.log_end_offset
            retry_unanswered(server, producers, ledger)
            assert not ledger.unexpected, ledger.unexpected[:10]
            found = verify_everything_acknowledged_is_served(server, ledger, topics)
            acknowledged = sum(len(v) for v in ledger.acknowledged.values())
            assert found >= acknowledged

            assert server.stop() == 0, "".join(server.output[-50:])
            assert_state_equals_log_rebuild(server.data_dir, COORDINATORS, tmp_path / f"rebuilt-{round_number}")
            print(
                f"\nround {round_number}: {acknowledged} batches acknowledged so far, {found} served, "
                f"{ledger.calls_cut_by_the_kill} calls cut by kills, "
                f"{ledger.retried_duplicates} retried batches found durable (duplicates)"
            )
            server.start()
            # The idempotent producers go on in the next round with the sequences they were at.
        assert server.stop() == 0
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()
