"""The edge of the node's gRPC services: admission (its bounds in `admission.py`), parsing, access, metrics and
the error table.

Every call of the node's own services comes in as bytes: the gate first admits
it within the node's bounds (calls and request bytes in progress, deadline
left), refusing the excess at once with RESOURCE_EXHAUSTED, then parses it
(bytes that are not a valid request get INVALID_ARGUMENT), then, for a method
whose answer can be far larger than its request (FindBatches), admits the
answer's bytes within their own bound, then runs it with exceptions mapped to
gRPC statuses through one table (`errors.grpc_status_of`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
from typing import Any, NoReturn, TypeAlias, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from grpc._cython import cygrpc  # type: ignore[attr-defined]  # private: grpc's stubs leave it out

from coordinator.base.errors import (
    CallRejected,
    PermissionDenied,
    Shed,
    ShuttingDown,
    Unauthenticated,
    UndecodableRequest,
    grpc_status_of,
)
from coordinator.base.invariants import check_invariant
from coordinator.base.logging_output import EveryInterval
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.edge.access_control import CALLER, AccessControl
from coordinator.edge.admission import Admission, AnswerHold
from coordinator.edge.loop import NodeHop, outcome_of

log = logging.getLogger(__name__)
Response = TypeVar("Response")
# The context of a call as the edge sees it: the request arrives as bytes, the response leaves as a message.
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
REFUSAL_LOG_INTERVAL_S = 10.0  # one line per kind of refusal per interval, with the count it stood for
# gRPC's own bound of calls (maximum_concurrent_rpcs) sits this far above the gate's, so that the calls refused
# are refused by the gate (counted, logged, explained); gRPC's bound only caps the calls being refused at once.
GRPC_REFUSING_CALLS_MAX = 1024


class CallGate:
    """What every call of the node's services goes through: admission, parsing, readiness, access, metrics, errors."""

    def __init__(
        self,
        access: AccessControl,
        metrics: Metrics,
        admission: Admission | None = None,
        on_answered: Callable[[str, grpc.StatusCode, float], None] | None = None,
        hop: NodeHop | None = None,
        answer_bounds: Mapping[str, Callable[[Any], int]] | None = None,
        answers_in_metrics: bool = True,
    ) -> None:
        self.access = access
        # By method: the most bytes a parsed request's answer can take (FindBatches'), admitted against
        # the admission's bound of answer bytes before any work, and held until gRPC has sent the answer.
        self._answer_bounds = dict(answer_bounds or {})
        # None: the gRPC server runs on the node's own loop; else the work of an admitted call hops there.
        self._hop = hop
        self.metrics = metrics
        self.admission = admission or Admission(2**31 - 1, 0, 0)
        # Also told of every answer (method, status, seconds): a reader process counts its calls where the node sees.
        self._on_answered = on_answered
        # False: answers are counted and timed only through `on_answered`. A reader process's registry is never
        # scraped (the node reports its calls from the counts `on_answered` keeps), and a histogram's observe per
        # call (a lock, a walk of its buckets) would be work nobody reads.
        self._answers_in_metrics = answers_in_metrics
        self._refusal_log = EveryInterval(REFUSAL_LOG_INTERVAL_S)
        self.ready = False
        self.stopping = False
        self._unexpected_logged: set[str] = set()
        # Each call's two metric children by (method, status), looked up once: `.labels()` per call (its lock,
        # its key checks) cost more than the counting itself on the FindBatches path.
        self._answer_children: dict[tuple[str, grpc.StatusCode], tuple[Any, Any]] = {}

    async def call(
        self,
        method: str,
        context: Context,
        handler: Callable[[], Awaitable[Response] | Response],
    ) -> Response:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            self._admit(method, context)
            if self._hop is not None:
                return await self._hop.call(handler)
            # On this loop: `outcome_of` without a coroutine of its own (a reader's FindBatches answers at once).
            outcome = handler()
            if asyncio.iscoroutine(outcome) or isinstance(outcome, asyncio.Future):
                return await outcome  # type: ignore[no-any-return]
            return outcome  # type: ignore[return-value]
        except CallRejected as error:
            code, message = self._rejected(method, error)
            await context.abort(code, message)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            code, message = self._unexpected(error)
            await context.abort(code, message)
        finally:
            self._answered(method, code, started)
        raise AssertionError("unreachable")

    async def stream(
        self, method: str, context: Context, items: Callable[[], AsyncGenerator[Response, None]]
    ) -> AsyncGenerator[Response, None]:
        """A server stream, as `call` runs a call: readiness, access, metrics and the error table.

        A failure after some items ends the stream with its status; a caller gone ends it CANCELLED, and the
        items' generator is closed at once (its `finally` releases what it holds), not when it is collected.
        """
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            self._admit(method, context)
            async with contextlib.aclosing(self.node_items(items)) as stream:
                async for item in stream:
                    yield item
        except CallRejected as error:
            code, message = self._rejected(method, error)
            await context.abort(code, message)
        except (asyncio.CancelledError, GeneratorExit):
            code = grpc.StatusCode.CANCELLED
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            code, message = self._unexpected(error)
            await context.abort(code, message)
        finally:
            self._answered(method, code, started)

    async def on_node(self, handler: Callable[[], Awaitable[Response] | Response]) -> Response:
        """What `handler` answers, run on the node's loop (see `call`), without a call's admission and metrics."""
        return await (self._hop.call(handler) if self._hop is not None else outcome_of(handler))

    def node_items(self, items: Callable[[], AsyncIterator[Response]]) -> AsyncGenerator[Response, None]:
        """A stream of the node's, made and advanced on the node's loop (see `call`), closed when this one is."""
        return _closing_items(items) if self._hop is None else self._hop.items(items)

    def _answered(self, method: str, code: grpc.StatusCode, started: float) -> None:
        """Counts a call or stream that ended with `code` (and tells the `on_answered` hook)."""
        elapsed_s = time.perf_counter() - started
        if self._answers_in_metrics:
            children = self._answer_children.get((method, code))
            if children is None:
                children = (
                    self.metrics.rpc_requests.labels(method, code.name),
                    self.metrics.rpc_duration.labels(method),
                )
                self._answer_children[(method, code)] = children
            children[0].inc()
            children[1].observe(elapsed_s)
        if self._on_answered is not None:
            self._on_answered(method, code, elapsed_s)

    def _admit(self, method: str, context: Context) -> None:
        if self.stopping:
            raise ShuttingDown("the node is shutting down; retry on another node or later")
        # The caller's principal goes with every call this one passes on to another node (`CALLER`).
        CALLER.set(self.access.admit(method, context.auth_context(), context.invocation_metadata()))
        if not self.ready:
            raise ShuttingDown("the node is still loading its coordinators; retry shortly")

    def _rejected(self, method: str, error: CallRejected) -> tuple[grpc.StatusCode, str]:
        code, message = grpc_status_of(error)
        if isinstance(error, Unauthenticated | PermissionDenied):
            self.metrics.denied_calls.labels(method, code.name).inc()
        return code, message

    def _unexpected(self, error: Exception) -> tuple[grpc.StatusCode, str]:
        """The status of an error no one expected; a new kind is logged once, in full (call it in `except`)."""
        name = type(error).__name__
        if name not in self._unexpected_logged:
            self._unexpected_logged.add(name)
            log.exception("unexpected error in a call")
        return grpc_status_of(error)

    async def take(
        self,
        method: str,
        raw: bytes,
        request_type: type[Message],
        run: Callable[[Any, Context], Awaitable[Response]],
        context: Context,
    ) -> Response:
        """A call as it arrives: admitted within the node's bounds, parsed, then run (`run` goes through `call`).

        A call past the bounds is refused before its request is parsed, so a refusal costs the node next to
        nothing; refusals are not timed in diskless_rpc_duration_seconds (they would hide the work's latency).
        """
        size = len(raw)
        refusal = self.admission.refusal(size, context.time_remaining())
        if refusal is not None:
            reason, message = refusal
            self.metrics.shed_calls.labels(method, reason).inc()
            await self._refuse(method, Shed(message), context, ("shed", reason), f"refusing {method}")
        self.admission.take(size)
        try:
            request = await self.parse(method, raw, request_type, context)
            answer_bound = self._answer_bounds.get(method)
            if answer_bound is None:
                return await run(request, context)
            return await self._run_bounded(method, request, answer_bound(request), run, context)
        finally:
            self.admission.release(size)

    async def _run_bounded(
        self,
        method: str,
        request: Any,
        potential: int,
        run: Callable[[Any, Context], Awaitable[Response]],
        context: Context,
    ) -> Response:
        """Runs a call whose answer bytes are admitted: refused at once past the bound, before any work; else its
        potential answer bytes are held while it runs, then its answer's own until gRPC is done with the call."""
        refusal = self.admission.response_refusal(potential)
        if refusal is not None:
            reason, message = refusal
            self.metrics.shed_calls.labels(method, reason).inc()
            await self._refuse(method, Shed(message), context, ("shed", reason), f"refusing {method}")
        hold = AnswerHold(self.admission, potential)
        try:
            # gRPC calls this once the call is over, the answer sent or not (cancelled, failed, deadline).
            context.add_done_callback(lambda _: hold.release())  # type: ignore[arg-type]  # stubs: a class, no Protocol
        except Exception:
            hold.release()
            raise
        try:
            answer = await run(request, context)
        except BaseException:
            hold.release()  # nothing will be sent but a status
            raise
        if isinstance(answer, bytes | Message):
            hold.built(len(answer) if isinstance(answer, bytes) else answer.ByteSize())
        return answer

    async def parse(self, method: str, raw: bytes, request_type: type[Message], context: Context) -> Any:
        """The request, or INVALID_ARGUMENT with the reason when its bytes are not one (counted, logged briefly)."""
        try:
            return request_type.FromString(raw)
        except DecodeError as error:  # the reason without the type name, which the message gives
            reason = str(error).rpartition("': ")[2] or "not a protobuf message"
            name = request_type.DESCRIPTOR.name
            self.metrics.undecodable_requests.labels(method).inc()
            await self._refuse(
                method,
                UndecodableRequest(f"request is not a valid {name}: {reason}"),
                context,
                "undecodable",
                f"refusing {method} from {context.peer()}",
            )

    async def _refuse(self, method: str, error: CallRejected, context: Context, log_key: object, what: str) -> NoReturn:
        """Answers a call refused at the edge (raises AbortError), counts it, and logs it at a bounded rate."""
        code, message = grpc_status_of(error)
        self.metrics.rpc_requests.labels(method, code.name).inc()
        if self._on_answered is not None:
            self._on_answered(method, code, 0.0)
        if self._refusal_log.allow(log_key):
            suppressed = self._refusal_log.take_suppressed(log_key)
            log.warning("%s with %s: %s (%d more since the last such line)", what, code.name, message, suppressed)
        await context.abort(code, message)
        raise AssertionError("unreachable: abort raises")


