"""Operator input the CLI refuses with one line (CommandFailed) instead of a traceback: what the mutation run over
coordinator/ found unpinned (issue #40, item 5; docs/testing.md). Each test names the one-line break it kills."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from coordinator.cli.gateways import read_brokers
from coordinator.cli.operator_commands import CommandFailed, _channel_credentials


def test_a_broker_id_must_fit_kafkas_int32(tmp_path: Path) -> None:
    """2**31 - 1 is the largest broker id (Kafka's int32); 2**31 is refused with the entry named, not left to fail
    in protobuf. Kills `broker_id < 2**31` made `< 3**31` or `< 2**32` in `read_brokers`."""
    gateways = tmp_path / "gateways.json"
    gateways.write_text(json.dumps([{"broker_id": 2**31 - 1, "rack": "a"}]))
    assert [b.broker_id for b in read_brokers(gateways)] == [2**31 - 1]
    gateways.write_text(json.dumps([{"broker_id": 1}, {"broker_id": 2**31}]))
    with pytest.raises(CommandFailed, match="entry 1 is not"):
        read_brokers(gateways)


@pytest.mark.parametrize(("cert", "key"), [("operator.pem", None), (None, "operator.key"), ("c.pem", "c.key")])
def test_a_client_certificate_without_a_ca_is_refused(cert: str | None, key: str | None) -> None:
    """--cert or --key alone, or both, without --ca: refused, never a plaintext call that drops them. Kills
    `args.cert or args.key` made `and` in `_channel_credentials` (the first two cases)."""
    with pytest.raises(CommandFailed, match="need --ca"):
        _channel_credentials(argparse.Namespace(ca=None, cert=cert, key=key))
    assert _channel_credentials(argparse.Namespace(ca=None, cert=None, key=None)) is None
