"""Idempotent producers for runs under faults: each one commits one-record batches to one partition, through its
coordinator's leader, and records every acknowledgement in a `History`.

On a retriable answer, a timeout or a dead node it finds the leader again and resends the same batch (same producer
sequence), as a broker does: every other retry in the same file (a retried commit, answered as the first time) and
the others in a new file (the idempotent-producer rules answer a stored batch as a duplicate with its offset).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import cast, final

import grpc

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.cluster_harness import RETRIABLE
from tests.harness import batch
from tests.history import AcknowledgedBatch, History, attempt_object_key

RETRY_PAUSE_S = 0.05
COMMIT_TIMEOUT_S = 2.0  # a commit takes milliseconds: one unanswered this long went to a paused or dying leader
LOOKUP_TIMEOUT_S = 1.0
# A node restarted within a second must be reached at once, as a broker's client does after a metadata refresh
# (gRPC's default reconnect backoff starts at 1 s and grows to 2 min).
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)]


@final
class IdempotentProducer(threading.Thread):
    """One producer id, one partition; `stop()` ends it after the batch in hand is acknowledged or given up."""

    def __init__(
        self,
        addresses: Sequence[str],
        history: History,
        topic_id: bytes,
        partition: int,
        producer_id: int,
        pause_s: float = 0.0,
    ) -> None:
        super().__init__(daemon=True, name=f"producer-{producer_id}")
        self.history, self.topic_id, self.partition, self.producer_id = history, topic_id, partition, producer_id
        self.pause_s = pause_s  # between two acknowledged batches: the load's pace
        self.errors: list[str] = []  # non-retriable answers (the producer stops at the first)
        self.coordinator_id = -1
        self.last_acknowledged_sent_at = -1.0  # time.monotonic() when the last acknowledged batch was sent
        self._stopping = threading.Event()
        self._channels = {address: grpc.insecure_channel(address, options=CHANNEL_OPTIONS) for address in addresses}

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stopping.set()
        self.join(timeout=timeout_s)
        if self.is_alive():
            raise AssertionError(f"producer {self.producer_id} did not stop within {timeout_s} s")

    def _stub(self, address: str) -> pb_grpc.DisklessCoordinatorStub:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        return pb_grpc.DisklessCoordinatorStub(self._channels[address])

    def find_leader(self) -> pb_grpc.DisklessCoordinatorStub | None:
        """Asks every node at once; the answer naming the newest leader epoch wins (a node back from a pause may
        still name an old leader)."""
        request = pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=self.topic_id, partitions=[self.partition])]
        )
        asked = [
            cast("Future[pb.FindCoordinatorResponse]",
                 self._stub(address).FindCoordinator.future(request, timeout=LOOKUP_TIMEOUT_S))
            for address in list(self._channels)
        ]  # fmt: skip
        newest: pb.CoordinatorEndpoint | None = None
        for future in asked:
            try:
                found = future.result()
            except grpc.RpcError:
                continue
            if not found.coordinators or found.coordinators[0].leader_node_id < 0:
                continue
            self.coordinator_id = found.topics[0].partitions[0].coordinator_id
            if newest is None or found.coordinators[0].leader_epoch > newest.leader_epoch:
                newest = found.coordinators[0]
        return None if newest is None else self._stub(f"{newest.host}:{newest.port}")

    def run(self) -> None:
        try:
            sequence = 0
            while not self._stopping.is_set() and self._commit(sequence):
                sequence += 1
                if self.pause_s:
                    time.sleep(self.pause_s)
        finally:
            for channel in self._channels.values():
                channel.close()

    def _commit(self, sequence: int) -> bool:
        """Sends batch `sequence` until it is acknowledged; False if the producer stops or meets a non-retriable
        answer."""
        attempt, stub = 0, None
        object_key = attempt_object_key(self.producer_id, sequence, attempt)
        while not self._stopping.is_set():
            stub = stub or self.find_leader()
            if stub is None:
                time.sleep(RETRY_PAUSE_S)
                continue
            request = pb.CommitFileRequest(
                object_key=object_key, object_format=1, file_size=100, uploader_broker_id=1,
                owner_ids=[self.coordinator_id],
                batches=[batch(self.topic_id, self.partition, producer_id=self.producer_id, epoch=0,
                               sequence=sequence)],
            )  # fmt: skip
            sent_at = time.monotonic()
            try:
                answer: pb.CommitFileResponse.BatchResult | None = stub.CommitFile(
                    request, timeout=COMMIT_TIMEOUT_S
                ).batches[0]
            except grpc.RpcError:
                answer = None
            if answer is not None and answer.error_code == pb.NONE:
                self.history.record(
                    AcknowledgedBatch(
                        self.producer_id, sequence, self.topic_id, self.partition, self.coordinator_id,
                        answer.assigned_base_offset, object_key, answer.is_duplicate, sent_at, time.monotonic(),
                    )
                )  # fmt: skip
                self.last_acknowledged_sent_at = sent_at
                return True
            if answer is not None and answer.error_code not in RETRIABLE:
                self.errors.append(
                    f"producer {self.producer_id} sequence {sequence}: "
                    f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}"
                )
                return False
            attempt, stub = attempt + 1, None
            if attempt % 2 == 0:  # odd retries in the same file, even ones in a new file
                object_key = attempt_object_key(self.producer_id, sequence, attempt)
            time.sleep(RETRY_PAUSE_S)
        return False


@final
class Load:
    """One idempotent producer per partition of a topic, all recording in one history."""

    def __init__(
        self,
        addresses: Sequence[str],
        history: History,
        topic_id: bytes,
        partitions: int,
        first_producer_id: int = 100,
        pause_s: float = 0.0,
    ) -> None:
        self.producers = [
            IdempotentProducer(addresses, history, topic_id, partition, first_producer_id + partition, pause_s)
            for partition in range(partitions)
        ]

    def start(self) -> Load:
        for producer in self.producers:
            producer.start()
        return self

    def stop(self) -> None:
        for producer in self.producers:
            producer.stop()

    @property
    def errors(self) -> list[str]:
        return [error for producer in self.producers for error in producer.errors]

    def flowing_since(self, at: float) -> bool:
        """Whether every producer has had a batch sent at or after `at` acknowledged; raises on a non-retriable
        answer (a RuntimeError, which `wait_for` does not wait out)."""
        if self.errors:
            raise RuntimeError(f"non-retriable answers: {self.errors}")
        return all(producer.last_acknowledged_sent_at >= at for producer in self.producers)
