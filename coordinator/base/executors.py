"""Where blocking work runs (fsyncs, SQLite copies, log reads): one thread per job by default, or inline.

A coordinator's blocking calls (`loop.run_in_executor`) go to executors made by an `ExecutorFactory`, so that the
simulated cluster (tests/simulation/) can run them inline, on the loop's own thread, in the order the loop asks
for them: with no other thread, a run is a function of its seed. Production uses one thread per executor, as
before (its single worker keeps a coordinator's log and state calls in order).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, final

T = TypeVar("T")


class ExecutorFactory(Protocol):
    def __call__(self, name: str) -> Executor:
        """An executor for one component's blocking calls, run one at a time in submission order."""
        ...


def thread_executor(name: str) -> Executor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)


@final
class InlineExecutor(Executor):
    """Runs each call at once in the caller's thread; its future is done when `submit` returns."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # the caller sees it through the future, as from a thread
            future.set_exception(error)
        return future


def inline_executor(name: str) -> Executor:
    return InlineExecutor()
