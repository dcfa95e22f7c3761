"""The typed seam between the router's operations and a coordinator: one operation per coordinator part.

An operation is a pure check (DESIGN §3 step 1) bound to its request: the
shard runs it against its speculative view inside the pipeline and answers
the operation's future with the check's response once its records are applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, final

from coordinator.base.result import Result
from coordinator.machine.view import CoordinatorView

RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")

Check = Callable[[CoordinatorView, RequestT, int], Result[ResponseT]]  # (view, request, now_ms) -> Result
# Reads, on a connection of its own off the loop, the state pages the check and the apply of `request` will read:
# TigerBeetle's prefetch before its commit. Its answer is never used (the check decides on the state then). The
# connection is an apsw.Connection, not named here: this module is of the pure core (tests/test_layers.py).
Prefetch = Callable[[Any, RequestT], object]


@final
@dataclass(frozen=True, slots=True)
class Operation(Generic[RequestT, ResponseT]):
    """One request for one coordinator, with the pure check that decides it."""

    check: Check[RequestT, ResponseT]
    request: RequestT
    # A time read once for the whole call (a commit's append time is the same on every coordinator it
    # reaches); None lets the shard read its clock when it checks.
    now_ms: int | None = None
    # The WAL file the operation may record here (a commit's object key): the coordinator counts it known from
    # the moment the operation is queued, so that nobody concludes the file unknown while it may still land.
    object_key: str | None = None
    # For an operation that reads rows nobody touched for long (ReplaceBatches: the oldest batches and files): their
    # pages may have left the OS page cache, and a read of the disk in the check or the apply would hold the node's
    # loop, every coordinator's commits with it (docs/benchmarks.md). NodeCoordinators.run_parts runs it first.
    prefetch: Prefetch[RequestT] | None = None

    def prefetch_read(self) -> Callable[[Any], object]:
        """The prefetch bound to the request (CoordinatorShard.prefetch runs it); nothing for an operation without."""
        prefetch, request = self.prefetch, self.request
        return (lambda _connection: None) if prefetch is None else (lambda connection: prefetch(connection, request))

    def run(self, view: CoordinatorView, shard_now_ms: int) -> Result[ResponseT]:
        return self.check(view, self.request, shard_now_ms if self.now_ms is None else self.now_ms)
