"""The node's own gRPC services, built from the RPC table (coordinator/edge/rpcs.py): one method per row.

Each method hands its call to the gate (coordinator/edge/gate.py: readiness, access, metrics, the error table)
with what answers the row in this process (`Router.answer`); the router answers per item.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, final

from google.protobuf.descriptor import ServiceDescriptor

from coordinator.base.errors import CallRejected, ShuttingDown, grpc_status_of
from coordinator.edge.gate import CallGate, Context
from coordinator.edge.rpcs import Rpc, Service, Stream, rows_of
from coordinator.node.router import Answer, Router

# Marks a call a node's first process passed on to its own processes (coordinator/node/processes/front.py).
PASSED_ON = ("x-diskless-passed-on", "1")
SERVICE_NAME = Service.COORDINATOR.descriptor.full_name  # the service the standard health service reports on
# A coroutine function; for a stream, an async generator function.
ServiceMethod: TypeAlias = Callable[[Any, Context], Any]
# What answers a call, chosen by its context: where a call may be passed on, one passed on already is not.
AnswerFor: TypeAlias = Callable[[Context], Answer]


@final
class ServiceMethods:
    """One service's methods, by their names in the protos, as `coordinator.edge.gate.add_service` serves them
    (a method of the service with no row is an AttributeError there, when the server starts)."""

    def __init__(self, methods: dict[str, ServiceMethod]) -> None:
        for name, method in methods.items():
            setattr(self, name, method)


def servicers(router: Router, gate: CallGate) -> list[tuple[ServiceDescriptor, object]]:
    """Every service of the node, a method per row, each answered as `router` places it."""
    built: list[tuple[ServiceDescriptor, object]] = []
    for service in Service:
        methods = {rpc.method: service_method(rpc, router, gate) for rpc in rows_of(service)}
        built.append((service.descriptor, ServiceMethods(methods)))
    return built


def service_method(rpc: Rpc, router: Router, gate: CallGate) -> ServiceMethod:
    placed = router.answer(rpc)
    answer_for = (
        _unless_passed_on(placed.answer, router.answer_here(rpc)) if placed.passes_on else _always(placed.answer)
    )
    if rpc.stream is Stream.GATED:
        return _gated_stream(rpc.method, answer_for, gate)
    if rpc.stream is Stream.ACL_ONLY:
        return _acl_only_stream(rpc.method, answer_for, gate)
    if rpc.stream is Stream.EACH_REQUEST:
        return _each_request(rpc.method, answer_for, gate)
    return _unary(rpc.method, answer_for, gate)


def _unary(method: str, answer_for: AnswerFor, gate: CallGate) -> Callable[[Any, Context], Awaitable[Any]]:
    # FindBatches' answer is serialized already (coordinator/machine/batch_entries.py): the edge sends it as it is.
    async def call(request: Any, context: Context) -> Any:
        return await gate.call(method, context, lambda: answer_for(context)(request))

    return call


def _gated_stream(method: str, answer_for: AnswerFor, gate: CallGate) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
        items = gate.stream(method, context, lambda: answer_for(context)(request))
        async with contextlib.aclosing(items) as opened:
            async for item in opened:
                yield item

    return stream


def _acl_only_stream(
    method: str, answer_for: AnswerFor, gate: CallGate
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
        # Admitted here by the same ACL as every call of its service, outside the gate's readiness and metrics.
        try:
            gate.access.admit(method, context.auth_context(), context.invocation_metadata())
        except CallRejected as error:
            code, message = grpc_status_of(error)
            await context.abort(code, message)
        async with contextlib.aclosing(gate.node_items(lambda: answer_for(context)(request))) as items:
            async for item in items:
                yield item

    return stream


def _each_request(
    method: str, answer_for: AnswerFor, gate: CallGate
) -> Callable[[AsyncIterator[Any], Context], AsyncIterator[Any]]:
    async def stream(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        # Admitted once by the ACL, as the stream of FetchSnapshot; each request then costs only its answer (no
        # call's setup, admission and metrics per round: why the stream exists).
        try:
            gate.access.admit(method, context.auth_context(), context.invocation_metadata())
        except CallRejected as error:
            code, message = grpc_status_of(error)
            await context.abort(code, message)
        answer = answer_for(context)
        async for request in requests:
            if gate.stopping:  # refused as a FetchLogs call would be: an open stream must not hold the drain
                code, message = grpc_status_of(ShuttingDown("the node is shutting down; fetch from its successor"))
                await context.abort(code, message)
            yield await gate.on_node(functools.partial(answer, request))

    return stream


def _always(answer: Answer) -> AnswerFor:
    return lambda context: answer


def _unless_passed_on(answer: Answer, here: Answer) -> AnswerFor:
    """`answer` (which passes the call on to another process of this node), or `here` for a call passed on already;
    the metadata is read only for such calls."""

    def answer_for(context: Context) -> Answer:
        return here if PASSED_ON in (context.invocation_metadata() or ()) else answer

    return answer_for
