"""A reader process: FindBatches of the public service on its own port, read from the coordinators' state files.

Started by the node (coordinator/reads/readers/supervisor.py) with multiprocessing's spawn, it runs its own uvloop
and grpc.aio server through the node's own edge: the same TLS credentials, ACL, admission bounds and handling
of undecodable requests (coordinator/edge/gate.py), and the node's FindBatches (coordinator/reads/find_batches.py)
over the state files (coordinator/reads/readers/state_files.py). Every other method of the service is
UNIMPLEMENTED here.

With the node it speaks over one pipe: ("listening", port) once it serves, ("damage", coordinator id, generation,
what) when a read met damage; the node sends ("stop",). The pipe's end (the node gone, even by kill -9) stops it,
as does SIGTERM; SIGINT (Ctrl-C, sent to the whole process group) is left to the node.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, final

import grpc

from coordinator.base.child_processes import freeze_loaded_state, wait_told_to_stop
from coordinator.base.metrics import Metrics
from coordinator.config.settings import Settings
from coordinator.edge.access_control import AccessControl
from coordinator.edge.admission import Admission
from coordinator.edge.gate import CallGate, add_service, grpc_server
from coordinator.edge.tls import server_credentials, tls_files
from coordinator.reads.find_batches import answer_bound, find_batches
from coordinator.reads.readers.board import StatusBoard
from coordinator.reads.readers.counters import CallCounts
from coordinator.reads.readers.state_files import ReaderCoordinators, reader_coordinators
from protos import coordinator_pb2 as pb

log = logging.getLogger(__name__)
SERVICE = pb.DESCRIPTOR.services_by_name["DisklessCoordinator"]
SERVED_METHODS = frozenset({"FindBatches"})


@final
@dataclass(frozen=True, slots=True)
class ReaderPlan:
    """What a reader process is told when started (pickled to the spawned process)."""

    index: int
    settings: Settings
    host: str
    port: int  # 0: any; a restarted reader asks for the port it had, so clients' routes stay right
    directories: tuple[Path, ...]  # the coordinators' directories, by coordinator id


class CannotListen(OSError):
    """The reader's address could not be bound."""


class ReadService:
    """The public service's FindBatches, as the node answers it."""

    def __init__(self, view: ReaderCoordinators, gate: CallGate) -> None:
        self._view = view
        self._gate = gate

    async def FindBatches(self, request: pb.FindBatchesRequest, context: Any) -> bytes:
        return await self._gate.call("FindBatches", context, lambda: find_batches(self._view, request))


def run_reader(plan: ReaderPlan, board_words: Any, count_words: Any, connection: Connection) -> None:
    """The reader process's entry point: serves until told to stop or the node is gone."""
    import uvloop

    from coordinator.base.logging_output import configure_logging

    configure_logging(plan.settings.log_format)
    # Ctrl-C reaches the whole process group: the node stops its readers itself, after their calls drained.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # As the node's processes do: the imported modules out of the collector's scans, young collections rarer (each
    # FindBatches call allocates a few hundred short-lived objects; CPython's default collects every 700).
    freeze_loaded_state()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_reads(plan, StatusBoard(board_words), CallCounts(count_words), connection))


def _bind(server: grpc.aio.Server, settings: Settings, host: str, port: int) -> int:
    tls = tls_files(settings)
    address = f"{host}:{port}"
    try:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, server_credentials(tls, settings.ssl_client_auth))
    except RuntimeError:  # grpc raises where it cannot bind
        return 0


async def serve_reads(plan: ReaderPlan, board: StatusBoard, counts: CallCounts, connection: Connection) -> None:
    settings = plan.settings
    server = grpc_server(settings)
    port = _bind(server, settings, plan.host, plan.port)
    if port == 0 and plan.port != 0:  # the old port is taken: any other (clients learn it from FindCoordinator)
        server = grpc_server(settings)
        port = _bind(server, settings, plan.host, 0)
    if port == 0:
        raise CannotListen(f"reader {plan.index}: cannot listen on {plan.host}")
    access = AccessControl(
        Path(settings.acl_file) if settings.acl_file else None,
        tls_files(settings) is not None,
        settings.ssl_client_auth,
        settings.acl_reload_interval_ms / 1000,
    )
    admission = Admission(
        settings.max_concurrent_rpcs, settings.max_inflight_request_bytes, settings.min_remaining_deadline_ms,
        settings.max_inflight_response_bytes,
    )  # fmt: skip

    def answered(method: str, code: grpc.StatusCode, seconds: float) -> None:
        counts.add(plan.index, code, seconds)

    gate = CallGate(
        access, Metrics(), admission, on_answered=answered,
        answer_bounds={"FindBatches": partial(answer_bound, settings)}, answers_in_metrics=False,
    )  # fmt: skip
    reported: set[tuple[int, int]] = set()

    def report_damage(coordinator_id: int, generation: int, what: str) -> None:
        if (coordinator_id, generation) not in reported:  # once per state file: the node rebuilds it
            reported.add((coordinator_id, generation))
            log.error("reader %d: coordinator %d: a read met damage: %s", plan.index, coordinator_id, what)
            tell_node(connection, ("damage", coordinator_id, generation, what))

    with reader_coordinators(settings, plan.directories, board, report_damage) as view:
        add_service(server, SERVICE, ReadService(view, gate), gate, only=SERVED_METHODS)
        await server.start()
        try:
            gate.ready = True
            if tell_node(connection, ("listening", port)):
                log.info("reader %d: serving FindBatches on %s:%d", plan.index, plan.host, port)
                await wait_told_to_stop(connection)
            else:
                log.info("reader %d: the node is gone: stopping", plan.index)
            gate.stopping = True
        finally:
            # Stopped on the loop that runs it, whatever ended the wait: a server left to its finalizer after
            # the loop closed prints grpc's "Event loop is closed" on the way out.
            await server.stop(settings.drain_timeout_ms / 1000)
    log.info("reader %d: stopped", plan.index)


def tell_node(connection: Connection, message: tuple[Any, ...]) -> bool:
    """Sends `message` to the node; False when the node is gone (its end of the pipe closed, as when it is
    being killed): the reader then stops quietly, nobody is left to read from it."""
    try:
        connection.send(message)
    except OSError:  # BrokenPipeError, ConnectionResetError: the node's end is closed
        return False
    return True
