"""Transactions through the real socket (DESIGN §4b): CommitFile with transactional batches and markers, FindBatches
and ListOffsets READ_COMMITTED, DescribeProducers, from the node and through the routing client."""

from __future__ import annotations

import asyncio
from typing import Any

from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from tests.harness import Broker, batch, laid_out, topic_name
from tests.in_process import InProcessNode
from tests.test_transactions_core import marker


def txn_batch(topic_id: bytes, partition: int, records: int, producer: int, sequence: int, epoch: int = 0) -> Any:
    produced = batch(topic_id, partition, records, producer_id=producer, epoch=epoch, sequence=sequence)
    produced.is_transactional = True
    return produced


def marker_of(topic_id: bytes, partition: int, producer: int, commit: bool, coordinator_epoch: int = 0) -> Any:
    made = marker(0, producer, 0, commit, coordinator_epoch)
    made.topic_id = topic_id
    made.partition = partition
    return made


def codes(response: pb.CommitFileResponse) -> list[int]:
    return [b.error_code for b in response.batches]


def find(broker: Broker, topic_id: bytes, offset: int, committed: bool = True) -> Any:
    request = pb.FindBatchesRequest(
        fetch_max_bytes=2**31 - 1,
        isolation_level=pb.READ_COMMITTED if committed else pb.READ_UNCOMMITTED,
        topics=[
            pb.FindBatchesRequest.Topic(
                topic_id=topic_id,
                partitions=[
                    pb.FindBatchesRequest.Partition(partition=0, offset=offset, max_partition_fetch_bytes=2**30)
                ],
            )
        ],
    )
    return broker.stub.FindBatches(request).topics[0].partitions[0]


def latest(broker: Broker, topic_id: bytes, committed: bool) -> int:
    request = pb.ListOffsetsRequest(
        isolation_level=pb.READ_COMMITTED if committed else pb.READ_UNCOMMITTED,
        topics=[
            pb.ListOffsetsRequest.Topic(topic_id=topic_id, partitions=[pb.ListOffsetsRequest.Partition(timestamp=-1)])
        ],
    )
    return broker.stub.ListOffsets(request).topics[0].partitions[0].offset


def describe(broker: Broker, topic_id: bytes) -> Any:
    request = pb.DescribeProducersRequest(
        topics=[pb.DescribeProducersRequest.Topic(topic_id=topic_id, partitions=[0, 9])]
    )
    return broker.stub.DescribeProducers(request).topics[0].partitions


def test_a_committed_and_an_aborted_transaction_read_as_a_read_committed_consumer_reads_them(
    broker: Broker, server: InProcessNode
) -> None:
    topic_id = broker.create_topic(topic_name("txn"), 1)
    # Two producers' transactions interleaved, each batch in its own WAL file as brokers upload them.
    assert codes(broker.commit(laid_out([txn_batch(topic_id, 0, 2, 11, 0)]))) == [pb.NONE]  # 0..1
    assert codes(broker.commit(laid_out([txn_batch(topic_id, 0, 1, 12, 0)]))) == [pb.NONE]  # 2
    plain = broker.commit(laid_out([batch(topic_id, 0, 1, producer_id=11, epoch=0, sequence=2)]))
    assert codes(plain) == [pb.INVALID_TXN_STATE]
    open_both = find(broker, topic_id, 0)
    assert open_both.last_stable_offset == 0 and list(open_both.batches) == []
    assert latest(broker, topic_id, committed=True) == 0 and latest(broker, topic_id, committed=False) == 3
    (partition, unknown) = describe(broker, topic_id)
    assert [(p.producer_id, p.current_txn_start_offset, p.last_sequence) for p in partition.active_producers] == [
        (11, 0, 1),
        (12, 2, 0),
    ]
    assert unknown.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    # The markers come later, in files of their own: 11 aborts, 12 commits.
    assert codes(broker.commit(laid_out([marker_of(topic_id, 0, 11, commit=False, coordinator_epoch=4)]))) == [pb.NONE]
    middle = find(broker, topic_id, 0)
    assert middle.last_stable_offset == 2 and [b.base_offset for b in middle.batches] == [0]
    assert [(a.producer_id, a.first_offset) for a in middle.aborted_transactions] == [(11, 0)]
    assert codes(broker.commit(laid_out([marker_of(topic_id, 0, 12, commit=True)]))) == [pb.NONE]
    done = find(broker, topic_id, 0)
    assert done.last_stable_offset == done.high_watermark == 5
    assert [(b.base_offset, b.producer_id, b.is_transactional, b.is_control) for b in done.batches] == [
        (0, 11, True, False),
        (2, 12, True, False),
        (3, 11, True, True),
        (4, 12, True, True),
    ]
    assert [(a.producer_id, a.first_offset) for a in done.aborted_transactions] == [(11, 0)]
    assert list(find(broker, topic_id, 0, committed=False).aborted_transactions) == []
    (partition, _) = describe(broker, topic_id)
    assert [(p.producer_id, p.current_txn_start_offset, p.coordinator_epoch) for p in partition.active_producers] == [
        (11, -1, 4),
        (12, -1, 0),
    ]

    async def routed() -> tuple[Any, Any]:
        async with RoutingClient(server.address) as client:
            producers = await client.describe_producers(
                pb.DescribeProducersRequest(
                    topics=[pb.DescribeProducersRequest.Topic(topic_id=topic_id, partitions=[0])]
                )
            )
            found = await client.find_batches(
                pb.FindBatchesRequest(
                    fetch_max_bytes=2**20,
                    isolation_level=pb.READ_COMMITTED,
                    topics=[
                        pb.FindBatchesRequest.Topic(
                            topic_id=topic_id,
                            partitions=[pb.FindBatchesRequest.Partition(partition=0, max_partition_fetch_bytes=2**20)],
                        )
                    ],
                )
            )
            return producers, found

    producers, found = asyncio.run(routed())
    assert [p.producer_id for p in producers.topics[0].partitions[0].active_producers] == [11, 12]
    assert found.topics[0].partitions[0] == done
