"""A broker that writes WAL files of genuine Kafka v2 record batches, and a consumer that reads them back.

The consolidation tests and `diskless bench consolidate` use it so that "the same bytes at every offset
before and after" is checked by decoding records (spark/record_batches.py, itself checked against
kafka-python), not by comparing opaque blobs. Like a diskless broker, `WalBroker.write_file` encodes each
partition's batch with the producer's offsets (from 0), lays the batches one after another in one object,
uploads it and commits it with CommitFile (owners: the coordinators of its partitions, as FindCoordinator
names them); `read_partition` asks FindBatches for every batch from the log start, reads each byte range
from the store and decodes it, each record at its assigned offset. `gets_to_read` counts the ranged
reads a consumer needs for the same partition (back-to-back batches of one object are one).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.files.object_store import ObjectStore, new_wal_key
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from spark.record_batches import Record, decode_records, encode_batch

INT32_MAX = 2**31 - 1
RPC_TIMEOUT_S = 60.0

Partition = tuple[bytes, int]  # (topic id, partition)
# A record as a consumer sees it: (offset, timestamp, key, value, headers).
ReadRecord = tuple[int, int, bytes | None, bytes | None, tuple[tuple[bytes, bytes], ...]]


@dataclass(frozen=True, slots=True)
class Piece:
    """One partition's batch in a WAL file."""

    topic_id: bytes
    partition: int
    records: tuple[Record, ...]


def sample_records(rng: random.Random, count: int, now_ms: int, value_bytes: int = 60) -> tuple[Record, ...]:
    """`count` records with random keys, values and a header, timestamps from `now_ms`."""
    return tuple(
        Record(
            i,
            now_ms + i,
            rng.randbytes(8) if rng.random() < 0.8 else None,
            rng.randbytes(value_bytes),
            ((b"h", rng.randbytes(4)),) if rng.random() < 0.3 else (),
        )
        for i in range(count)
    )


class WalBroker:
    def __init__(self, stub: pb_grpc.DisklessCoordinatorStub, store: ObjectStore, broker_id: int = 1) -> None:
        self.stub = stub
        self.store = store
        self.broker_id = broker_id
        self._owners: dict[Partition, int] = {}

    def create_topic(self, name: str, partitions: int) -> bytes:
        topic_id = uuid.uuid4().bytes
        answer = self.stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name=name, num_partitions=partitions)]
            ),
            timeout=RPC_TIMEOUT_S,
        )
        if answer.topics[0].error_code != pb.NONE:
            raise RuntimeError(f"CreatePartitions {name}: {answer.topics[0]}")
        return topic_id

    def coordinator_of(self, topic_id: bytes, partition: int) -> int:
        key = (topic_id, partition)
        if key not in self._owners:
            found = self.stub.FindCoordinator(
                pb.FindCoordinatorRequest(
                    topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[partition])]
                ),
                timeout=RPC_TIMEOUT_S,
            )
            coordinator_id = found.topics[0].partitions[0].coordinator_id
            if coordinator_id < 0:
                raise RuntimeError(f"FindCoordinator {topic_id.hex()}-{partition}: {found}")
            self._owners[key] = coordinator_id
        return self._owners[key]

    def build_file(self, pieces: Sequence[Piece]) -> tuple[bytes, list[pb.CommitFileRequest.Batch]]:
        """The object's bytes and the CommitFile batches describing them."""
        data, batches = bytearray(), list[pb.CommitFileRequest.Batch]()
        for piece in pieces:
            encoded = encode_batch(piece.records)
            batches.append(
                pb.CommitFileRequest.Batch(
                    magic=2,
                    request_id=len(batches),
                    topic_id=piece.topic_id,
                    partition=piece.partition,
                    byte_offset=len(data),
                    size=len(encoded),
                    base_offset=0,
                    last_offset=len(piece.records) - 1,
                    batch_max_timestamp=max(r.timestamp for r in piece.records),
                    timestamp_type=pb.CREATE_TIME,
                    producer_id=-1,
                    producer_epoch=-1,
                    base_sequence=-1,
                    last_sequence=-1,
                )
            )
            data += encoded
        return bytes(data), batches

    def write_file(self, pieces: Sequence[Piece], prefix: str = "") -> tuple[str, pb.CommitFileResponse]:
        """Uploads one WAL file of these pieces and commits it; every batch must be accepted."""
        data, batches = self.build_file(pieces)
        key = new_wal_key(prefix)
        self.store.put(key, data)
        owners = list(dict.fromkeys(self.coordinator_of(b.topic_id, b.partition) for b in batches))
        answer = self.commit(key, len(data), owners, batches)
        refused = [b for b in answer.batches if b.error_code != pb.NONE]
        if refused:
            raise RuntimeError(f"CommitFile {key}: {refused[0]}")
        return key, answer

    def commit(
        self, key: str, size: int, owners: list[int], batches: list[pb.CommitFileRequest.Batch]
    ) -> pb.CommitFileResponse:
        return self.stub.CommitFile(
            pb.CommitFileRequest(
                object_key=key,
                object_format=1,
                file_size=size,
                uploader_broker_id=self.broker_id,
                owner_ids=owners,
                batches=batches,
                timeout_ms=int(RPC_TIMEOUT_S * 1000),
            ),
            timeout=RPC_TIMEOUT_S,
        )


