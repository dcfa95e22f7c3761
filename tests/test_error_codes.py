"""coordinator.base.errors.ErrorCode mirrors the contract's enum: the type checker takes one for the other."""

from __future__ import annotations

from enum import IntEnum

from coordinator.base.errors import ErrorCode
from protos import coordinator_pb2 as pb


def test_each_member_is_the_contracts_value_of_its_name() -> None:
    assert issubclass(ErrorCode, IntEnum)
    for member in ErrorCode:
        assert pb.ErrorCode.Value(member.name) == member.value, member.name
