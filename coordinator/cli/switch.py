"""`diskless switch describe|repair`: a classic topic's partitions switched to diskless (design §4d).

`describe` asks DescribeDisklessLogs for the topic's partitions (one, or every one: 0, 1, ... up to the first the
coordinators do not know) and, for one partition, DescribeProducers for its producers now: per partition whether it
was switched, its classic log start, its seal, the sealing leader's epoch, the producers carried over, and its log
start, local start and high watermark. `repair` moves a partition's seal with RepairDisklessLog (Inkless's
repairDisklessLog, after an operator overrode the classic leader), which the coordinator allows only while nothing
diskless is committed above the old seal.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import grpc

from coordinator.cli.configs import TOPIC_FORMS, topic_id_of
from coordinator.cli.operator_commands import (
    RPC_TIMEOUT_S,
    CommandFailed,
    add_node_arguments,
    call_first,
    run,
)
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

PARTITIONS_PER_CALL = 100  # partitions asked per DescribeDisklessLogs call while looking for the topic's last one
COLUMNS = ("partition", "switched", "classic_log_start_offset", "seal_offset", "leader_epoch", "producers_carried",
           "log_start_offset", "local_log_start_offset", "high_watermark")  # fmt: skip


def _failed(result: Any) -> CommandFailed:
    return CommandFailed(
        f"partition {result.partition}: {pb.ErrorCode.Name(result.error_code)}: {result.error_message}"
    )


def _switches(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int | None) -> list[dict[str, Any]]:
    """The switch of one partition, or of every partition of the topic."""
    found: list[dict[str, Any]] = []
    while True:
        asked = [partition] if partition is not None else range(len(found), len(found) + PARTITIONS_PER_CALL)
        request = pb.DescribeDisklessLogsRequest(
            topics=[pb.DescribeDisklessLogsRequest.Topic(topic_id=topic_id, partitions=asked)]
        )
        for result in stub.DescribeDisklessLogs(request, timeout=RPC_TIMEOUT_S).topics[0].partitions:
            if result.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION and partition is None:
                return found
            if result.error_code != pb.NONE:
                raise _failed(result)
            found.append({name: getattr(result, name) for name in COLUMNS})
        if partition is not None:
            return found


def _producers(stub: pb_grpc.DisklessCoordinatorStub, topic_id: bytes, partition: int) -> list[dict[str, Any]]:
    request = pb.DescribeProducersRequest(
        topics=[pb.DescribeProducersRequest.Topic(topic_id=topic_id, partitions=[partition])]
    )
    (result,) = stub.DescribeProducers(request, timeout=RPC_TIMEOUT_S).topics[0].partitions
    if result.error_code != pb.NONE:
        raise _failed(result)
    return [
        {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "last_sequence": p.last_sequence,
         "last_timestamp": p.last_timestamp, "current_txn_start_offset": p.current_txn_start_offset}
        for p in result.active_producers
    ]  # fmt: skip


def describe(args: argparse.Namespace) -> int:
    topic_id = topic_id_of(args)

    def call(channel: grpc.Channel) -> dict[str, Any]:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        partitions = _switches(stub, topic_id, args.partition)
        if not partitions:
            raise CommandFailed(f"topic {topic_id.hex()} has no partition the coordinators know")
        producers = _producers(stub, topic_id, args.partition) if args.partition is not None else None
        return {"topic_id": topic_id.hex(), "partitions": partitions, "producers": producers}

    found = call_first(args, call)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print("\t".join(name.upper() for name in COLUMNS))
    for row in found["partitions"]:
        print("\t".join(str(row[name]).lower() for name in COLUMNS))
    if found["producers"] is not None:
        print(f"producers of partition {args.partition} now: {len(found['producers'])}")
        for producer in found["producers"]:
            print("  " + ", ".join(f"{name} {value}" for name, value in producer.items()))
    return 0


def repair(args: argparse.Namespace) -> int:
    topic_id = topic_id_of(args)

    def call(channel: grpc.Channel) -> pb.RepairDisklessLogResponse.PartitionResult:
        part = pb.RepairDisklessLogRequest.Partition(partition=args.partition, seal_offset=args.seal)
        request = pb.RepairDisklessLogRequest(
            topics=[pb.RepairDisklessLogRequest.Topic(topic_id=topic_id, partitions=[part])]
        )
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        (result,) = stub.RepairDisklessLog(request, timeout=RPC_TIMEOUT_S).topics[0].partitions
        if result.error_code != pb.NONE:
            raise _failed(result)
        return result

    done = call_first(args, call)
    if args.json:
        fields = ("partition", "log_start_offset", "seal_offset", "high_watermark")
        print(json.dumps({name: getattr(done, name) for name in fields}, indent=2))
    else:
        print(f"partition {done.partition} sealed at {done.seal_offset} (log start {done.log_start_offset})")
    return 0


def add_switch_command(commands: Any) -> None:
    """Adds `switch describe|repair` to the `diskless` parser's subcommands."""
    parser = commands.add_parser("switch", help="classic topics switched to diskless: describe, repair a seal")
    actions = parser.add_subparsers(dest="action", required=True)
    describing = actions.add_parser("describe", help="each partition's switch: classic start, seal, epoch, producers")
    repairing = actions.add_parser("repair", help="move a partition's seal while nothing diskless is above it")
    for action in (describing, repairing):
        add_node_arguments(action)
        action.add_argument("--topic", required=True, help=TOPIC_FORMS)
    describing.add_argument("--partition", type=int, help="one partition, with its producers (default: every one)")
    repairing.add_argument("--partition", type=int, required=True)
    repairing.add_argument("--seal", type=int, required=True, help="the offset the seal should be at")
    describing.set_defaults(run=lambda args: run(describe, args))
    repairing.set_defaults(run=lambda args: run(repair, args))
