from __future__ import annotations

import pytest

from coordinator.edge.acl_file import AclError, Permission, parse_acl
from coordinator.edge.rpcs import PERMISSIONS
from protos import coordinator_pb2 as pb


def test_acl_lines_comments_and_implied_describe() -> None:
    acl = parse_acl("# brokers\nUser:broker CLUSTER_ACTION\n\nUser:ops DESCRIBE, ALTER  # operators\n")
    assert acl.allows("User:broker", Permission.CLUSTER_ACTION)
    assert acl.allows("User:broker", Permission.DESCRIBE)  # implied, as Kafka's ALTER implies DESCRIBE
    assert not acl.allows("User:ops", Permission.CLUSTER_ACTION)
    assert acl.allows("User:ops", Permission.ALTER)
    assert not acl.allows("User:nobody", Permission.DESCRIBE)


@pytest.mark.parametrize("line", ["broker CLUSTER_ACTION", "User: CLUSTER_ACTION", "User:x", "User:x WRITE"])
def test_malformed_lines_name_the_line(line: str) -> None:
    with pytest.raises(AclError, match=r"acl:2"):
        parse_acl(f"User:ok DESCRIBE\n{line}\n", "acl")


def test_every_rpc_of_the_contract_has_a_permission() -> None:
    methods = set(pb.DESCRIPTOR.services_by_name["DisklessCoordinator"].methods_by_name)
    assert methods <= set(PERMISSIONS)
