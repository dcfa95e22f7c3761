"""What a broker does, in a few calls: create a topic, commit a WAL file, retry it, find the batch again.

Run it against a node (default 127.0.0.1:50051), as often as you like:

    .venv/bin/python docs/examples/commit_and_fetch.py [HOST:PORT]

The topic's id is derived from its name, so a second run finds the topic as it is (CreatePartitions
answers NONE and changes nothing); each run is a new producer and commits a new WAL file, whose batch
gets the partition's next offsets. Every answer carries a Kafka error code per item: check it.
"""

from __future__ import annotations

import sys
import uuid

import grpc

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

TOPIC = "orders"
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, f"diskless-example/{TOPIC}").bytes  # the same id on every run
PARTITION = 0


def require_none(error_code: int, error_message: str, what: str) -> None:
    if error_code != pb.NONE:
        sys.exit(f"{what}: {pb.ErrorCode.Name(error_code)} {error_message}")


def wal_key() -> str:
    """A new WAL file's key, named as brokers name them: wal/<first two hex digits>/<uuid>.wal."""
    name = uuid.uuid4().hex
    return f"wal/{name[:2]}/{name}.wal"


def commit(stub: pb_grpc.DisklessCoordinatorStub, owner: int, producer_id: int) -> tuple[str, pb.CommitFileResponse]:
    """Commits a 1,000-byte WAL file holding one batch of 10 records of an idempotent producer."""
    batch = pb.CommitFileRequest.Batch(
        magic=2, topic_id=TOPIC_ID, partition=PARTITION, byte_offset=0, size=1000,
        base_offset=0, last_offset=9, batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME,
        producer_id=producer_id, producer_epoch=0, base_sequence=0, last_sequence=9,
    )  # fmt: skip
    key = wal_key()
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=1000, uploader_broker_id=1, owner_ids=[owner], batches=[batch]
    )
    return key, stub.CommitFile(request, timeout=10)


def main(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        # One result per item asked, in order (the contract's rule), so [0] is this topic's.
        topic = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC_ID, name=TOPIC, num_partitions=3)
        created = stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[topic]), timeout=10).topics[0]
        if created.error_code == pb.TOPIC_ALREADY_EXISTS:
            sys.exit(f"a topic {TOPIC!r} with another id exists on this node: {created.error_message}")
        require_none(created.error_code, created.error_message, f"CreatePartitions {TOPIC}")

        asked = pb.FindCoordinatorRequest.Topic(topic_id=TOPIC_ID, partitions=[PARTITION])
        found = stub.FindCoordinator(pb.FindCoordinatorRequest(topics=[asked]), timeout=10).topics[0].partitions[0]
        require_none(found.error_code, "", f"FindCoordinator {TOPIC}-{PARTITION}")
        print(f"{TOPIC}-{PARTITION} is on coordinator {found.coordinator_id}")

        producer_id = uuid.uuid4().int >> 66  # a new producer per run (a broker gets ids from Kafka)
        key, answer = commit(stub, found.coordinator_id, producer_id)
        result = answer.batches[0]
        require_none(result.error_code, result.error_message, f"CommitFile {key}")
        offset = result.assigned_base_offset
        print(f"committed {key}: offsets {offset}..{offset + 9}")

        # The producer resends the same batch (its answer was lost) in another WAL file: it keeps its offsets.
        retry_key, answer = commit(stub, found.coordinator_id, producer_id)
        retried = answer.batches[0]
        require_none(retried.error_code, retried.error_message, f"CommitFile {retry_key}")
        print(f"resent in {retry_key}: duplicate={retried.is_duplicate}, offset {retried.assigned_base_offset}")

        wanted = pb.FindBatchesRequest.Partition(partition=PARTITION, offset=offset, max_partition_fetch_bytes=1 << 20)
        fetch = pb.FindBatchesRequest(
            fetch_max_bytes=1 << 20, topics=[pb.FindBatchesRequest.Topic(topic_id=TOPIC_ID, partitions=[wanted])]
        )
        partition = stub.FindBatches(fetch, timeout=10).topics[0].partitions[0]
        require_none(partition.error_code, partition.error_message, f"FindBatches {TOPIC}-{PARTITION}")
        if not partition.batches:
            sys.exit(f"FindBatches found nothing at offset {offset} (high watermark {partition.high_watermark})")
        first = partition.batches[0]
        end = first.byte_offset + first.byte_size
        print(f"offset {offset} is in {first.object_key}, bytes {first.byte_offset}..{end}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")
