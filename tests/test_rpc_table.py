"""The RPC table (coordinator/edge/rpcs.py) against the protos, and what is derived from it.

A method of a service in the protos without a row, a row naming a method or a handler that does not exist, or a
row the first process of a node spread over processes cannot serve as it says, fails here. What is derived from the
rows is checked against rules read from the protos for every method of every service (its service, the verb of its
name, its response's item results), so an RPC added since the table is checked as the first ones were.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, cast

import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor, MethodDescriptor

from coordinator.base.invariants import InvariantViolation
from coordinator.base.metrics import Metrics
from coordinator.client import channels
from coordinator.client.routes import RETRIABLE_CODES
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

# What each method's verb says it does to the coordinators, read from its name in the protos: a method whose verb is
# in neither set fails here, so a new RPC is classified when it is added (and the rules below then check its row).
CHANGING_VERBS = (
    "Create",
    "Delete",
    "Commit",
    "Alter",
    "Elect",
    "Check",
    "HandOver",
    "Change",
    "Init",
    "Repair",
    "Replace",
    "Move",  # a partition moved between coordinators (design §5a)
    "Adopt",  # its copy and cut-over at the target
    "Return",  # borrowed WAL files given back
    "Abandon",  # a move given up before its adoption
)
READING_VERBS = ("Describe", "List", "Find", "Known", "Fetch", "OffsetFor", "Get")


def verb(method: str) -> str:
    found = [v for v in (*CHANGING_VERBS, *READING_VERBS) if method.startswith(v)]
    assert len(found) == 1, f"{method}: its verb is not one of {CHANGING_VERBS + READING_VERBS}: classify it here"
    return found[0]


def proto_methods() -> list[tuple[str, MethodDescriptor]]:
    """(service name, method) for every method of every service of the protos."""
    return [(s.name, m) for f in PROTO_FILES for s in f.services_by_name.values() for m in s.methods]


def with_item_codes(descriptor: Descriptor, code: int) -> Any:
    """A message of `descriptor` with one element in each repeated message field, all the way down, and every item
    result's `error_code` set to `code` (the top message's own left alone)."""
    message = message_factory.GetMessageClass(descriptor)()

    def fill(target: Any, top: bool) -> None:
        for field in target.DESCRIPTOR.fields:
            if field.name == "error_code" and not top:
                setattr(target, field.name, code)
            elif field.message_type is not None and field.is_repeated and not field.message_type.GetOptions().map_entry:
                fill(getattr(target, field.name).add(), False)

    fill(message, True)
    return message


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
        # Only a row answering each request in turn takes a stream of requests (and the edge serves it so).
        assert rpc.descriptor.client_streaming == (rpc.stream is Stream.EACH_REQUEST), rpc.method
    assert {rpc.method: rpc.stream for rpc in RPCS if rpc.streams} == {
        "ListFileKeys": Stream.GATED,
        "FetchSnapshot": Stream.ACL_ONLY,
        "FetchLogsStream": Stream.EACH_REQUEST,
    }


def test_each_rows_permission_follows_from_its_service_and_verb() -> None:
    # Derived from the protos, so an RPC added since is checked as the first ones were: calls between coordinators
    # need INTERNAL; one that changes anything never needs only DESCRIBE (ALTER for operators, CLUSTER_ACTION for
    # brokers); one that reads needs DESCRIBE, or CLUSTER_ACTION on a broker's data path.
    for service, method in proto_methods():
        permission = PERMISSIONS[method.name]
        if service == Service.INTERNAL.value:
            assert permission is Permission.INTERNAL, method.name
            continue
        changes = verb(method.name) in CHANGING_VERBS
        allowed = {
            (Service.COORDINATOR.value, True): {Permission.CLUSTER_ACTION},
            (Service.COORDINATOR.value, False): {Permission.DESCRIBE, Permission.CLUSTER_ACTION},
            (Service.ADMIN.value, True): {Permission.ALTER},
            (Service.ADMIN.value, False): {Permission.DESCRIBE},
        }[service, changes]
        assert permission in allowed, f"{service}.{method.name}: {permission}, one of {allowed}"
    assert AccessControl(None, False, "none", 1.0).permissions == PERMISSIONS


def test_a_replica_answers_only_reads_and_a_change_goes_to_a_leader_or_a_node() -> None:
    for service, method in proto_methods():
        rpc = BY_METHOD[method.name]
        if rpc.served_by is ServedBy.REPLICA:
            assert verb(method.name) in READING_VERBS, f"{method.name}: a replica changes nothing"
        if service == Service.INTERNAL.value and rpc.served_by is ServedBy.NODE:
            assert verb(method.name) in READING_VERBS, f"{method.name}: a change between coordinators is a leader's"


def test_the_fast_path_finds_a_retriable_code_in_any_item_result_of_every_split_call() -> None:
    # Behaviour, from the descriptors: every broker call split by coordinator (served by a leader or a replica, one
    # answer) is on the fast path, and its byte scan sees a retriable code set in the item results, and none when
    # every item answered NONE. A call for one coordinator (its request names it) has no items: not split.
    split = {
        m.name
        for service, m in proto_methods()
        if service == Service.COORDINATOR.value and BY_METHOD[m.name].served_by is not ServedBy.NODE
        if not m.server_streaming and "coordinator_id" not in m.input_type.fields_by_name
    }
    assert "ReplaceBatches" in split and "GetFileMergeWorkItem" not in split
    assert set(channels.ERROR_CODE_FIELDS) == set(channels.RESPONSE_TYPES) == split
    for name in sorted(split):
        output = BY_METHOD[name].descriptor.output_type
        for code in RETRIABLE_CODES:
            answer, retriable = channels.decode_answer(name, with_item_codes(output, code).SerializeToString())
            assert retriable, f"{name}: {pb.ErrorCode.Name(code)} not seen"
        answer, retriable = channels.decode_answer(name, with_item_codes(output, pb.NONE).SerializeToString())
        assert not retriable and answer.DESCRIPTOR is output, name


def test_the_error_code_walk_refuses_a_response_without_item_results_and_a_multi_byte_tag() -> None:
    with pytest.raises(InvariantViolation, match="ListFileKeysPage"):
        channels.item_error_code_field(pb.ListFileKeysPage.DESCRIPTOR)  # its one error_code is the page's own
    with pytest.raises(InvariantViolation, match="single-byte tag"):
        channels.retriable_code_bytes(16)


def test_calls_passed_on_to_a_catalog_holder_are_a_nodes_and_the_front_passes_leaders_calls_on() -> None:
    for service, method in proto_methods():
        rpc = BY_METHOD[method.name]
        if rpc.no_replica is NoReplica.CATALOG_HOLDER:
            assert rpc.served_by is ServedBy.NODE, f"{method.name}: passed on whole, so a node's call"
        if service == Service.INTERNAL.value or (
            service == Service.ADMIN.value and rpc.served_by is not ServedBy.LEADER
        ):
            assert rpc.front is Front.HERE, f"{method.name}: operators' and coordinators' calls are answered here"
        elif rpc.served_by is ServedBy.LEADER and not rpc.streams:
            assert rpc.front is Front.LEADING_PROCESS, f"{method.name}: a leader's call reaches the leading process"


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


@pytest.mark.parametrize("in_metrics", [True, False])
def test_an_answer_is_counted_in_the_registry_unless_only_its_hook_counts_it(in_metrics: bool) -> None:
    """A reader process's gate (answers_in_metrics=False) counts its calls only through on_answered."""
    metrics = Metrics()
    told: list[tuple[str, str]] = []
    gate = CallGate(
        AccessControl(None, False, "none", 1.0),
        metrics,
        on_answered=lambda method, code, _: told.append((method, code.name)),
        answers_in_metrics=in_metrics,
    )
    gate.ready = True
    assert asyncio.run(gate.call("FindBatches", _Context(), lambda: b"answer")) == b"answer"  # type: ignore[arg-type]
    assert told == [("FindBatches", "OK")]
    counted = metrics.registry.get_sample_value("diskless_rpc_requests_total", {"method": "FindBatches", "code": "OK"})
    timed = metrics.registry.get_sample_value("diskless_rpc_duration_seconds_count", {"method": "FindBatches"})
    assert (counted, timed) == ((1.0, 1.0) if in_metrics else (None, None))
