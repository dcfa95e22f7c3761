"""The storage-fault sweep's trials through `diskless serve`: a process of its own, with its reader processes.

The same trials as tests/storage_faults.py's in-process ones (the same templates, flips and checks); the node's
coordinators are watched through DescribeCoordinators, and its clock is the real one (a coordinator waiting to
load again does so by itself); its repairs are read from its Prometheus listener (each commit process's own when it
runs several).
"""

from __future__ import annotations

import contextlib
import shutil
import urllib.request
from collections import Counter
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import ServerProcess, describe_coordinators
from tests.in_process import wait_until
from tests.object_stores import free_port
from tests.storage_faults import (
    COORDINATORS,
    SETTINGS,
    Repairs,
    Result,
    Template,
    Trial,
    check_node,
    flip_bit,
    repairs_in,
    waits_to_load,
)

SERVED_SETTLE_S = 10


def settle_served(node: ServerProcess, what: str) -> None:
    """`diskless serve`'s coordinators as DescribeCoordinators says: none loading, none about to load again."""

    def quiet() -> bool:
        try:
            described = describe_coordinators(node.stub).values()
        except grpc.RpcError:
            return False  # not listening yet
        return all(
            c.state == "ACTIVE" or (c.state == "FAILED" and not waits_to_load(c.error_message)) for c in described
        )

    with contextlib.suppress(AssertionError):  # a coordinator that keeps failing to load is refused
        wait_until(quiet, f"{what}: the coordinators settle", SERVED_SETTLE_S)


def served_repairs(metrics_port: int, processes: int) -> Repairs:
    """The node's repairs as its /metrics say: the first process's, and each commit process's (port + 1 + index)."""
    ports = [metrics_port, *(metrics_port + 1 + index for index in range(processes if processes > 1 else 0))]

    def read() -> Counter[str]:
        counted: Counter[str] = Counter()
        for port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                text = answer.read().decode()
            families = text_string_to_metric_families(text)
            counted += repairs_in((s.name, s.labels, s.value) for f in families for s in f.samples)
        return counted

    return read


def run_served_trial(templates: dict[str, Template], template: str, trial: Trial, scratch: Path) -> Result:
    """A trial through `diskless serve` (a process of its own, with its reader processes)."""
    data_dir = scratch / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.copytree(templates[template].directory, data_dir)
    flip_bit(data_dir / trial.path, trial.offset, trial.bit)
    metrics_port = free_port()
    node = ServerProcess(
        data_dir,
        coordinators=COORDINATORS,
        settings={**SETTINGS, "diskless.metrics.listen": f"127.0.0.1:{metrics_port}"},
    )
    repairs = served_repairs(metrics_port, int(node.settings.get("diskless.node.processes", "1")))
    try:
        node.start(wait_serving=False)
        settle_served(node, str(trial))
        settle = lambda: settle_served(node, str(trial))  # noqa: E731
        return check_node(node, templates[template].model, str(trial), settle, repairs)
    except grpc.RpcError as error:
        raise AssertionError(f"{trial}: an internal error: {error}\n{''.join(node.output)}") from error
    finally:
        if node.process is not None and node.process.poll() is None:
            assert node.stop() == 0, f"{trial}: `diskless serve` did not exit cleanly:\n{''.join(node.output)}"
