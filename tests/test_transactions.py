"""Transactions through the real socket (DESIGN §4b): CommitFile with transactional batches and markers, FindBatches
and ListOffsets READ_COMMITTED, DescribeProducers, from the node and through the routing client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.main import main
from coordinator.client.control_batch import decode_marker
from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from tests.harness import Broker, ServerProcess, batch, laid_out, topic_name
from tests.in_process import InProcessNode
from tests.test_operator_commands import diskless
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


def find(broker: Broker, topic_id: bytes, offset: int, committed: bool = True, partition: int = 0) -> Any:
    request = pb.FindBatchesRequest(
        fetch_max_bytes=2**31 - 1,
        isolation_level=pb.READ_COMMITTED if committed else pb.READ_UNCOMMITTED,
        topics=[
            pb.FindBatchesRequest.Topic(
                topic_id=topic_id,
                partitions=[
                    pb.FindBatchesRequest.Partition(partition=partition, offset=offset, max_partition_fetch_bytes=2**30)
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


# ---------------------------------------------------------------- `diskless transactions`


def _hanging_topic(broker: Broker) -> bytes:
    """A topic of 3 partitions whose partition 1 holds a transaction left open at offset 1 (a year-2023 timestamp)."""
    topic_id = broker.create_topic(topic_name("hanging"), 3)
    assert codes(broker.commit(laid_out([batch(topic_id, 1, 1), txn_batch(topic_id, 1, 2, 21, 0)]))) == [0, 0]
    assert codes(broker.commit(laid_out([txn_batch(topic_id, 2, 1, 22, 0), marker_of(topic_id, 2, 22, True)]))) == [
        0,
        0,
    ]
    return topic_id


def test_the_cli_finds_a_hanging_transaction_and_aborts_it_through_commit_file(
    server: InProcessNode, broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    topic_id = _hanging_topic(broker)
    target = ["--bootstrap", server.address, "--topic", topic_id.hex()]
    assert main(["transactions", "find-hanging", *target, "--max-transaction-timeout", "60", "--json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)["hanging"]
    assert (found["partition"], found["producer_id"], found["start_offset"]) == (1, 21, 1)
    assert main(["transactions", "find-hanging", *target, "--max-transaction-timeout", str(10**9), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hanging"] == []  # not idle that long
    assert main(["transactions", "abort", *target, "--partition", "1", "--start-offset", "1"]) == 2
    assert "give the nodes' settings file (--config FILE" in capsys.readouterr().err  # nowhere to upload the marker
    store = ["--data-dir", str(server.data_dir)]  # the node's embedded local store, <data dir>/objects
    assert main(["transactions", "abort", *target, *store, "--partition", "1", "--start-offset", "7"]) == 2
    assert "no transaction of partition 1 is open at offset 7" in capsys.readouterr().err
    assert main(["transactions", "abort", *target, *store, "--partition", "1", "--start-offset", "1", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["marker_offset"] == 3
    answer = find(broker, topic_id, 0, partition=1)
    assert answer.error_code == pb.NONE and answer.partition == 1
    assert answer.last_stable_offset == 4 and [
        (a.producer_id, a.first_offset) for a in answer.aborted_transactions
    ] == [(21, 1)]
    # The marker is a WAL object as a broker writes it: the byte range FindBatches answers is an ABORT control batch.
    (found,) = [b for b in answer.batches if b.base_offset == 3]
    assert found.is_control and found.object_key == done["object_key"]
    wal_file = (server.data_dir / "objects" / found.object_key).read_bytes()
    control = decode_marker(wal_file[found.byte_offset : found.byte_offset + found.byte_size])
    assert (control.control_type, control.producer_id, control.producer_epoch) == (pb.CONTROL_ABORT, 21, 0)
    assert control.coordinator_epoch == 0  # the producer's last marker's (none yet: 0)
    assert main(["transactions", "find-hanging", *target, "--max-transaction-timeout", "60", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hanging"] == []


@pytest.mark.slow
def test_the_transactions_commands_run_as_an_operator_runs_them(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", coordinators=2).start()
    try:
        topic_id = _hanging_topic(Broker(server.stub, 2))
        target = ["--bootstrap", server.address, "--topic", topic_id.hex()]
        listed = diskless("transactions", "find-hanging", *target)
        assert listed.returncode == 0, listed.stderr
        header, row = listed.stdout.splitlines()
        assert header.split() == ["PARTITION", "PRODUCER_ID", "PRODUCER_EPOCH", "COORDINATOR_EPOCH", "START_OFFSET",
                                  "DURATION_MINUTES"]  # fmt: skip
        assert row.split()[:5] == ["1", "21", "0", "-1", "1"]
        store = ["--data-dir", str(server.data_dir)]
        aborted = diskless("transactions", "abort", *target, *store, "--partition", "1", "--start-offset", "1")
        assert aborted.returncode == 0 and "ABORT marker at offset 3" in aborted.stdout, aborted.stderr
        assert len(list((server.data_dir / "objects" / "wal").glob("*/*.wal"))) == 1  # its WAL object, uploaded
        again = diskless("transactions", "abort", *target, *store, "--partition", "1", "--start-offset", "1")
        assert again.returncode == 2 and "no transaction of partition 1 is open at offset 1" in again.stderr
    finally:
        assert server.stop() == 0
