"""What the brokers were told, and the check that all of it can still be found: nothing acknowledged is lost.

A scenario that kills nodes (the failover) records where every acknowledged batch was put, by partition: its
assigned offset and its file's object key. At the end every partition is read back from its log start with
FindBatches (through the routing client, from each coordinator's leader) and each acknowledged batch must be
there, at its offset, in its file.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import final

from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb

INT32_MAX = 2**31 - 1
LOST_SHOWN_MAX = 20  # lost batches named in the results; the count covers them all
PAGES_MAX = 1_000_000  # FindBatches calls for one check: a bound, far above what a run can need
PARTITIONS_READ_TOGETHER = 10  # read and checked together, then dropped: the memory is these partitions' batches


@final
class AcknowledgedBatches:
    """(partition, offset) -> object key of every acknowledged batch, in arrays: a long run acknowledges millions."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._offsets: dict[int, array[int]] = {}
        self._key_indices: dict[int, array[int]] = {}

    def add(self, object_key: str, placed: Iterable[tuple[int, int]]) -> None:
        """One acknowledged file: each stored batch's (partition, assigned offset)."""
        key_index = len(self._keys)
        self._keys.append(object_key)
        for partition, offset in placed:
            if partition not in self._offsets:
                self._offsets[partition] = array("q")
                self._key_indices[partition] = array("q")
            self._offsets[partition].append(offset)
            self._key_indices[partition].append(key_index)

    @property
    def batches(self) -> int:
        return sum(len(offsets) for offsets in self._offsets.values())

    @property
    def partitions(self) -> list[int]:
        return sorted(self._offsets)

    def of_partition(self, partition: int) -> list[tuple[int, str]]:
        """(offset, object key) of the partition's acknowledged batches, in the order they were acknowledged."""
        offsets = self._offsets.get(partition, array("q"))
        indices = self._key_indices.get(partition, array("q"))
        return [(offset, self._keys[index]) for offset, index in zip(offsets, indices, strict=True)]


@dataclass(slots=True)
class Verification:
    acknowledged: int = 0  # batches acknowledged and looked for
    found: int = 0  # batches FindBatches returned over the partitions checked
    lost: int = 0  # acknowledged batches not at their offset in their file
    lost_shown: list[str] = field(default_factory=list)
    offset_gaps: int = 0  # places where a batch does not start right after the one before it


def lost_in_partition(partition: int, acknowledged: Iterable[tuple[int, str]], found: Mapping[int, str]) -> list[str]:
    """Each acknowledged (offset, key) not found at that offset with that key, said in a sentence."""
    lost = []
    for offset, key in acknowledged:
        stored = found.get(offset)
        if stored != key:
            where = "nothing" if stored is None else f"a batch of {stored}"
            lost.append(f"partition {partition} offset {offset}: acknowledged in {key}, found {where}")
    return lost


async def verify(client: RoutingClient, topic_id: bytes, acknowledged: AcknowledgedBatches) -> Verification:
    """Reads every acknowledged partition from its log start and looks for every acknowledged batch."""
    outcome = Verification(acknowledged=acknowledged.batches)
    partitions = acknowledged.partitions
    for first in range(0, len(partitions), PARTITIONS_READ_TOGETHER):
        chosen = partitions[first : first + PARTITIONS_READ_TOGETHER]
        found = await _read_partitions(client, topic_id, chosen, outcome)
        for partition, stored in found.items():
            lost = lost_in_partition(partition, acknowledged.of_partition(partition), stored)
            outcome.lost += len(lost)
            outcome.lost_shown += lost[: max(0, LOST_SHOWN_MAX - len(outcome.lost_shown))]
    return outcome


async def _read_partitions(
    client: RoutingClient, topic_id: bytes, partitions: list[int], outcome: Verification
) -> dict[int, dict[int, str]]:
    """offset -> object key of every batch of the partitions, paging FindBatches until each reaches its HWM."""
    cursors = dict.fromkeys(partitions, 0)
    stored: dict[int, dict[int, str]] = {p: {} for p in partitions}
    for _ in range(PAGES_MAX):
        if not cursors:
            return stored
        request = pb.FindBatchesRequest(
            fetch_max_bytes=INT32_MAX,
            topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[
                pb.FindBatchesRequest.Partition(partition=p, offset=o, max_partition_fetch_bytes=INT32_MAX)
                for p, o in sorted(cursors.items())])],
        )  # fmt: skip
        answer = await client.find_batches(request)
        for result in answer.topics[0].partitions:
            if result.error_code != pb.NONE:
                raise RuntimeError(f"FindBatches partition {result.partition} from {cursors[result.partition]}: "
                                   f"{pb.ErrorCode.Name(result.error_code)} {result.error_message}")  # fmt: skip
            for batch in result.batches:
                if batch.base_offset != cursors[result.partition]:
                    outcome.offset_gaps += 1
                stored[result.partition][batch.base_offset] = batch.object_key
                cursors[result.partition] = batch.last_offset + 1
            outcome.found += len(result.batches)
            if cursors[result.partition] >= result.high_watermark:
                del cursors[result.partition]
    raise RuntimeError(f"FindBatches: partitions {sorted(cursors)} not read to their end in {PAGES_MAX} calls")
