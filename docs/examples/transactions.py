"""Kafka transactions on a diskless topic, as brokers commit them (DESIGN §4b), through the routing client.

Run it against a node (default 127.0.0.1:50051), as often as you like:

    .venv/bin/python docs/examples/transactions.py [HOST:PORT]

Two transactional producers write to partition 0 of the topic `payments`, each batch in a WAL file of its own. The
transaction coordinator then has the first committed and the second aborted: the broker it sends WriteTxnMarkers to
writes each marker (a control batch) into a later WAL file and commits it like any batch. A read_committed consumer
reads the partition back: FindBatches with READ_COMMITTED stops below the last stable offset while a transaction is
open and lists the aborted transactions, whose batches the consumer drops.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb

TOPIC = "payments"
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, f"diskless-example/{TOPIC}").bytes  # the same id on every run
PARTITION = 0


def require_none(error_code: int, error_message: str, what: str) -> None:
    if error_code != pb.NONE:
        sys.exit(f"{what}: {pb.ErrorCode.Name(error_code)} {error_message}")


def data_batch(producer_id: int, sequence: int, records: int) -> pb.CommitFileRequest.Batch:
    """A transactional batch (attributes bit 4): an idempotent producer's fields, `is_transactional` set."""
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=TOPIC_ID, partition=PARTITION, byte_offset=0, size=500, base_offset=0,
        last_offset=records - 1, batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME,
        producer_id=producer_id, producer_epoch=0, base_sequence=sequence, last_sequence=sequence + records - 1,
        is_transactional=True,
    )  # fmt: skip


def marker(producer_id: int, commit: bool) -> pb.CommitFileRequest.Batch:
    """A transaction marker (a control batch): one record, no sequence, the transaction coordinator's epoch."""
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=TOPIC_ID, partition=PARTITION, byte_offset=0, size=78, base_offset=0, last_offset=0,
        batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME, producer_id=producer_id,
        producer_epoch=0, base_sequence=-1, last_sequence=-1, is_transactional=True, is_control=True,
        control_type=pb.CONTROL_COMMIT if commit else pb.CONTROL_ABORT, coordinator_epoch=0,
    )  # fmt: skip


async def commit(client: RoutingClient, batch: pb.CommitFileRequest.Batch, owner: int) -> int:
    """One WAL file holding one batch; the batch's assigned base offset."""
    name = uuid.uuid4().hex
    request = pb.CommitFileRequest(
        object_key=f"wal/{name[:2]}/{name}.wal", object_format=1, file_size=batch.size, uploader_broker_id=1,
        owner_ids=[owner], batches=[batch],
    )  # fmt: skip
    result = (await client.commit_file(request)).batches[0]
    require_none(result.error_code, result.error_message, "CommitFile")
    return result.assigned_base_offset


async def read_committed(client: RoutingClient, offset: int) -> pb.FindBatchesResponse.PartitionResult:
    wanted = pb.FindBatchesRequest.Partition(partition=PARTITION, offset=offset, max_partition_fetch_bytes=1 << 20)
    request = pb.FindBatchesRequest(
        fetch_max_bytes=1 << 20,
        isolation_level=pb.READ_COMMITTED,
        topics=[pb.FindBatchesRequest.Topic(topic_id=TOPIC_ID, partitions=[wanted])],
    )
    partition = (await client.find_batches(request)).topics[0].partitions[0]
    require_none(partition.error_code, partition.error_message, "FindBatches")
    return partition


def consumed(partition: pb.FindBatchesResponse.PartitionResult) -> list[str]:
    """What a read_committed consumer keeps: data batches, less the aborted producers' from their first offset on."""
    aborted = {(a.producer_id, a.first_offset) for a in partition.aborted_transactions}
    dropped_from = {producer: first for producer, first in aborted}
    kept = []
    for batch in partition.batches:
        if batch.is_control:
            dropped_from.pop(batch.producer_id, None)  # the ABORT marker ends its producer's aborted range
            continue
        if batch.producer_id in dropped_from and batch.base_offset >= dropped_from[batch.producer_id]:
            continue
        kept.append(f"{batch.base_offset}..{batch.last_offset}")
    return kept


async def main(address: str) -> None:
    async with RoutingClient(address) as client:
        topic = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC_ID, name=TOPIC, num_partitions=1)
        created = (await client.create_partitions(pb.CreatePartitionsRequest(topics=[topic]))).topics[0]
        if created.error_code == pb.TOPIC_ALREADY_EXISTS:
            sys.exit(f"a topic {TOPIC!r} with another id exists on this node: {created.error_message}")
        require_none(created.error_code, created.error_message, f"CreatePartitions {TOPIC}")
        (owner,) = await client.coordinators_of(TOPIC_ID, [PARTITION])
        if owner < 0:
            sys.exit(f"FindCoordinator {TOPIC}-{PARTITION}: no coordinator now")

        paid, refunded = uuid.uuid4().int >> 66, uuid.uuid4().int >> 66  # two new producers per run
        first = await commit(client, data_batch(paid, 0, 5), owner)
        await commit(client, data_batch(refunded, 0, 3), owner)
        await commit(client, data_batch(paid, 5, 5), owner)
        waiting = await read_committed(client, first)
        print(f"both open: last stable offset {waiting.last_stable_offset}, {len(waiting.batches)} batches readable")

        await commit(client, marker(paid, commit=True), owner)
        await commit(client, marker(refunded, commit=False), owner)
        done = await read_committed(client, first)
        aborted = [a.first_offset for a in done.aborted_transactions]
        print(f"committed and aborted: last stable offset {done.last_stable_offset}, aborted from {aborted}")
        print(f"a read_committed consumer keeps {consumed(done)}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"))
