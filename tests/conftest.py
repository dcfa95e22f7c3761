from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Broker, ServerProcess

pytest_plugins = ["tests.object_stores"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One node with 4 coordinators shared by a test module (tests use their own topics)."""
    process = ServerProcess(tmp_path_factory.mktemp("node") / "data", coordinators=4).start()
    yield process
    assert process.stop() == 0, "".join(process.output)


@pytest.fixture
def broker(server: ServerProcess) -> Broker:
    return Broker(server.stub, server.coordinators)


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A node of its own for tests that restart, kill or reconfigure it."""
    process = ServerProcess(tmp_path / "data", coordinators=4)
    yield process
    if process.process is not None and process.process.poll() is None:
        process.kill()
