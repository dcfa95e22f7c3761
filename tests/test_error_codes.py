"""coordinator.base.errors.ErrorCode mirrors the contract's enum: the type checker takes one for the other."""

from __future__ import annotations

from enum import IntEnum

from coordinator.base.errors import ErrorCode
from protos import coordinator_pb2 as pb


def test_each_member_is_the_contracts_value_of_its_name() -> None:
    assert issubclass(ErrorCode, IntEnum)
    for member in ErrorCode:
        assert pb.ErrorCode.Value(member.name) == member.value, member.name


def test_each_code_of_the_contract_is_a_member_of_its_name() -> None:
    # The other direction: a code added to the contract and not to the mirror would pass the test above, and the type
    # checker (which sees the generated enum) would let code use a member that does not exist at run time.
    mirrored = {member.name: member.value for member in ErrorCode}
    assert dict(pb.ErrorCode.items()) == mirrored
    assert len(set(mirrored.values())) == len(mirrored)  # no alias hides a code behind another name
