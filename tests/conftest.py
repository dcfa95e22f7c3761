from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Broker, ServerProcess
from tests.in_process import InProcessNode

pytest_plugins = ["tests.object_stores"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    """One in-process node with 4 coordinators shared by a test module (tests use their own topics)."""
    node = InProcessNode(tmp_path_factory.mktemp("node") / "data", coordinators=4).start()
    yield node
    assert node.stop() == 0, "".join(node.output)


@pytest.fixture
def broker(server: InProcessNode) -> Broker:
    return Broker(server.stub, server.coordinators)


@pytest.fixture
def fresh_node(tmp_path: Path) -> Iterator[InProcessNode]:
    """An in-process node of its own for tests that restart or reconfigure it (not started yet)."""
    node = InProcessNode(tmp_path / "data", coordinators=4)
    yield node
    if node.is_running():
        node.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A `diskless serve` process of its own, for tests of the process itself: signals, kill -9, crash points."""
    process = ServerProcess(tmp_path / "data", coordinators=4)
    yield process
    if process.process is not None and process.process.poll() is None:
        process.kill()
