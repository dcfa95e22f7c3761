"""The RPC table (coordinator/edge/rpcs.py) against the protos, and what is derived from it.

A method of a service in the protos without a row, a row naming a method or a handler that does not exist, or a
row the first process of a node spread over processes cannot serve as it says, fails here. The derived maps are
checked against the values that were kept by hand before the table (permissions, routes, the fast path's
error-code fields, the front process's overrides).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, cast

import pytest
from google.protobuf.descriptor import FileDescriptor

from coordinator.base.invariants import InvariantViolation
from coordinator.base.metrics import Metrics
from coordinator.client import channels
from coordinator.client.routing_client import RoutingClient
from coordinator.edge.access_control import AccessControl
from coordinator.edge.acl_file import Permission
from coordinator.edge.gate import CallGate, edge_handlers
from coordinator.edge.rpcs import BY_METHOD, PERMISSIONS, RPCS, Front, NoReplica, Rpc, ServedBy, Service, Stream
from coordinator.node.processes import front
from coordinator.node.processes.front import FrontAnswers, FrontRouteMissing, front_route_problem
from coordinator.node.router import Answer, Placed, Router
from coordinator.node.services import PASSED_ON, ServiceMethods, servicers
from protos import admin_pb2, internal_pb2
from protos import coordinator_pb2 as pb

PROTO_FILES = (pb.DESCRIPTOR, internal_pb2.DESCRIPTOR, admin_pb2.DESCRIPTOR)

# What was kept by hand before the table: RPC_PERMISSIONS (edge/acl_file.py), INTERNAL_PERMISSIONS
# (node/services.py), ADMIN_PERMISSIONS (node/admin_service.py). These expectations cover the RPCs of that time
# only: an RPC added since is one row of the table and nothing here.
OLD_PERMISSIONS = {
    "CreatePartitions": Permission.CLUSTER_ACTION,
    "DeleteTopics": Permission.CLUSTER_ACTION,
    "CommitFile": Permission.CLUSTER_ACTION,
    "DeleteRecords": Permission.CLUSTER_ACTION,
    "ListOffsets": Permission.CLUSTER_ACTION,
    "FindBatches": Permission.CLUSTER_ACTION,
    "DescribeFiles": Permission.DESCRIBE,
    "FindCoordinator": Permission.DESCRIBE,
    "DescribeCoordinators": Permission.DESCRIBE,
    "ListFileKeys": Permission.DESCRIBE,
    **{
        name: Permission.INTERNAL
        for name in ("HandOverFiles", "KnownFiles", "FetchLog", "OffsetForLeaderEpoch", "FetchSnapshot", "ChangeTopic")
    },
    "CreateSnapshot": Permission.ALTER,
    "ListSnapshots": Permission.DESCRIBE,
    "CheckState": Permission.ALTER,
}
# channels._ERROR_CODE_FIELD, as hard-coded before it was read from the descriptors.
OLD_ERROR_CODE_FIELDS = {"CommitFile": 1, "FindBatches": 2, "ListOffsets": 2, "DeleteRecords": 3, "DescribeFiles": 2}
# routing_client's Access per method.
OLD_ACCESS = {
    "CommitFile": ServedBy.LEADER,
    "ListOffsets": ServedBy.LEADER,
    "DeleteRecords": ServedBy.LEADER,
    "FindBatches": ServedBy.REPLICA,
    "DescribeFiles": ServedBy.REPLICA,
}


def methods_without_row(files: Iterable[FileDescriptor], rows: Sequence[Rpc]) -> list[str]:
    named = {(rpc.service.value, rpc.method) for rpc in rows}
    return [
        f"{service.name}.{method.name}"
        for file in files
        for service in file.services_by_name.values()
        for method in service.methods
        if (service.name, method.name) not in named
    ]


def rows_without_method(rows: Sequence[Rpc]) -> list[str]:
    return [rpc.method for rpc in rows if rpc.method not in rpc.service.descriptor.methods_by_name]


def rows_without_handler(rows: Sequence[Rpc], handlers: type) -> list[str]:
    return [rpc.method for rpc in rows if not callable(getattr(handlers, rpc.handler, None))]


def _without(method: str) -> list[Rpc]:
    return [rpc for rpc in RPCS if rpc.method != method]


def test_every_method_of_every_service_in_the_protos_has_a_row() -> None:
    assert methods_without_row(PROTO_FILES, RPCS) == []
    assert methods_without_row(PROTO_FILES, _without("FetchLog")) == ["CoordinatorInternal.FetchLog"]
    # Every service of the protos is one of the node's services (a new service would need its own rows).
    assert {s.name for f in PROTO_FILES for s in f.services_by_name.values()} == {s.value for s in Service}


def test_every_row_names_a_method_of_its_service() -> None:
    assert rows_without_method(RPCS) == []
    misplaced = dataclasses.replace(BY_METHOD["CommitFile"], service=Service.ADMIN)
    assert rows_without_method([*RPCS, misplaced, dataclasses.replace(misplaced, method="CommitFiles")]) == [
        "CommitFile",
        "CommitFiles",
    ]


def test_every_rows_handler_is_a_method_of_the_router() -> None:
    assert rows_without_handler(RPCS, Router) == []
    wrong = dataclasses.replace(BY_METHOD["CommitFile"], handler="commit_files")
    assert rows_without_handler([wrong], Router) == ["CommitFile"]


def test_method_names_are_unique_across_the_services() -> None:
    # The ACL, the gate and the metrics know a call by its method name alone.
    names = [m.name for f in PROTO_FILES for s in f.services_by_name.values() for m in s.methods]
    assert len(set(names)) == len(names)
    assert len(BY_METHOD) == len(RPCS)


def test_a_rows_stream_is_the_methods() -> None:
    for rpc in RPCS:
        assert rpc.streams == rpc.descriptor.server_streaming, rpc.method
        assert not rpc.descriptor.client_streaming, rpc.method
    assert {rpc.method: rpc.stream for rpc in RPCS if rpc.streams} == {
        "ListFileKeys": Stream.GATED,
        "FetchSnapshot": Stream.ACL_ONLY,
    }


def test_the_permissions_are_the_ones_kept_by_hand_before() -> None:
    assert {method: PERMISSIONS[method] for method in OLD_PERMISSIONS} == OLD_PERMISSIONS
    assert AccessControl(None, False, "none", 1.0).permissions == PERMISSIONS


def test_the_routing_clients_access_per_method_is_the_one_kept_by_hand_before() -> None:
    assert {method: BY_METHOD[method].served_by for method in OLD_ACCESS} == OLD_ACCESS


def test_the_error_code_fields_read_from_the_descriptors_are_the_ones_hard_coded_before() -> None:
    assert {method: channels.ERROR_CODE_FIELDS[method] for method in OLD_ERROR_CODE_FIELDS} == OLD_ERROR_CODE_FIELDS
    assert {method: channels.RESPONSE_TYPES[method].DESCRIPTOR.name for method in OLD_ERROR_CODE_FIELDS} == {
        method: f"{method}Response" for method in OLD_ERROR_CODE_FIELDS
    }
    assert set(channels.ERROR_CODE_FIELDS) == set(channels.RESPONSE_TYPES)


def test_the_error_code_walk_refuses_a_response_without_item_results_and_a_multi_byte_tag() -> None:
    with pytest.raises(InvariantViolation, match="ListFileKeysPage"):
        channels.item_error_code_field(pb.ListFileKeysPage.DESCRIPTOR)  # its one error_code is the page's own
    with pytest.raises(InvariantViolation, match="single-byte tag"):
        channels.retriable_code_bytes(16)


def test_calls_passed_on_to_a_catalog_holder_are_the_ones_the_router_passed_on_before() -> None:
    holder = {
        rpc.method for rpc in RPCS if rpc.no_replica is NoReplica.CATALOG_HOLDER and rpc.method in OLD_PERMISSIONS
    }
    assert holder == {"CreatePartitions", "DeleteTopics", "FindCoordinator"}


def test_the_front_process_serves_every_row_as_before() -> None:
    old_front = {
        **dict.fromkeys(("CommitFile", "DeleteRecords", "ListOffsets", "DescribeFiles"), Front.LEADING_PROCESS),
        "FindBatches": Front.STATE_FILES,
        **dict.fromkeys(("CreatePartitions", "DeleteTopics"), Front.CATALOG_CHANGE),
        "FindCoordinator": Front.CATALOG,
        "DescribeCoordinators": Front.EVERY_PROCESS,
        "ListFileKeys": Front.HERE,
        **{method: Front.HERE for method in OLD_PERMISSIONS if BY_METHOD[method].service is not Service.COORDINATOR},
    }
    assert {method: BY_METHOD[method].front for method in old_front} == old_front


def test_a_row_the_front_process_cannot_serve_stops_it_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [front_route_problem(rpc) for rpc in RPCS] == [None] * len(RPCS)
    commit_file = BY_METHOD["CommitFile"]
    unserved = [
        dataclasses.replace(commit_file, front=Front.STATE_FILES),
        dataclasses.replace(commit_file, front=Front.CATALOG),
        dataclasses.replace(commit_file, front=Front.EVERY_PROCESS),
        dataclasses.replace(commit_file, handler="commit_files"),
    ]
    assert all(front_route_problem(rpc) is not None for rpc in unserved)
    monkeypatch.setattr(front, "RPCS", (*RPCS, unserved[0]))
    answers = FrontAnswers(cast(Any, None), cast(Any, None), cast(Any, None), cast(RoutingClient, None))
    with pytest.raises(FrontRouteMissing, match="CommitFile"):
        answers.placement(cast(Router, None))


# ---------------------------------------------------------------------------------------------- the services


class _Context:
    """A call's context as the services read it."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    async def abort(self, code: Any, message: str) -> None:
        raise AssertionError(f"aborted: {code} {message}")


