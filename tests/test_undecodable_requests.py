"""Bytes that are not a valid request get INVALID_ARGUMENT with the reason, are counted, and logged at a bounded rate.

Issue 12, part 5: gRPC's generated handlers parse inside gRPC, which answered UNKNOWN and logged a 7-line
traceback per call.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from protos import admin_pb2, internal_pb2
from protos import coordinator_pb2 as pb
from tests.harness import Broker, ServerProcess, batch, laid_out
from tests.test_metrics import scrape, total

SERVICES: list[ServiceDescriptor] = [
    pb.DESCRIPTOR.services_by_name["DisklessCoordinator"],
    admin_pb2.DESCRIPTOR.services_by_name["CoordinatorAdmin"],
    internal_pb2.DESCRIPTOR.services_by_name["CoordinatorInternal"],
]
METHODS = [(service, method) for service in SERVICES for method in service.methods]
# Not protobuf: a field of wire type 7 (there is none), a varint that never ends, a length past the end.
UNDECODABLE = [b"\x0f", b"\xff\xff\xff", b"\x0a\x05ab"]
FLOOD = 1000
FLOOD_IN_FLIGHT = 100


def raw_method(channel: grpc.Channel, service: ServiceDescriptor, method_name: str) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(
        f"/{service.full_name}/{method_name}", request_serializer=None, response_deserializer=None
    )


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("undecodable") / "data", settings={"diskless.metrics.listen": "127.0.0.1:0"}
    ).start()
    yield server
    assert server.stop() == 0, "".join(server.output)


@pytest.mark.parametrize(("service", "method"), METHODS, ids=[m.full_name for _, m in METHODS])
def test_every_method_answers_undecodable_bytes_with_invalid_argument(
    node: ServerProcess, service: ServiceDescriptor, method: MethodDescriptor
) -> None:
    with grpc.insecure_channel(node.address) as channel:
        call = raw_method(channel, service, method.name)
        for payload in UNDECODABLE:
            with pytest.raises(grpc.RpcError) as refused:
                call(payload, timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
            details = refused.value.details() or ""
            assert details.startswith(f"request is not a valid {method.input_type.name}: "), details
            assert len(details) < 200, details


def test_a_string_that_is_not_utf8_is_undecodable(node: ServerProcess) -> None:
    object_key = pb.CommitFileRequest.DESCRIPTOR.fields_by_name["object_key"].number
    payload = bytes([object_key << 3 | 2, 2]) + b"\xc3\x28"  # a length-delimited field holding invalid UTF-8
    with grpc.insecure_channel(node.address) as channel, pytest.raises(grpc.RpcError) as refused:
        raw_method(channel, SERVICES[0], "CommitFile")(payload, timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request is not a valid CommitFileRequest" in (refused.value.details() or "")


@pytest.mark.slow
def test_a_flood_of_undecodable_requests_is_counted_logged_briefly_and_harmless(node: ServerProcess) -> None:
    before = scrape(node)
    lines_before = len(node.output)
    codes: list[grpc.StatusCode] = []
    with grpc.insecure_channel(node.address) as channel:
        calls = [raw_method(channel, service, method.name) for service, method in METHODS]
        for start in range(0, FLOOD, FLOOD_IN_FLIGHT):
            futures: list[Future[bytes]] = [
                calls[i % len(calls)].future(UNDECODABLE[i % len(UNDECODABLE)], timeout=30)
                for i in range(start, start + FLOOD_IN_FLIGHT)
            ]
            for future in futures:
                error = future.exception()
                codes.append(error.code() if isinstance(error, grpc.RpcError) else grpc.StatusCode.OK)
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * FLOOD
    # The node still serves, and well-formed calls are unaffected.
    broker = Broker(node.stub, node.coordinators)
    topic = broker.create_topic("after-the-flood", 1)
    assert broker.commit(laid_out([batch(topic, 0, 3)])).batches[0].error_code == pb.NONE
    after = scrape(node)
    counted = total(after, "diskless_undecodable_requests_total") - total(before, "diskless_undecodable_requests_total")
    assert counted == FLOOD
    answered = total(after, "diskless_rpc_requests_total", code="INVALID_ARGUMENT") - total(
        before, "diskless_rpc_requests_total", code="INVALID_ARGUMENT"
    )
    assert answered == FLOOD
    flood_lines = node.output[lines_before:]
    about_it = [line for line in flood_lines if "INVALID_ARGUMENT" in line or "not a valid" in line]
    assert len(about_it) <= 2, about_it  # one line per interval, with the count it stood for
    assert not any("Traceback" in line or "Unexpected" in line for line in flood_lines), flood_lines


def test_reflection_still_describes_every_service(node: ServerProcess) -> None:
    with grpc.insecure_channel(node.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [reflection_pb2.ServerReflectionRequest(list_services="")] + [
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=service.full_name) for service in SERVICES
        ]
        answers = list(stub.ServerReflectionInfo(iter(requests), timeout=10))
    listed = {s.name for s in answers[0].list_services_response.service}
    assert {service.full_name for service in SERVICES} <= listed
    for answer in answers[1:]:
        assert answer.file_descriptor_response.file_descriptor_proto, answer
