"""The workload of the network-partition tests and its checks: idempotent producers committing through the routing
client (coordinator/client/routing_client.py), as a broker does, every call recorded with its start, end, answer and
the route it went to (the leader node and leader epoch the client held when the answer came: one call in flight per
client, so that is the route of its last try).

Checked at the end, besides tests/history.py's read-back (nothing acknowledged lost or moved, offsets unique and
contiguous per partition, resends answered as duplicates):

- `overlapping_leaders`: no acknowledgement by a leader of an older epoch whose call started after a newer epoch's
  leader (another node) had already acknowledged one: two leaders of one coordinator never both acknowledge;
- `acknowledged_by`: what one node acknowledged in a window (a minority side must acknowledge nothing).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from tests.cluster_harness import RETRIABLE
from tests.harness import batch
from tests.history import AcknowledgedBatch, History, attempt_object_key

CALL_DEADLINE_MS = 5_000  # the routing client's own retries of one call (refreshes, backoff) end by then
RPC_TIMEOUT_MS = 2_000  # one try to one node: a commit takes milliseconds, a cut-off node never answers
RETRY_PAUSE_S = 0.05
STOP_TIMEOUT_S = 30.0


@final
@dataclass(frozen=True, slots=True)
class Call:
    """One CommitFile through the routing client: when it was sent and answered (time.monotonic()), the answer
    ("NONE", another error code's name, or the exception raised) and the route it went to."""

    producer_id: int
    sequence: int
    attempt: int
    coordinator_id: int
    sent_at: float
    answered_at: float
    outcome: str
    offset: int
    leader_node_id: int
    leader_epoch: int

    @property
    def acknowledged(self) -> bool:
        return self.outcome == "NONE"


@final
class RoutedLoad:
    """One producer per partition, each with a routing client of its own, on one event loop in a thread."""

    def __init__(
        self,
        addresses: Sequence[str],
        history: History,
        topic_id: bytes,
        coordinator_by_partition: Sequence[int],
        first_producer_id: int = 100,
        pause_s: float = 0.005,
    ) -> None:
        self.addresses = list(addresses)
        self.history, self.topic_id = history, topic_id
        self.coordinator_by_partition = list(coordinator_by_partition)
        self.first_producer_id, self.pause_s = first_producer_id, pause_s
        self.calls: list[Call] = []  # appended by the loop's thread; read once it stopped, or under the GIL
        self.errors: list[str] = []  # non-retriable answers (their producer stops)
        self.last_acknowledged_sent_at = [-1.0] * len(self.coordinator_by_partition)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True, name="routed-load")

    def start(self) -> RoutedLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise AssertionError(f"the producers did not stop within {STOP_TIMEOUT_S} s")

    def flowing_since(self, at: float) -> bool:
        """Whether every producer had a batch sent at or after `at` acknowledged (raises on a non-retriable one)."""
        if self.errors:
            raise RuntimeError(f"non-retriable answers: {self.errors}")
        return all(sent_at >= at for sent_at in self.last_acknowledged_sent_at)

    async def _run(self) -> None:
        await asyncio.gather(*(self._produce(p) for p in range(len(self.coordinator_by_partition))))

    async def _produce(self, partition: int) -> None:
        producer_id = self.first_producer_id + partition
        coordinator_id = self.coordinator_by_partition[partition]
        async with RoutingClient(self.addresses, deadline_ms=CALL_DEADLINE_MS, rpc_timeout_ms=RPC_TIMEOUT_MS) as client:
            sequence = 0
            while not self._stopping.is_set():
                if not await self._commit(client, partition, producer_id, coordinator_id, sequence):
                    return
                sequence += 1
                await asyncio.sleep(self.pause_s)

    async def _commit(
        self, client: RoutingClient, partition: int, producer_id: int, coordinator_id: int, sequence: int
    ) -> bool:
        """Sends batch `sequence` until acknowledged: every other retry in the same file (a retried commit), the
        others in a new one (answered as a duplicate if an earlier try was stored). False: stop the producer."""
        attempt = 0
        object_key = attempt_object_key(producer_id, sequence, attempt)
        while not self._stopping.is_set():
            request = pb.CommitFileRequest(
                object_key=object_key, object_format=1, file_size=100, uploader_broker_id=1,
                owner_ids=[coordinator_id],
                batches=[batch(self.topic_id, partition, producer_id=producer_id, epoch=0, sequence=sequence)],
            )  # fmt: skip
            sent_at = time.monotonic()
            answer: pb.CommitFileResponse.BatchResult | None = None
            try:
                answer = (await client.commit_file(request)).batches[0]
                outcome = pb.ErrorCode.Name(answer.error_code)
            except Exception as error:  # RoutingError, DEADLINE_EXCEEDED: the call may or may not have run
                outcome = f"{type(error).__name__}: {str(error)[:120]}"
            answered_at = time.monotonic()
            route = client.routes().get(coordinator_id)
            leader = (
                self.addresses.index(route.leader_address) if route and route.leader_address in self.addresses else -1
            )
            offset = answer.assigned_base_offset if answer is not None else -1
            call = Call(producer_id, sequence, attempt, coordinator_id, sent_at, answered_at, outcome, offset, leader,
                        route.leader_epoch if route else -1)  # fmt: skip
            self.calls.append(call)
            if answer is not None and answer.error_code == pb.NONE:
                self.history.record(
                    AcknowledgedBatch(
                        producer_id, sequence, self.topic_id, partition, coordinator_id, offset, object_key,
                        answer.is_duplicate, sent_at, answered_at,
                    )
                )  # fmt: skip
                self.last_acknowledged_sent_at[partition] = sent_at
                return True
            if answer is not None and answer.error_code not in RETRIABLE:
                self.errors.append(f"producer {producer_id} sequence {sequence}: {outcome}: {answer.error_message}")
                return False
            attempt += 1
            if attempt % 2 == 0:
                object_key = attempt_object_key(producer_id, sequence, attempt)
            await asyncio.sleep(RETRY_PAUSE_S)
        return False


