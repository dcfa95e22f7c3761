"""A caller that goes while its operation waits (found by tests/test_network_partitions.py: a leader cut from its
followers answered, after the broker's deadline had cancelled the call, NOT_ENOUGH_REPLICAS_AFTER_APPEND to nobody,
and asyncio logged "Future exception was never retrieved"). The operation stays queued and is answered later; that
answer, an error included, must be retrieved by the node, not left for the garbage collector to report."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.runtime.node_coordinators import NodeCoordinators
from tests.simulation.loop import SimulatedLoop


def _never_retrieved(cancel_caller: bool) -> list[str]:
    loop = SimulatedLoop(fail_on_unretrieved=False)

    async def work() -> None:
        pending: asyncio.Future[Any] = loop.create_future()
        shard = SimpleNamespace(submit=lambda operation, may_linger: pending)
        node = SimpleNamespace(shard=lambda coordinator_id: shard, timeout_s=lambda timeout_ms: 30.0)
        operation = SimpleNamespace(prefetch=None)  # nothing to read first: submitted at once
        caller = asyncio.ensure_future(NodeCoordinators.run_parts(node, {0: operation}, 0))  # type: ignore[arg-type]
        await asyncio.sleep(1)
        if cancel_caller:
            caller.cancel()  # the RPC's deadline passed: gRPC cancels its handler
            with pytest.raises(asyncio.CancelledError):
                await caller
        # The append's answer comes later, as the pipeline fails a group whose ISR shrank (pipeline.py `fail`).
        pending.set_exception(CoordinatorUnavailable(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, "ISR shrank"))
        if not cancel_caller:
            await caller

    try:
        loop.run_until_complete(work())
    finally:
        loop.close()  # collects garbage first: a dropped future reports to this loop
    return loop.never_retrieved


def test_an_operation_failing_after_its_caller_went_leaves_no_unretrieved_exception() -> None:
    assert _never_retrieved(cancel_caller=True) == []


def test_an_operation_failing_while_its_caller_waits_is_answered_to_it() -> None:
    assert _never_retrieved(cancel_caller=False) == []