async def _closing_items(make: Callable[[], AsyncIterator[Response]]) -> AsyncGenerator[Response, None]:
    items = make()
    try:
        async for item in items:
            yield item
    finally:
        if isinstance(items, AsyncGenerator):
            await items.aclose()


def grpc_server(settings: Settings) -> grpc.aio.Server:
    """A gRPC server within the node's bounds (the node's own, and each reader process's)."""
    options = [
        ("grpc.max_receive_message_length", settings.request_max_bytes),
        ("grpc.max_send_message_length", settings.request_max_bytes),
        ("grpc.so_reuseport", 0),
        # Calls gRPC holds until the node takes them up: the node sees none of them (no admission, no metrics).
        ("grpc.server.max_pending_requests", settings.max_pending_calls),
        ("grpc.server.max_pending_requests_hard_limit", settings.max_pending_calls),
        ("grpc.server_max_unrequested_time_in_server", math.ceil(settings.max_pending_ms / 1000)),
    ]
    if settings.stream_window_bytes:  # a fixed window: gRPC's estimator would grow it to hold whole requests
        options += [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", settings.stream_window_bytes)]
    return grpc.aio.server(
        options=options, maximum_concurrent_rpcs=settings.max_concurrent_rpcs + GRPC_REFUSING_CALLS_MAX
    )


def edge_handlers(
    service: ServiceDescriptor, servicer: object, gate: CallGate, only: Collection[str] | None = None
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """A service's methods as gRPC handlers taking the request's bytes, which the gate admits and then parses.

    gRPC's generated handlers parse inside gRPC, which answers bytes that do not parse with UNKNOWN and logs a
    traceback per call; these answer INVALID_ARGUMENT with the reason and log at a bounded rate. `only`: the
    methods served (the others get UNIMPLEMENTED from gRPC); None: every method.
    """
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        if only is not None and method.name not in only:
            continue
        run = getattr(servicer, method.name)
        request_type = message_factory.GetMessageClass(method.input_type)
        response_type = message_factory.GetMessageClass(method.output_type)
        if method.client_streaming:  # replication's stream of requests: its servicer admits it (ACL) and parses
            check_invariant(method.server_streaming, f"{method.full_name} streams requests for one answer")
            check_invariant(inspect.isasyncgenfunction(run), f"{method.full_name} needs an async generator")
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _take_requests(gate, method.name, request_type, run),
                request_deserializer=None,  # each message's bytes parsed by the gate, as a unary call's
                response_serializer=response_type.SerializeToString,
            )
            continue
        if method.server_streaming:  # not admitted here: each servicer admits its streams (see `CallGate.stream`)
            check_invariant(inspect.isasyncgenfunction(run), f"{method.full_name} needs an async generator")
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _take_stream(gate, method.name, request_type, run),
                request_deserializer=None,
                response_serializer=response_type.SerializeToString,
            )
            continue
        if not inspect.iscoroutinefunction(run):  # the generated base's stub: gRPC answers UNIMPLEMENTED
            log.warning("%s is not served: %s has no coroutine for it", method.full_name, type(servicer).__name__)
            continue
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _take_call(gate, method.name, request_type, run),
            request_deserializer=None,  # bytes as received: the gate admits the call before parsing it
            response_serializer=_serializer(response_type),
        )
    return handlers


