"""The gRPC server takes calls up on an event loop of its own (diskless.server.edge.loop, issue 12).

While the node's loop is busy (a long check or apply holds it, and the interpreter lock with it), calls past
the admission bound are refused with RESOURCE_EXHAUSTED within milliseconds and counted, instead of waiting in
gRPC's queue until gRPC cancels them unseen; the calls admitted run once the node's loop is free. With the edge
loop off, no call is even taken up before the node's loop is free again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import grpc
import pytest

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, fetch_all_batches
from tests.in_process import InProcessNode
from tests.test_metrics import scrape, total
from tests.test_overload import Outcome, commit_once

ADMITTED = 2  # diskless.server.max.concurrent.rpcs in these tests
CALLS = 20
WAIT_S = 60.0  # a bound on waiting for what must happen, never a time the check depends on
HELD_S = 1.0  # one loop: how long the test watches for an answer while the node's loop is held (none may come)


def _hold_the_node_loop(node: InProcessNode, release: threading.Event) -> list[float]:
    """Keeps the node's loop computing (holding the interpreter lock as Python work does) until `release` is set;
    the list gets the moment (perf_counter) it let go."""
    started = threading.Event()
    released_at: list[float] = []

    def compute() -> None:
        started.set()
        while not release.is_set():
            pass
        released_at.append(time.perf_counter())

    node.loop.loop.call_soon_threadsafe(compute)
    assert started.wait(10), "the node's loop did not take the work up"
    return released_at


async def _calls_while_held(node: InProcessNode, topic: bytes, edge_loop: bool) -> tuple[list[bool], list[Outcome]]:
    """CALLS commits while the node's loop is held: (per call, whether it was answered while the loop was held; the
    outcomes), released only once the refusals came (the edge loop) or after HELD_S (one loop): orders of events,
    not times."""
    release = threading.Event()
    released_at = _hold_the_node_loop(node, release)
    try:
        async with grpc.aio.insecure_channel(node.address) as channel:
            stub = pb_grpc.DisklessCoordinatorStub(channel)
            calls = [asyncio.ensure_future(commit_once(stub, topic)) for _ in range(CALLS)]
            if edge_loop:
                deadline = time.perf_counter() + WAIT_S
                while sum(call.done() for call in calls) < CALLS - ADMITTED and time.perf_counter() < deadline:
                    await asyncio.sleep(0.01)
            else:
                await asyncio.wait(calls, timeout=HELD_S)
            while_held = [call.done() for call in calls]
            release.set()
            outcomes = list(await asyncio.gather(*calls))
    finally:
        release.set()
    assert released_at, "the node's loop let go"
    assert all(came > released_at[0] for (_, came), held in zip(outcomes, while_held, strict=True) if not held)
    return while_held, outcomes


@pytest.mark.parametrize("edge_loop", [True, False], ids=["edge-loop", "one-loop"])
def test_while_the_nodes_loop_is_busy_calls_past_the_bound_are_refused_at_once(tmp_path: Path, edge_loop: bool) -> None:
    node = InProcessNode(
        tmp_path / "data",
        coordinators=1,
        settings={
            "diskless.server.edge.loop": str(edge_loop).lower(),
            "diskless.server.max.concurrent.rpcs": str(ADMITTED),
            "diskless.server.max.pending.ms": "60000",
            "diskless.metrics.listen": "127.0.0.1:0",
        },
    ).start()
    try:
        topic = Broker(node.stub, 1).create_topic("busy", 1)
        while_held, outcomes = asyncio.run(_calls_while_held(node, topic, edge_loop))
        refused = [(error, came) for error, came in outcomes if isinstance(error, grpc.aio.AioRpcError)]
        accepted = [(answer, came) for answer, came in outcomes if isinstance(answer, pb.CommitFileResponse)]
        if not edge_loop:
            # One loop: gRPC hands no call over while the loop computes, so no answer came while it was held.
            assert not any(while_held)
            return
        assert len(accepted) == ADMITTED and len(refused) == CALLS - ADMITTED, (len(accepted), len(refused))
        assert {error.code() for error, _ in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        # Every refusal came while the node's loop was held; the admitted calls ran once it was free.
        assert [isinstance(answer, grpc.aio.AioRpcError) for answer, _ in outcomes] == while_held
        # What was admitted is written; what was refused is not, and the refusals are counted.
        acknowledged = sorted(b.assigned_base_offset for answer, _ in accepted for b in answer.batches)
        found, _, high_watermark = fetch_all_batches(node.stub, topic, 0)
        assert [b.base_offset for b in found] == acknowledged and len(acknowledged) == high_watermark // 2
        samples = scrape(node)  # type: ignore[arg-type]
        assert total(samples, "diskless_shed_calls_total", method="CommitFile", reason="calls") == len(refused)
    finally:
        assert node.stop() == 0