def overlapping_leaders(calls: Sequence[Call]) -> list[str]:
    """Acknowledgements by a leader (node, epoch) whose call started after another node, leading a newer epoch of
    the same coordinator, had already acknowledged one: the old leader went on acknowledging once the new one had
    begun (split brain). Empty when leaderships followed one another."""
    first_answer: dict[tuple[int, int], tuple[float, int]] = {}  # (coordinator, epoch) -> (first ack's time, node)
    for call in calls:
        if call.acknowledged:
            key = (call.coordinator_id, call.leader_epoch)
            if key not in first_answer or call.answered_at < first_answer[key][0]:
                first_answer[key] = (call.answered_at, call.leader_node_id)
    found = []
    for call in calls:
        if not call.acknowledged:
            continue
        for (coordinator_id, epoch), (answered_at, node_id) in first_answer.items():
            if (
                coordinator_id == call.coordinator_id
                and epoch > call.leader_epoch
                and node_id != call.leader_node_id
                and answered_at < call.sent_at
            ):
                found.append(
                    f"coordinator {coordinator_id}: node {call.leader_node_id} (epoch {call.leader_epoch}) "
                    f"acknowledged producer {call.producer_id} sequence {call.sequence} sent {call.sent_at:.3f}, "
                    f"after node {node_id} (epoch {epoch}) acknowledged at {answered_at:.3f}"
                )
    return found


def acknowledged_by(calls: Sequence[Call], node_id: int, sent_after: float, answered_before: float) -> list[Call]:
    """The node's acknowledgements of calls sent after `sent_after` and answered before `answered_before`."""
    return [
        c
        for c in calls
        if c.acknowledged and c.leader_node_id == node_id and c.sent_at > sent_after and c.answered_at < answered_before
    ]


def outcomes(calls: Sequence[Call]) -> dict[str, int]:
    """How many calls ended each way (exception texts cut to their type)."""
    counted: dict[str, int] = {}
    for call in calls:
        kind = call.outcome.split(":")[0]
        counted[kind] = counted.get(kind, 0) + 1
    return dict(sorted(counted.items()))
