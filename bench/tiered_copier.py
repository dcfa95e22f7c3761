"""A simulated tiered-storage copier (KIP-405's RemoteLogManager) for the retention soak (bench/retention_soak.py).

Like Kafka's RLM copier, every `interval_s` it offloads each partition's oldest local batches: it reads them from the
local log start with FindBatches (as a copier building a segment reads them), takes the batches, oldest first, while
their timestamp is older than `local_retention_ms` (Kafka's `local.retention.ms`: local data kept after it is
copied; the walk stops at the first younger batch, as Kafka stops at the active segment), "uploads" them as one
segment (nothing is written: the segment's content is not the point) and commits it with CommitRemoteLogSegments;
the coordinator forgets those batches. Like RLM's expiration task, it also expires its remote segments by
`retention.ms`: a segment whose newest batch is older than now - retention.ms is deleted (whole segments, oldest
first), and DeleteRecords moves the partition's log start past it (DESIGN §4a: below the local start only the log
start moves). So local batches are bounded by the offload, the remote range by retention.

Everything goes through the routing client, as a Python broker would. A segment is at most
`segment_batch_max` batches (the node's `diskless.coordinator.remote.segment.batch.max` divided among the partitions
of one call), so a backlog takes several passes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from dataclasses import dataclass, field

from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb

FETCH_MAX_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class CopierStats:
    passes: int = 0
    segments: int = 0
    offloaded_batches: int = 0
    expired_segments: int = 0
    expired_batches: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    pass_spans: list[tuple[float, float]] = field(default_factory=list)  # (start, end), monotonic


@dataclass(slots=True)
class _Segment:
    end_offset: int  # one past its last offset
    batches: int
    max_timestamp: int


class TieredCopier:
    def __init__(
        self, client: RoutingClient, topic_id: bytes, partitions: int, local_retention_ms: int, retention_ms: int,
        interval_s: float, segment_batch_max: int,
    ) -> None:  # fmt: skip
        self._client = client
        self._topic_id = topic_id
        self._partitions = partitions
        self._local_retention_ms = local_retention_ms
        self._retention_ms = retention_ms
        self._interval_s = interval_s
        self._segment_batch_max = max(1, segment_batch_max)
        self._local_starts = [0] * partitions
        self._segments: list[collections.deque[_Segment]] = [collections.deque() for _ in range(partitions)]
        self.stats = CopierStats()

    @property
    def remote_batches(self) -> int:
        return sum(segment.batches for segments in self._segments for segment in segments)

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every interval (from the start of the last one) until `stop`."""
        while not stop.is_set():
            started = time.monotonic()
            await self.run_pass()
            self.stats.pass_spans.append((started, time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, started + self._interval_s - time.monotonic()))

    async def run_pass(self) -> None:
        self.stats.passes += 1
        now_ms = time.time_ns() // 1_000_000
        await self._offload(now_ms)
        await self._expire(now_ms)

    async def _offload(self, now_ms: int) -> None:
        found = await self._client.find_batches(pb.FindBatchesRequest(
            fetch_max_bytes=FETCH_MAX_BYTES, max_batches_per_partition=self._segment_batch_max,
            topics=[pb.FindBatchesRequest.Topic(topic_id=self._topic_id, partitions=[
                pb.FindBatchesRequest.Partition(partition=p, offset=self._local_starts[p],
                                                max_partition_fetch_bytes=FETCH_MAX_BYTES)
                for p in range(self._partitions)
            ])],
        ))  # fmt: skip
        copy_before_ms = now_ms - self._local_retention_ms
        segments: list[tuple[int, int, _Segment]] = []  # (partition, start, segment)
        for result in found.topics[0].partitions:
            if result.error_code == pb.OFFSET_MOVED_TO_TIERED_STORAGE:  # someone else moved the local start
                self._local_starts[result.partition] = result.local_log_start_offset
                continue
            if result.error_code != pb.NONE:
                self.stats.errors[f"FindBatches {pb.ErrorCode.Name(result.error_code)}"] += 1
                continue
            start = self._local_starts[result.partition]
            end, count, newest = start, 0, -1
            for batch in result.batches:
                if batch.batch_max_timestamp >= copy_before_ms:
                    break  # the first batch kept locally: the segment ends before it
                end, count, newest = batch.last_offset + 1, count + 1, max(newest, batch.batch_max_timestamp)
            if count:
                segments.append((result.partition, start, _Segment(end, count, newest)))
        if not segments:
            return
        answer = await self._client.commit_remote_log_segments(pb.CommitRemoteLogSegmentsRequest(topics=[
            pb.CommitRemoteLogSegmentsRequest.Topic(topic_id=self._topic_id, partitions=[
                pb.CommitRemoteLogSegmentsRequest.Partition(
                    partition=p, start_offset=start, end_offset=segment.end_offset,
                    remote_log_segment_id=f"{p}-{start}-{segment.end_offset}",
                )
                for p, start, segment in segments
            ])
        ]))  # fmt: skip
        committed = {partition: segment for partition, _, segment in segments}
        for offloaded in answer.topics[0].partitions:
            partition, segment = offloaded.partition, committed[offloaded.partition]
            if offloaded.error_code != pb.NONE:
                self.stats.errors[f"CommitRemoteLogSegments {pb.ErrorCode.Name(offloaded.error_code)}"] += 1
                continue
            self._local_starts[partition] = offloaded.local_log_start_offset
            self._segments[partition].append(segment)
            self.stats.segments += 1
            self.stats.offloaded_batches += segment.batches

    async def _expire(self, now_ms: int) -> None:
        """RLM's remote expiry by retention.ms: whole segments, oldest first, then the log start moves past them."""
        if self._retention_ms < 0:
            return
        moves: dict[int, tuple[int, int, int]] = {}  # partition -> (new log start, segments, batches)
        for partition, segments in enumerate(self._segments):
            while segments and segments[0].max_timestamp < now_ms - self._retention_ms:
                segment = segments.popleft()
                _, count, batches = moves.get(partition, (0, 0, 0))
                moves[partition] = (segment.end_offset, count + 1, batches + segment.batches)
        if not moves:
            return
        answer = await self._client.delete_records(pb.DeleteRecordsRequest(topics=[
            pb.DeleteRecordsRequest.Topic(topic_id=self._topic_id, partitions=[
                pb.DeleteRecordsRequest.Partition(partition=p, offset=offset) for p, (offset, _, _) in moves.items()
            ])
        ]))  # fmt: skip
        for deleted in answer.topics[0].partitions:
            if deleted.error_code != pb.NONE:
                self.stats.errors[f"DeleteRecords {pb.ErrorCode.Name(deleted.error_code)}"] += 1
                continue
            _, count, batches = moves[deleted.partition]
            self.stats.expired_segments += count
            self.stats.expired_batches += batches