def _serializer(response_type: type[Message]) -> Callable[[Message | bytes], bytes]:
    """A response's bytes; an answer built as bytes already (FindBatches, coordinator/machine/batch_entries.py)
    goes as it is."""
    serialize = response_type.SerializeToString

    def serialized(response: Message | bytes) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serialized


def _take_call(
    gate: CallGate, method: str, request_type: type[Message], run: Callable[[Any, Any], Awaitable[Any]]
) -> Callable[[bytes, Context], Awaitable[Any]]:
    async def take(raw: bytes, context: Context) -> Any:
        return await gate.take(method, raw, request_type, run, context)

    return take


def _take_stream(
    gate: CallGate, method: str, request_type: type[Message], run: Callable[[Any, Any], AsyncGenerator[Any, None]]
) -> Callable[[bytes, Context], AsyncIterator[Any]]:
    async def take(raw: bytes, context: Context) -> AsyncIterator[Any]:
        request = await gate.parse(method, raw, request_type, context)
        async with contextlib.aclosing(run(request, context)) as items:
            async for item in items:
                yield item

    return take


def _take_requests(
    gate: CallGate,
    method: str,
    request_type: type[Message],
    run: Callable[[AsyncIterator[Any], Any], AsyncGenerator[Any, None]],
) -> Callable[[AsyncIterator[bytes], Context], AsyncIterator[Any]]:
    async def take(raws: AsyncIterator[bytes], context: Context) -> AsyncIterator[Any]:
        async def parsed() -> AsyncIterator[Any]:
            async for raw in raws:  # a message that does not parse ends the stream with INVALID_ARGUMENT
                yield await gate.parse(method, raw, request_type, context)

        async with contextlib.aclosing(run(parsed(), context)) as items:
            async for item in items:
                yield item

    return take


