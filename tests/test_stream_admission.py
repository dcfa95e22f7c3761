"""A stream the ACL alone admits (coordinator/node/services.py, `Stream.ACL_ONLY`: FetchSnapshot) is refused before it
runs when the ACL denies its caller. A fast, in-process check of the admission itself (the real-TLS tests of the ACL
are in the slow lane): what the mutation run over coordinator/ found unpinned (issue #40, item 5; docs/testing.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from coordinator.base.errors import PermissionDenied
from coordinator.node.services import _acl_only_stream


class Aborted(Exception):
    """What grpc's `context.abort` does: it raises, ending the call."""


class Context:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        self.aborted = (code, message)
        raise Aborted(message)


class Access:
    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed

    def admit(self, method: str, auth_context: object, metadata: object) -> None:
        if not self.allowed:
            raise PermissionDenied(f"principal may not call {method}")


class Gate:
    def __init__(self, allowed: bool) -> None:
        self.access = Access(allowed)
        self.ran = 0

    async def node_items(self, produce: Callable[[], AsyncIterator[Any]]) -> AsyncIterator[Any]:
        self.ran += 1
        async for item in produce():
            yield item


async def _items(_: object) -> AsyncIterator[str]:
    yield "chunk"


def _drain(allowed: bool) -> tuple[Gate, Context, list[Any]]:
    gate, context, received = Gate(allowed), Context(), []

    async def run() -> None:
        stream = _acl_only_stream("FetchSnapshot", lambda _context: _items, gate)  # type: ignore[arg-type]
        async for item in stream(object(), context):  # type: ignore[arg-type]
            received.append(item)

    if allowed:
        asyncio.run(run())
    else:
        with pytest.raises(Aborted):
            asyncio.run(run())
    return gate, context, received


def test_a_denied_caller_gets_permission_denied_and_the_stream_never_runs() -> None:
    """Kills `gate.access.admit(...)` removed from `_acl_only_stream` (a survivor of the mutation run: no fast test
    called an ACL-only stream as a principal without the permission)."""
    gate, context, received = _drain(allowed=False)
    assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.PERMISSION_DENIED
    assert "may not call FetchSnapshot" in context.aborted[1]
    assert (gate.ran, received) == (0, [])


def test_an_admitted_caller_gets_the_stream() -> None:
    gate, context, received = _drain(allowed=True)
    assert (context.aborted, gate.ran, received) == (None, 1, ["chunk"])
