"""The classic -> diskless switch through the real socket (design §4d): InitDisklessLog, RepairDisklessLog and
DescribeDisklessLogs as a broker and an operator call them, a classic producer going on across the switch, reads
below the seal, and the switch's state across a restart, a log replay and a snapshot restore."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from coordinator.cli.main import main
from coordinator.client.routing_client import RoutingClient
from protos import coordinator_pb2 as pb
from tests.harness import (
    Broker,
    ServerProcess,
    assert_state_equals_log_rebuild,
    batch,
    coordinator_state_files,
    delete_records,
    fetch,
    list_offset,
    topic_name,
)
from tests.in_process import InProcessNode
from tests.snapshot_helpers import MANUAL_SNAPSHOTS, create_snapshots
from tests.test_operator_commands import diskless

SEAL = 1_000
CLASSIC_START = 250
CLASSIC_MAX_TIMESTAMP = 1_700_000_000_000
PRODUCER, EPOCH = 31, 4
# The producer's last classic batches: sequences 0..9 at offsets 980..989, 10..19 at 990..999.
CLASSIC_BATCHES = [
    pb.ClassicProducerBatch(base_sequence=s, last_sequence=s + 9, base_offset=980 + s, last_offset=989 + s,
                            timestamp=CLASSIC_MAX_TIMESTAMP - 10 + s, timestamp_type=pb.CREATE_TIME)
    for s in (0, 10)
]  # fmt: skip


def classic_producer(**kw: int) -> pb.ClassicProducerState:
    fields = {"producer_id": PRODUCER, "producer_epoch": EPOCH, "last_timestamp": CLASSIC_MAX_TIMESTAMP,
              "coordinator_epoch": -1, "current_txn_first_offset": -1} | kw  # fmt: skip
    return pb.ClassicProducerState(batches=CLASSIC_BATCHES, **fields)


def init_request(
    topic_id: bytes, partitions: list[int], seal: int = SEAL, epoch: int = 7, producers: int = 1
) -> pb.InitDisklessLogRequest:
    parts = [
        pb.InitDisklessLogRequest.Partition(
            partition=p, log_start_offset=CLASSIC_START, seal_offset=seal, leader_epoch=epoch,
            producers=[classic_producer(producer_id=PRODUCER + n) for n in range(producers)],
            max_timestamp=CLASSIC_MAX_TIMESTAMP,
        )
        for p in partitions
    ]  # fmt: skip
    return pb.InitDisklessLogRequest(topics=[pb.InitDisklessLogRequest.Topic(topic_id=topic_id, partitions=parts)])


def init(broker: Broker, topic_id: bytes, *partitions: int, **kw: int) -> list[tuple[int, int, int, int]]:
    """(error code, log start, seal, high watermark) per partition."""
    answer = broker.stub.InitDisklessLog(init_request(topic_id, list(partitions), **kw))
    return [(r.error_code, r.log_start_offset, r.seal_offset, r.high_watermark) for r in answer.topics[0].partitions]


def describe(broker: Broker, topic_id: bytes, partition: int = 0) -> pb.DescribeDisklessLogsResponse.PartitionResult:
    request = pb.DescribeDisklessLogsRequest(
        topics=[pb.DescribeDisklessLogsRequest.Topic(topic_id=topic_id, partitions=[partition])]
    )
    return broker.stub.DescribeDisklessLogs(request).topics[0].partitions[0]


def repair(broker: Broker, topic_id: bytes, partition: int, seal: int) -> pb.RepairDisklessLogResponse.PartitionResult:
    part = pb.RepairDisklessLogRequest.Partition(partition=partition, seal_offset=seal)
    request = pb.RepairDisklessLogRequest(
        topics=[pb.RepairDisklessLogRequest.Topic(topic_id=topic_id, partitions=[part])]
    )
    return broker.stub.RepairDisklessLog(request).topics[0].partitions[0]


def produce(
    broker: Broker, topic_id: bytes, sequence: int, records: int = 10, partition: int = 0
) -> tuple[int, int, bool]:
    produced = batch(topic_id, partition, records, producer_id=PRODUCER, epoch=EPOCH, sequence=sequence)
    result = broker.commit([produced]).batches[0]
    return result.error_code, result.assigned_base_offset, result.is_duplicate


def test_a_switched_partition_takes_the_classic_producer_on_and_sends_reads_below_the_seal_to_the_classic_log(
    broker: Broker,
) -> None:
    topic_id = broker.create_topic(topic_name("switch"), 4)
    assert init(broker, topic_id, 0, 1, 2, 3) == [(pb.NONE, CLASSIC_START, SEAL, SEAL)] * 4
    assert produce(broker, topic_id, 10) == (pb.NONE, 990, True)  # the last classic batch resent: a duplicate
    assert produce(broker, topic_id, 0) == (pb.NONE, 980, True)  # and the one before it
    assert produce(broker, topic_id, 20) == (pb.NONE, SEAL, False)  # the next sequence, at the seal
    assert produce(broker, topic_id, 35)[0] == pb.OUT_OF_ORDER_SEQUENCE_NUMBER
    below = fetch(broker.stub, topic_id, 0, 500)
    assert (below.error_code, below.log_start_offset, below.local_log_start_offset) == (
        pb.OFFSET_MOVED_TO_TIERED_STORAGE, CLASSIC_START, SEAL,
    )  # fmt: skip
    assert fetch(broker.stub, topic_id, 0, CLASSIC_START - 1).error_code == pb.OFFSET_OUT_OF_RANGE
    assert [b.base_offset for b in fetch(broker.stub, topic_id, 0, SEAL).batches] == [SEAL]
    assert list_offset(broker.stub, topic_id, 0, -2).offset == CLASSIC_START
    assert list_offset(broker.stub, topic_id, 0, -4).offset == SEAL
    assert list_offset(broker.stub, topic_id, 0, -1).offset == SEAL + 10
    assert list_offset(broker.stub, topic_id, 0, 1000).error_code == pb.OFFSET_MOVED_TO_TIERED_STORAGE
    described = describe(broker, topic_id)
    switch = (described.classic_log_start_offset, described.seal_offset, described.leader_epoch)
    assert (described.switched, *switch, described.producers_carried) == (True, CLASSIC_START, SEAL, 7, 1)
    assert described.high_watermark == SEAL + 10
    # The same call again is success and changes nothing; another seal now is refused, with its reason.
    assert init(broker, topic_id, 0) == [(pb.NONE, CLASSIC_START, SEAL, SEAL + 10)]
    [(code, *_)] = init(broker, topic_id, 0, seal=SEAL + 5, epoch=8)
    assert code == pb.INVALID_REQUEST
    # Partition 1 has no diskless commit yet: its seal can be repaired, and DeleteRecords crosses the seal.
    repaired = repair(broker, topic_id, 1, SEAL - 100)
    assert (repaired.error_code, repaired.seal_offset, repaired.high_watermark) == (pb.NONE, SEAL - 100, SEAL - 100)
    assert repair(broker, topic_id, 0, SEAL + 1).error_code == pb.INVALID_REQUEST  # diskless above the seal
    assert delete_records(broker.stub, topic_id, 0, SEAL + 5).error_code == pb.NONE
    assert list_offset(broker.stub, topic_id, 0, -2).offset == SEAL + 5
    assert fetch(broker.stub, topic_id, 0, SEAL + 5).error_code == pb.NONE
    unknown = describe(broker, topic_id, 9)
    assert unknown.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION


def test_the_switch_survives_a_restart_a_log_replay_and_a_snapshot_restore(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "data", coordinators=1, settings=MANUAL_SNAPSHOTS).start()
    try:
        broker = Broker(node.stub, 1)
        topic_id = broker.create_topic(topic_name("switch"), 2)
        assert init(broker, topic_id, 0, 1, producers=3)[0][0] == pb.NONE
        assert produce(broker, topic_id, 20) == (pb.NONE, SEAL, False)

        def answers(broker: Broker) -> tuple[object, ...]:
            described = describe(broker, topic_id, 1)
            return (
                described.SerializeToString(deterministic=True),
                list_offset(broker.stub, topic_id, 0, -2).offset,
                produce(broker, topic_id, 10)[1:],  # a duplicate: nothing written, so every answer is the same
                fetch(broker.stub, topic_id, 0, 500).error_code,
            )

        seen = answers(broker)
        assert seen[1:] == (CLASSIC_START, (990, True), pb.OFFSET_MOVED_TO_TIERED_STORAGE)
        node.restart()
        assert answers(Broker(node.stub, 1)) == seen
        node.stop()
        assert_state_equals_log_rebuild(node.data_dir, 1, tmp_path / "rebuilt")  # I1, the switch included
        for path in coordinator_state_files(node.data_dir, 0):
            path.unlink(missing_ok=True)
        node.start()  # the state replayed from the log
        assert answers(Broker(node.stub, 1)) == seen
        create_snapshots(node)
        node.stop()
        for path in coordinator_state_files(node.data_dir, 0):
            path.unlink(missing_ok=True)
        node.start()
        assert "restored snapshot" in "".join(node.output)
        assert answers(Broker(node.stub, 1)) == seen
    finally:
        if node.is_running():
            node.stop()


def test_the_routing_client_switches_each_partition_at_its_coordinators_leader(
    server: InProcessNode, broker: Broker
) -> None:
    topic_id = broker.create_topic(topic_name("switch"), 4)

    async def call() -> pb.InitDisklessLogResponse:
        async with RoutingClient(["127.0.0.1:1", server.address], deadline_ms=10_000) as client:
            return await client.init_diskless_log(init_request(topic_id, [0, 1, 2, 3]))

    answered = asyncio.run(call()).topics[0].partitions
    assert [(r.partition, r.error_code, r.seal_offset) for r in answered] == [(p, pb.NONE, SEAL) for p in range(4)]
    assert {describe(broker, topic_id, p).seal_offset for p in range(4)} == {SEAL}


# ---------------------------------------------------------------- `diskless switch`


def test_the_cli_describes_a_switch_and_repairs_a_seal(
    server: InProcessNode, broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    name = topic_name("switch")
    topic_id = broker.create_topic(name, 3)
    assert init(broker, topic_id, 0, 1, producers=2)[0][0] == pb.NONE  # partition 2 stays born diskless
    assert produce(broker, topic_id, 20) == (pb.NONE, SEAL, False)
    assert main(["switch", "describe", "--bootstrap", server.address, "--topic", name, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(p["partition"], p["switched"], p["seal_offset"], p["producers_carried"]) for p in found["partitions"]] == [
        (0, True, SEAL, 2), (1, True, SEAL, 2), (2, False, -1, 0),
    ]  # fmt: skip
    assert found["producers"] is None
    target = ["--bootstrap", server.address, "--topic", topic_id.hex(), "--partition", "0"]
    assert main(["switch", "describe", *target, "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["partitions"][0]["classic_log_start_offset"] == CLASSIC_START
    assert [(p["producer_id"], p["last_sequence"]) for p in one["producers"]] == [(PRODUCER, 29), (PRODUCER + 1, 19)]
    assert main(["switch", "repair", *target, "--seal", str(SEAL + 1)]) == 2  # diskless commits above the seal
    assert "INVALID_REQUEST" in capsys.readouterr().err
    repaired = ["--bootstrap", server.address, "--topic", name, "--partition", "1", "--seal", str(SEAL + 20)]
    assert main(["switch", "repair", *repaired]) == 0
    assert capsys.readouterr().out.strip() == f"partition 1 sealed at {SEAL + 20} (log start {CLASSIC_START})"
    assert describe(broker, topic_id, 1).high_watermark == SEAL + 20


@pytest.mark.slow
def test_the_switch_command_runs_as_an_operator_runs_it(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", coordinators=2).start()
    try:
        broker = Broker(server.stub, 2)
        name = topic_name("switch")
        topic_id = broker.create_topic(name, 2)
        assert init(broker, topic_id, 0) == [(pb.NONE, CLASSIC_START, SEAL, SEAL)]
        target = ["--bootstrap", server.address, "--topic", name]
        listed = diskless("switch", "describe", *target)
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split()[:4] == ["PARTITION", "SWITCHED", "CLASSIC_LOG_START_OFFSET", "SEAL_OFFSET"]
        assert [row.split() for row in rows] == [
            ["0", "true", str(CLASSIC_START), str(SEAL), "7", "1", str(CLASSIC_START), str(SEAL), str(SEAL)],
            ["1", "false", "-1", "-1", "-1", "0", "0", "0", "0"],
        ]
        repaired = diskless("switch", "repair", *target, "--partition", "0", "--seal", "900")
        assert repaired.returncode == 0 and "partition 0 sealed at 900" in repaired.stdout, repaired.stderr
        refused = diskless("switch", "repair", *target, "--partition", "1", "--seal", "5")
        assert refused.returncode == 2 and "never switched" in refused.stderr
        one = diskless("switch", "describe", *target, "--partition", "0")
        assert one.returncode == 0 and f"producer_id {PRODUCER}, producer_epoch {EPOCH}" in one.stdout, one.stderr
    finally:
        assert server.stop() == 0
