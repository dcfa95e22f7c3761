from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinator.base.errors import PermissionDenied
from coordinator.edge.access_control import AccessControl
from coordinator.edge.acl_file import IMPLIED, AclError, Permission, parse_acl


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


# The contract as written: the .proto sources (protos/*.proto and the team's copy, protos/contract/), read as text, so
# a method added to a service is checked here before anything generated or tabled from it knows of it.
PROTOS = Path(__file__).resolve().parent.parent / "protos"
_SERVICE = re.compile(r"^service\s+(\w+)\s*\{(.*?)^\}", re.MULTILINE | re.DOTALL)
_METHOD = re.compile(r"^\s*rpc\s+(\w+)\s*\(", re.MULTILINE)
# Each service's callers, so each may need only its callers' permissions (DESIGN: brokers, operators, coordinators).
PERMISSIONS_OF_SERVICE = {
    "DisklessCoordinator": {Permission.CLUSTER_ACTION, Permission.DESCRIBE},
    "CoordinatorAdmin": {Permission.ALTER, Permission.DESCRIBE},
    "CoordinatorInternal": {Permission.INTERNAL},
}


def methods_in_the_protos() -> dict[str, set[str]]:
    methods: dict[str, set[str]] = {}
    for path in [*PROTOS.glob("*.proto"), *PROTOS.glob("contract/*.proto")]:
        text = re.sub(r"//[^\n]*", "", path.read_text())
        for service, body in _SERVICE.findall(text):
            methods.setdefault(service, set()).update(_METHOD.findall(body))
    return methods


def test_every_rpc_of_the_contract_has_a_permission_its_callers_hold(tmp_path: Path) -> None:
    methods = methods_in_the_protos()
    assert set(methods) == set(PERMISSIONS_OF_SERVICE)  # a new service needs its callers named above
    assert {"CommitFile", "FindBatches", "DescribeFiles"} <= methods["DisklessCoordinator"]  # the parse found them
    acl_path = tmp_path / "acl"
    acl_path.write_text("User:broker CLUSTER_ACTION\nUser:ops ALTER\nUser:node INTERNAL\n")
    control = AccessControl(acl_path, False, "none", 1.0)
    holder = {Permission.CLUSTER_ACTION: "User:broker", Permission.ALTER: "User:ops", Permission.INTERNAL: "User:node"}
    for service, names in methods.items():
        for method in sorted(names):
            # What the node enforces, asked of the enforcement itself: a row missing is a KeyError here.
            permission = control.permissions[method]
            assert permission in PERMISSIONS_OF_SERVICE[service], f"{service}.{method}: {permission}"
            with pytest.raises(PermissionDenied):
                control.admit(method, {}, ())  # an unnamed caller is anonymous and holds nothing
            allowed = {p for p, principal in holder.items() if _admits(control, method, principal)}
            assert allowed == {p for p in holder if p is permission or permission in IMPLIED.get(p, ())}, method


def _admits(control: AccessControl, method: str, principal: str) -> bool:
    try:
        control.admit(method, {"x509_common_name": [principal.removeprefix("User:").encode()]})
    except PermissionDenied:
        return False
    return True
