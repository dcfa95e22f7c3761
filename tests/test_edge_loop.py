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
from tests.harness import Broker, fetch_all_batches
from tests.in_process import InProcessNode
from tests.test_metrics import scrape, total
from tests.test_overload import _burst

BUSY_S = 3.0  # how long the node's loop is held
ADMITTED = 2  # diskless.server.max.concurrent.rpcs in these tests
CALLS = 20
PROMPT_S = 1.0  # a refusal that did not wait for the node's loop comes well within the busy stretch


def _hold_the_node_loop(node: InProcessNode, seconds: float) -> None:
    """Keeps the node's loop computing for `seconds` (holding the interpreter lock as Python work does)."""
    started = threading.Event()

    def compute() -> None:
        started.set()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    node.loop.loop.call_soon_threadsafe(compute)
    assert started.wait(10), "the node's loop did not take the work up"


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
        _hold_the_node_loop(node, BUSY_S)
        held_at = time.perf_counter()
        outcomes = asyncio.run(_burst(node.address, topic, CALLS))
        refused = [(error, took) for error, took in outcomes if isinstance(error, grpc.aio.AioRpcError)]
        accepted = [(answer, took) for answer, took in outcomes if isinstance(answer, pb.CommitFileResponse)]
        if not edge_loop:
            # One loop: gRPC hands no call over while the loop computes, so every answer waits for the stretch.
            assert min(took for _, took in outcomes) > BUSY_S - (time.perf_counter() - held_at) - PROMPT_S
            return
        assert len(accepted) == ADMITTED and len(refused) == CALLS - ADMITTED, (len(accepted), len(refused))
        assert {error.code() for error, _ in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert max(took for _, took in refused) < PROMPT_S, sorted(took for _, took in refused)
        assert min(took for _, took in accepted) > PROMPT_S, "the admitted calls ran once the loop was free"
        # What was admitted is written; what was refused is not, and the refusals are counted.
        acknowledged = sorted(b.assigned_base_offset for answer, _ in accepted for b in answer.batches)
        found, _, high_watermark = fetch_all_batches(node.stub, topic, 0)
        assert [b.base_offset for b in found] == acknowledged and len(acknowledged) == high_watermark // 2
        samples = scrape(node)  # type: ignore[arg-type]
        assert total(samples, "diskless_shed_calls_total", method="CommitFile", reason="calls") == len(refused)
    finally:
        assert node.stop() == 0