def add_service(
    server: grpc.aio.Server,
    service: ServiceDescriptor,
    servicer: object,
    gate: CallGate,
    only: Collection[str] | None = None,
) -> None:
    """Serves `servicer` as `service` through the gate (as the generated add_*Servicer_to_server, but at the edge)."""
    handlers = edge_handlers(service, servicer, gate, only)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


def grpc_call_counts() -> Iterator[tuple[str, str, str, dict[str, str], float]]:
    """gRPC core's own counts of calls (its channelz data), which alone see the calls it cancelled unseen.

    Started minus succeeded minus failed is the calls in progress plus those gRPC cancelled before the node
    took them up (past diskless.server.max.pending.calls or .ms) or that callers gave up on while they waited.
    """
    try:
        servers = json.loads(cygrpc.channelz_get_servers(0)).get("server", [])
    except Exception:  # channelz is gRPC's internal API: without it these metrics are absent, nothing else
        return
    counts = {"callsStarted": 0, "callsSucceeded": 0, "callsFailed": 0}
    for server in servers:
        data = server.get("data", {})
        for key in counts:
            counts[key] += int(data.get(key, 0))
    yield ("diskless_grpc_calls_started", "Calls gRPC received (all services, health and reflection included).",
           "counter", {}, counts["callsStarted"])  # fmt: skip
    yield ("diskless_grpc_calls_succeeded", "Calls gRPC answered with OK.", "counter", {},
           counts["callsSucceeded"])  # fmt: skip
    yield ("diskless_grpc_calls_failed", "Calls gRPC answered with another status after the node took them up.",
           "counter", {}, counts["callsFailed"])  # fmt: skip
