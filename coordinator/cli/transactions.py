"""`diskless transactions find-hanging|abort`: hanging transactions on diskless topics (DESIGN §4b), as Kafka's
`kafka-transactions.sh find-hanging` and `abort` (KIP-664).

`find-hanging` asks DescribeProducers for every partition of a topic and lists the open transactions whose producer
wrote nothing for longer than `--max-transaction-timeout` minutes (Kafka's test: the producer's last timestamp, as
its tool has no transaction coordinator to ask here). `abort` ends one with an ABORT marker committed through
CommitFile, the path a broker takes for WriteTxnMarkers: the producer's epoch and its last marker's coordinator
epoch (0 if none), as Kafka's `abort --start-offset` takes them from DescribeProducers. As a broker does, it first
uploads the marker's WAL object (one Kafka v2 control batch, `coordinator/client/control_batch.py`) to the object
store the nodes' settings name (`--config`, or `--data-dir` for the embedded local store), then commits it: a
consumer reading the marker's bytes finds a genuine ABORT control record. An upload whose commit then fails is an
orphan, removed by the orphan scan as any broker's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
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
from coordinator.client.control_batch import EndTransactionMarker, encode_marker
from coordinator.config.loading import load_settings
from coordinator.config.settings import SettingsError
from coordinator.files.object_store import ObjectStore, ObjectStoreError, StoreConfig, new_wal_key, open_object_store
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

PARTITIONS_PER_CALL = 100  # partitions asked per DescribeProducers call while looking for the topic's last one
MARKER_BYTES = 78  # an EndTransactionMarker batch: the v2 batch header (61 bytes) and its one control record
NO_STORE = (
    "abort uploads the marker's WAL object as a broker does: give the nodes' settings file (--config FILE, "
    "its diskless.storage.* settings) or, for the embedded local store, the node's --data-dir"
)


def _describe(channel: grpc.Channel, topic_id: bytes) -> list[pb.DescribeProducersResponse.PartitionResult]:
    """Every partition of the topic (0, 1, ... up to the first the coordinators do not know)."""
    stub = pb_grpc.DisklessCoordinatorStub(channel)
    found: list[pb.DescribeProducersResponse.PartitionResult] = []
    while True:
        asked = range(len(found), len(found) + PARTITIONS_PER_CALL)
        request = pb.DescribeProducersRequest(
            topics=[pb.DescribeProducersRequest.Topic(topic_id=topic_id, partitions=asked)]
        )
        for result in stub.DescribeProducers(request, timeout=RPC_TIMEOUT_S).topics[0].partitions:
            if result.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION:
                return found
            if result.error_code != pb.NONE:
                name = pb.ErrorCode.Name(result.error_code)
                raise CommandFailed(f"partition {result.partition}: {name}: {result.error_message}")
            found.append(result)


def find_hanging(args: argparse.Namespace) -> int:
    topic_id = topic_id_of(args)
    partitions = call_first(args, lambda channel: _describe(channel, topic_id))
    if not partitions:
        raise CommandFailed(f"topic {topic_id.hex()} has no partition the coordinators know")
    now_ms = int(time.time() * 1000)
    older_than_ms = args.max_transaction_timeout * 60_000
    hanging = [
        {
            "partition": result.partition,
            "producer_id": producer.producer_id,
            "producer_epoch": producer.producer_epoch,
            "coordinator_epoch": producer.coordinator_epoch,
            "start_offset": producer.current_txn_start_offset,
            "last_timestamp": producer.last_timestamp,
            "duration_minutes": (now_ms - producer.last_timestamp) // 60_000,
        }
        for result in partitions
        for producer in result.active_producers
        if producer.current_txn_start_offset >= 0 and now_ms - producer.last_timestamp > older_than_ms
    ]
    if args.json:
        print(json.dumps({"topic_id": topic_id.hex(), "hanging": hanging}, indent=2))
        return 0
    columns = ("partition", "producer_id", "producer_epoch", "coordinator_epoch", "start_offset", "duration_minutes")
    print("\t".join(name.upper() for name in columns))
    for row in hanging:
        print("\t".join(str(row[name]) for name in columns))
    return 0


def _marker(topic_id: bytes, partition: int, producer: Any, now_ms: int) -> pb.CommitFileRequest.Batch:
    return pb.CommitFileRequest.Batch(
        magic=2, topic_id=topic_id, partition=partition, byte_offset=0, size=MARKER_BYTES, base_offset=0,
        last_offset=0, batch_max_timestamp=now_ms, timestamp_type=pb.CREATE_TIME, producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch, base_sequence=-1, last_sequence=-1, is_transactional=True,
        is_control=True, control_type=pb.CONTROL_ABORT, coordinator_epoch=max(0, producer.coordinator_epoch),
    )  # fmt: skip


def object_store_of(args: argparse.Namespace) -> ObjectStore:
    """The object store the nodes write WAL files to, from their settings file or data directory."""
    if args.config is None and args.data_dir is None:
        raise CommandFailed(NO_STORE)
    try:
        settings = load_settings(args.config, {"diskless.data.dir": args.data_dir})
    except (SettingsError, OSError) as error:
        raise CommandFailed(str(error)) from error
    try:
        return open_object_store(StoreConfig.from_settings(settings))
    except (ObjectStoreError, ValueError) as error:
        raise CommandFailed(f"the object store cannot be opened: {error}") from error


def abort(args: argparse.Namespace) -> int:
    topic_id = topic_id_of(args)
    store = object_store_of(args)

    def call(channel: grpc.Channel) -> dict[str, Any]:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        request = pb.DescribeProducersRequest(
            topics=[pb.DescribeProducersRequest.Topic(topic_id=topic_id, partitions=[args.partition])]
        )
        (result,) = stub.DescribeProducers(request, timeout=RPC_TIMEOUT_S).topics[0].partitions
        if result.error_code != pb.NONE:
            raise CommandFailed(f"{pb.ErrorCode.Name(result.error_code)}: {result.error_message}")
        producers = [p for p in result.active_producers if p.current_txn_start_offset == args.start_offset]
        if not producers:
            raise CommandFailed(f"no transaction of partition {args.partition} is open at offset {args.start_offset}")
        (producer,) = producers
        where = stub.FindCoordinator(
            pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[args.partition])]
            ),
            timeout=RPC_TIMEOUT_S,
        )
        coordinator_id = where.topics[0].partitions[0].coordinator_id
        if coordinator_id < 0:
            raise CommandFailed(f"partition {args.partition}'s coordinator is not known now: try again")
        now_ms = int(time.time() * 1000)
        marker = _marker(topic_id, args.partition, producer, now_ms)
        object_key = new_wal_key(store.config.prefix)
        control = EndTransactionMarker(pb.CONTROL_ABORT, producer.producer_id, producer.producer_epoch,
                                       marker.coordinator_epoch, now_ms)  # fmt: skip
        try:
            store.put(object_key, encode_marker(control))
        except ObjectStoreError as error:
            raise CommandFailed(f"the marker's WAL object could not be uploaded: {error}") from error
        answer = stub.CommitFile(
            pb.CommitFileRequest(
                object_key=object_key, object_format=1, file_size=MARKER_BYTES, uploader_broker_id=args.broker_id,
                owner_ids=[coordinator_id], batches=[marker],
            ),
            timeout=RPC_TIMEOUT_S,
        )  # fmt: skip
        (batch,) = answer.batches
        if batch.error_code != pb.NONE:
            raise CommandFailed(f"the marker was refused: {pb.ErrorCode.Name(batch.error_code)}: {batch.error_message}")
        return {"partition": args.partition, "producer_id": producer.producer_id, "marker_offset":
                batch.assigned_base_offset, "object_key": object_key}  # fmt: skip

    try:
        done = call_first(args, call)
    finally:
        store.close()
    if args.json:
        print(json.dumps(done, indent=2))
    else:
        print(
            f"aborted producer {done['producer_id']}'s transaction in partition {done['partition']} from offset "
            f"{args.start_offset}: ABORT marker at offset {done['marker_offset']} ({done['object_key']})"
        )
    return 0


def add_transactions_command(commands: Any) -> None:
    """Adds `transactions find-hanging|abort` to the `diskless` parser's subcommands."""
    parser = commands.add_parser("transactions", help="find and abort hanging transactions, as kafka-transactions")
    actions = parser.add_subparsers(dest="action", required=True)
    hanging = actions.add_parser("find-hanging", help="open transactions whose producer is idle for too long")
    ending = actions.add_parser("abort", help="end an open transaction with an ABORT marker (through CommitFile)")
    for action in (hanging, ending):
        add_node_arguments(action)
        action.add_argument("--topic", required=True, help=TOPIC_FORMS)
    hanging.add_argument(
        "--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
        help="list transactions idle for longer than this (Kafka's transaction.max.timeout.ms, in minutes; default 15)",
    )  # fmt: skip
    ending.add_argument("--partition", type=int, required=True)
    ending.add_argument("--start-offset", type=int, required=True, help="the open transaction's first offset")
    ending.add_argument("--broker-id", type=int, default=0, help="the uploader broker id the marker's file names")
    ending.add_argument(
        "--config", type=Path, help="the nodes' settings file: the object store (diskless.storage.*) to upload to"
    )
    ending.add_argument(
        "--data-dir", type=Path, help="a node's data directory: its embedded local store (<data dir>/objects)"
    )
    hanging.set_defaults(run=lambda args: run(find_hanging, args))
    ending.set_defaults(run=lambda args: run(abort, args))
