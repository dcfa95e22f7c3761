"""`diskless describe --gateways BROKERS.json`: each coordinator's produce gateways per rack among the brokers of
the file, as a running node computes them from its view of the leaders (DESIGN §2, `DescribeProduceGateways`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import grpc

from coordinator.cli.operator_commands import RPC_TIMEOUT_S, CommandFailed, call_first
from coordinator.cli.output import GATEWAY_COLUMNS, GatewayRow, print_rows
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

BROKER_FORMAT = '{"broker_id": N, "rack": "r"}'  # an entry of a --gateways file; "rack" optional (no rack)


def describe_gateways(args: argparse.Namespace) -> int:
    """Each coordinator's produce gateways per rack among the brokers of the --gateways file, as the node says."""
    if args.data_dir is not None:
        raise CommandFailed("--gateways asks a running node: use --bootstrap, not --data-dir")
    request = pb.DescribeProduceGatewaysRequest(brokers=read_brokers(args.gateways))

    def call(channel: grpc.Channel) -> pb.DescribeProduceGatewaysResponse:
        return pb_grpc.DisklessCoordinatorStub(channel).DescribeProduceGateways(request, timeout=RPC_TIMEOUT_S)

    answer = call_first(args, call)
    if answer.error_code != pb.NONE:
        raise CommandFailed(f"{pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}")
    wanted = set(args.coordinator or [])
    rows = [
        GatewayRow(g.coordinator_id, g.rack, ",".join(map(str, g.broker_ids)))
        for g in answer.gateways
        if not wanted or g.coordinator_id in wanted
    ]
    print_rows(rows, args.json, "gateways", GATEWAY_COLUMNS)
    return 0


def read_brokers(path: Path) -> list[pb.DescribeProduceGatewaysRequest.Broker]:
    """The brokers of a --gateways file: a JSON list of BROKER_FORMAT objects."""
    try:
        listed = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CommandFailed(f"cannot read the brokers of {path}: {error}") from None
    if not isinstance(listed, list):
        raise CommandFailed(f"{path}: a JSON list of {BROKER_FORMAT} objects expected")
    brokers = []
    for position, entry in enumerate(listed):
        broker_id = entry.get("broker_id") if isinstance(entry, dict) else None
        rack = entry.get("rack", "") if isinstance(entry, dict) else None
        well_formed = isinstance(broker_id, int) and not isinstance(broker_id, bool) and 0 <= broker_id < 2**31
        if not well_formed or not isinstance(rack, str) or set(entry) - {"broker_id", "rack"}:
            raise CommandFailed(f"{path}: entry {position} is not {BROKER_FORMAT} with N >= 0: {entry!r}")
        brokers.append(pb.DescribeProduceGatewaysRequest.Broker(broker_id=broker_id, rack=rack))
    return brokers