def find_all_batches(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int) -> list[pb.BatchInfo]:
    """Every batch of a partition from its log start, paging through FindBatches."""
    batches: list[pb.BatchInfo] = []
    offset = -1
    while True:
        wanted = pb.FindBatchesRequest.Partition(
            partition=partition, offset=max(offset, 0), max_partition_fetch_bytes=INT32_MAX
        )
        request = pb.FindBatchesRequest(
            fetch_max_bytes=INT32_MAX, topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=[wanted])]
        )
        result = stub.FindBatches(request, timeout=RPC_TIMEOUT_S).topics[0].partitions[0]
        if offset < 0 and result.error_code == pb.OFFSET_OUT_OF_RANGE and result.log_start_offset > 0:
            offset = result.log_start_offset
            continue
        if result.error_code != pb.NONE:
            raise RuntimeError(f"FindBatches {topic_id.hex()}-{partition}: {result}")
        batches.extend(result.batches)
        if not result.batches or result.batches[-1].last_offset + 1 >= result.high_watermark:
            return batches
        offset = result.batches[-1].last_offset + 1


def read_partition(
    stub: pb_grpc.DisklessCoordinatorStub, store: ObjectStore, topic_id: bytes, partition: int
) -> list[ReadRecord]:
    """Every record of a partition as a consumer reads it: found, fetched by byte range, decoded."""
    records: list[ReadRecord] = []
    for info in find_all_batches(stub, topic_id, partition):
        data = store.read_range(info.object_key, info.byte_offset, info.byte_size)
        if data is None:
            raise RuntimeError(f"{info.object_key} is missing: offsets {info.base_offset}..{info.last_offset}")
        header, decoded = decode_records(data)
        if header.last_offset_delta != info.last_offset - info.base_offset:
            raise RuntimeError(f"{info.object_key} at {info.byte_offset}: not the batch of {info.base_offset}")
        records.extend((info.base_offset + r.offset_delta, r.timestamp, r.key, r.value, r.headers) for r in decoded)
    return records


def gets_to_read(batches: Sequence[pb.BatchInfo]) -> int:
    """Ranged reads a consumer needs for these batches: back-to-back batches of one object are one read."""
    gets, previous = 0, None
    for info in batches:
        if (
            previous is None
            or previous.object_key != info.object_key
            or (previous.byte_offset + previous.byte_size != info.byte_offset)
        ):
            gets += 1
        previous = info
    return gets