class _Router:
    """The Router as the services use it: what answers each row, placed or here."""

    def __init__(self, placement: dict[str, Placed]) -> None:
        self._placement = placement

    def answer(self, rpc: Rpc) -> Placed:
        return self._placement.get(rpc.method) or Placed(self.answer_here(rpc))

    def answer_here(self, rpc: Rpc) -> Answer:
        if rpc.streams:
            return lambda request: _items(("here", rpc.method, request))
        return lambda request: ("here", rpc.method, request)


async def _items(*items: object) -> AsyncIterator[object]:
    for item in items:
        yield item


def _gate() -> CallGate:
    gate = CallGate(AccessControl(None, False, "none", 1.0), Metrics())
    gate.ready = True
    return gate


def test_every_method_of_every_service_is_served_from_its_row() -> None:
    gate = _gate()
    built = servicers(cast(Router, _Router({})), gate)
    assert [descriptor.name for descriptor, _ in built] == [s.value for s in Service]
    for descriptor, servicer in built:
        assert isinstance(servicer, ServiceMethods)
        for method in descriptor.methods:
            run = getattr(servicer, method.name)
            expected = inspect.isasyncgenfunction if method.server_streaming else inspect.iscoroutinefunction
            assert expected(run), method.full_name
        assert set(edge_handlers(descriptor, servicer, gate)) == set(descriptor.methods_by_name)


