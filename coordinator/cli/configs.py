"""`diskless configs describe|alter`: a topic's configurations on a running node (DESIGN §4a), in the style of
Kafka's `kafka-configs --describe` / `--alter --add-config` / `--delete-config`.

`--topic` takes the topic's name, as kafka-configs' `--entity-name` (the admin service's DescribeTopics gives its
id), or its id: 32 hex digits, a UUID, or Kafka's own base64 form (what `kafka-topics --describe` prints as TopicId).
A name is looked up first: a text that is both a topic's name and some id's form names that topic.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

import grpc

from coordinator.cli.operator_commands import (
    RPC_TIMEOUT_S,
    CommandFailed,
    add_node_arguments,
    call_first,
    run,
)
from coordinator.cli.output import CONFIG_COLUMNS, ConfigRow, print_rows
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc as admin_grpc
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

_HEX_ID = re.compile(r"[0-9a-fA-F]{32}")
_KAFKA_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # Kafka's Uuid.toString(): URL-safe base64 of 16 bytes, no padding
TOPIC_FORMS = (
    "a topic name (as kafka-configs --entity-name), or a topic id: 32 hex digits, a UUID, or Kafka's base64 form "
    "(as --topic=ID when it starts with '-')"
)
_ID_FORMS = "a topic id (32 hex digits, a UUID, or Kafka's base64 form)"


def parsed_topic_id(text: str) -> bytes | None:
    """The 16 bytes of a topic id given as hex, a UUID or Kafka's base64 form; None if it is none of them."""
    text = text.strip()
    try:
        if _HEX_ID.fullmatch(text):
            return bytes.fromhex(text)
        if len(text) == 36:
            return uuid.UUID(text).bytes
        if _KAFKA_ID.fullmatch(text):
            return base64.urlsafe_b64decode(text + "==")
    except (ValueError, binascii.Error):
        pass
    return None


def topic_id_of(args: argparse.Namespace) -> bytes:
    """The id of the topic `--topic` names: a topic of that name if there is one, else the id it is written as."""
    text = args.topic.strip()
    request = admin.DescribeTopicsRequest(names=[text])

    def call(channel: grpc.Channel) -> admin.DescribeTopicsResponse:
        return admin_grpc.CoordinatorAdminStub(channel).DescribeTopics(request, timeout=RPC_TIMEOUT_S)

    (found,) = call_first(args, call).topics
    if found.error_code == pb.NONE:
        return bytes(found.topic_id)
    if found.error_code not in (pb.UNKNOWN_TOPIC_OR_PARTITION, pb.INVALID_TOPIC_EXCEPTION):
        raise CommandFailed(f"--topic {text!r}: {pb.ErrorCode.Name(found.error_code)}: {found.error_message}")
    topic_id = parsed_topic_id(text)
    if topic_id is None:
        raise CommandFailed(f"--topic {text!r}: no topic has that name, and it is not {_ID_FORMS}")
    return topic_id


def _pairs(values: Sequence[str]) -> list[pb.TopicConfig]:
    """`--set name=value` (repeatable, or comma-separated as kafka-configs' --add-config)."""
    configs = []
    for value in (part for given in values for part in given.split(",") if part.strip()):
        name, equals, setting = value.partition("=")
        if not equals or not name.strip():
            raise CommandFailed(f"--set takes name=value, got {value!r}")
        configs.append(pb.TopicConfig(name=name.strip(), value=setting))
    return configs


def _names(values: Sequence[str]) -> list[str]:
    return [name.strip() for given in values for name in given.split(",") if name.strip()]


def _checked(result: Any) -> None:
    if result.error_code != pb.NONE:
        raise CommandFailed(f"{pb.ErrorCode.Name(result.error_code)}: {result.error_message}")


def _print(topic_id: bytes, entries: Sequence[pb.ConfigEntry], as_json: bool, **extra: Any) -> None:
    rows = [ConfigRow(e.name, e.value, e.is_default) for e in entries]
    if as_json:
        document = {"topic_id": topic_id.hex(), **extra, "configs": [
            {"name": r.name, "value": r.value, "is_default": r.is_default} for r in rows
        ]}  # fmt: skip
        print(json.dumps(document, indent=2))
        return
    print_rows(rows, False, "configs", CONFIG_COLUMNS)


def describe_configs(args: argparse.Namespace) -> int:
    topic_id = topic_id_of(args)
    request = pb.DescribeTopicConfigsRequest(topic_ids=[topic_id])

    def call(channel: grpc.Channel) -> pb.DescribeTopicConfigsResponse:
        return pb_grpc.DisklessCoordinatorStub(channel).DescribeTopicConfigs(request, timeout=RPC_TIMEOUT_S)

    (result,) = call_first(args, call).topics
    _checked(result)
    _print(topic_id, result.configs, args.json)
    return 0


def alter_configs(args: argparse.Namespace) -> int:
    topic_id = topic_id_of(args)
    set_configs, deleted = _pairs(args.set or []), _names(args.delete or [])
    if not set_configs and not deleted:
        raise CommandFailed("nothing to alter: give --set name=value or --delete name")
    topic = pb.AlterTopicConfigsRequest.Topic(topic_id=topic_id, set=set_configs, delete=deleted)
    request = pb.AlterTopicConfigsRequest(topics=[topic], validate_only=args.validate_only)

    def call(channel: grpc.Channel) -> pb.AlterTopicConfigsResponse:
        return pb_grpc.DisklessCoordinatorStub(channel).AlterTopicConfigs(request, timeout=RPC_TIMEOUT_S)

    (result,) = call_first(args, call).topics
    _checked(result)
    _print(topic_id, result.configs, args.json, validate_only=args.validate_only)
    return 0


def add_configs_command(commands: Any) -> None:
    """Adds `configs describe|alter` to the `diskless` parser's subcommands."""
    parser = commands.add_parser(
        "configs", help="describe or alter a topic's configurations (retention, tiered storage), as kafka-configs"
    )
    actions = parser.add_subparsers(dest="action", required=True)
    describe = actions.add_parser("describe", help="every configuration of the topic, and whether it is a default")
    alter = actions.add_parser("alter", help="set configurations, or put them back to their defaults")
    for action in (describe, alter):
        add_node_arguments(action)
        action.add_argument("--topic", required=True, help=TOPIC_FORMS)
    alter.add_argument(
        "--set", action="append", metavar="NAME=VALUE", help="set a configuration (repeatable, or comma-separated)"
    )
    alter.add_argument(
        "--delete", action="append", metavar="NAME", help="put a configuration back to its default (repeatable)"
    )
    alter.add_argument(
        "--validate-only", action="store_true", help="check the change and show its result; change nothing"
    )
    describe.set_defaults(run=lambda args: run(describe_configs, args))
    alter.set_defaults(run=lambda args: run(alter_configs, args))
