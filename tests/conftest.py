from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import lanes
from tests.harness import Broker, ServerProcess
from tests.in_process import InProcessNode

pytest_plugins = ["tests.object_stores"]

# Where the suite's temporary files go when nobody chose (TMPDIR, --basetemp): a memory file system, if there is one
# with room. The tests' nodes fdatasync every log append and SQLite checkpoint; on this machine's shared disk those
# waits, not the work, were most of the fast lane's time (3x its CPU time under load). Durability across power loss
# is not what any test checks (crash tests kill processes, whose written pages survive on any file system), and the
# code paths are the same: only the wait goes. tests/test_disk_full.py mounts a small tmpfs of its own either way.
MEMORY_TEMPORARY_ROOT = Path("/dev/shm")
MEMORY_TEMPORARY_FREE_BYTES_MIN = 4 << 30
DISK_TEMPORARY_ROOT_VARIABLE = "DISKLESS_TESTS_DISK_TMPDIR"  # where the temporary files would have gone


def _memory_temporary_root() -> Path | None:
    root = MEMORY_TEMPORARY_ROOT
    if not root.is_dir() or not os.access(root, os.W_OK | os.X_OK):
        return None
    stats = os.statvfs(root)
    return root if stats.f_bavail * stats.f_frsize >= MEMORY_TEMPORARY_FREE_BYTES_MIN else None


def pytest_configure(config: pytest.Config) -> None:
    lanes.FAST = lanes.is_fast_lane(config.option.markexpr or "")
    if "TMPDIR" in os.environ or config.option.basetemp:
        return  # a choice was made (under pytest-xdist the workers get their --basetemp from the controller)
    root = _memory_temporary_root()
    if root is not None:
        # tmp_path's root, tempfile's (tests that mkdtemp) and, through TMPDIR, the processes tests start.
        os.environ[DISK_TEMPORARY_ROOT_VARIABLE] = tempfile.gettempdir()
        os.environ["TMPDIR"] = str(root)
        tempfile.tempdir = str(root)


@pytest.fixture
def disk_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """A temporary directory on the disk the suite would have used, for a test whose rule only shows when writes take
    a disk's time (a background checkpoint that cannot keep up); tmp_path when the suite's files are there anyway."""
    root = os.environ.get(DISK_TEMPORARY_ROOT_VARIABLE)
    if root is None:
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=root, prefix="diskless-test-") as directory:
        yield Path(directory)


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