def test_a_call_passed_on_already_is_answered_here_and_only_where_the_placement_passes_it_on() -> None:
    placement = {
        "CommitFile": Placed(lambda request: ("placed", request), passes_on=True),
        "DescribeCoordinators": Placed(lambda request: ("placed", request)),
    }
    built = dict((d.name, s) for d, s in servicers(cast(Router, _Router(placement)), _gate()))
    methods = built[Service.COORDINATOR.value]
    passed_on = _Context((PASSED_ON,))

    async def scenario() -> list[object]:
        return [
            await methods.CommitFile("r", _Context()),  # type: ignore[attr-defined]
            await methods.CommitFile("r", passed_on),  # type: ignore[attr-defined]
            await methods.DescribeCoordinators("r", passed_on),  # type: ignore[attr-defined]
            await methods.FindBatches("r", passed_on),  # type: ignore[attr-defined]
            [page async for page in methods.ListFileKeys("r", _Context())],  # type: ignore[attr-defined]
            [c async for c in built[Service.INTERNAL.value].FetchSnapshot("r", _Context())],  # type: ignore[attr-defined]
        ]

    assert asyncio.run(scenario()) == [
        ("placed", "r"),
        ("here", "CommitFile", "r"),
        ("placed", "r"),
        ("here", "FindBatches", "r"),
        [("here", "ListFileKeys", "r")],
        [("here", "FetchSnapshot", "r")],
    ]
