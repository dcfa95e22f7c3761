"""The consolidation benchmark's steady commit load in a process of its own, as a broker's commits are.

`SteadyLoad` used to run as a thread of the benchmark's own process, which is also the Spark job's driver:
every pause of the driver (while it plans it holds every planned batch: a full garbage collection over 6.25
million of them takes about 1.4 s here) stopped the load's senders between a commit and its clock read, and
counted as the node's latency. A broker shares no interpreter with the job, so neither does the load.
The child is driven over a pipe: start a window, stop it (its figures come back), the committed keys, exit.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

from coordinator.files.object_store import StoreConfig

REPLY_TIMEOUT_S = 600.0  # a window's stop waits for its commits in flight (each bounded by its call's timeout)


def _serve(commands: Connection, address: str, store: StoreConfig, rate_per_s: float) -> None:
    from bench.consolidate_load import SteadyLoad

    load = SteadyLoad(address, store, rate_per_s)
    while True:
        command = commands.recv()
        if command == "start":
            load.start()
            commands.send(None)
        elif command == "stop":
            commands.send(load.stop())
        elif command == "keys":
            commands.send(list(load.keys))
        else:  # "exit"
            commands.send(None)
            return


class LoadProcess:
    """`SteadyLoad`'s start/stop/keys, run in a spawned child process."""

    def __init__(self, address: str, store: StoreConfig, rate_per_s: float) -> None:
        context = multiprocessing.get_context("spawn")  # no copy of the driver's heap, no inherited threads
        self._commands, child_end = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child_end, address, store, rate_per_s), name="steady-load", daemon=True
        )
        self._process.start()
        child_end.close()

    def _ask(self, command: str) -> Any:
        self._commands.send(command)
        if not self._commands.poll(REPLY_TIMEOUT_S):
            raise RuntimeError(f"the steady load did not answer {command!r} within {REPLY_TIMEOUT_S:.0f} s")
        return self._commands.recv()

    def start(self) -> None:
        self._ask("start")

    def stop(self) -> dict[str, Any]:
        result: dict[str, Any] = self._ask("stop")
        return result

    @property
    def keys(self) -> list[str]:
        keys: list[str] = self._ask("keys")
        return keys

    def close(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(OSError, EOFError, RuntimeError):
                self._ask("exit")
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
