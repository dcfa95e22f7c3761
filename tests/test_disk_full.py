"""A full disk: coordinators refuse at once with retriable codes, say why, and serve again by themselves.

The node's data directory is a small tmpfs that the test mounts (it needs root, as the README's test
command has in CI; elsewhere the test is skipped). The disk is filled with a file while brokers
commit, then the file is removed; nothing acknowledged may be lost, and batches answered with an
error may have been stored all the same (a resend is then DUPLICATE with the original offsets).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from protos import coordinator_pb2 as pb
from tests.harness import Broker, ServerProcess, describe_coordinators
from tests.test_coordinator_faults import (
    COORDINATORS,
    RETRIABLE,
    Acknowledged,
    assert_every_acknowledged_batch_served,
    commit_round,
    fill,
    health_is,
    wait_for,
)

pytestmark = pytest.mark.slow

DISK_BYTES = 32 * 1024 * 1024
FILLER_CHUNK_BYTES = 1024 * 1024
COMMITS_MAX = 500  # commits tried on the full disk before the test gives up waiting for a refusal
CALL_SECONDS_MAX = 5.0  # a refusal comes at once, not after the 30 s request timeout
SETTINGS = {
    "diskless.coordinator.reload.backoff.ms": "100",
    "diskless.coordinator.reload.backoff.max.ms": "500",
    "diskless.metrics.listen": "127.0.0.1:0",
}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill_disk(path: Path) -> None:
    """Writes zeros until the file system refuses."""
    chunk = bytes(FILLER_CHUNK_BYTES)
    with open(path, "wb", buffering=0) as file:
        while True:
            try:
                file.write(chunk)
            except OSError:
                break
    with open(path, "ab", buffering=0) as file:  # the last few pages, a byte at a time in small writes
        while True:
            try:
                file.write(bytes(512))
            except OSError:
                return


def metrics_text(server: ServerProcess) -> str:
    match = re.search(r"metrics at (http://\S+/metrics)", "".join(server.output))
    assert match, "the node prints its metrics address"
    with urllib.request.urlopen(match.group(1), timeout=10) as response:
        return response.read().decode()


def test_a_full_disk_refuses_at_once_and_serves_again_once_space_returns(small_disk: Path) -> None:
    server = ServerProcess(small_disk / "data", coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        acknowledged: Acknowledged = fill(server, commits=20)
        broker = Broker(server.stub, COORDINATORS)
        filler = small_disk / "filler"
        fill_disk(filler)

        refused = 0
        for _ in range(COMMITS_MAX):
            started = time.monotonic()
            try:
                response = commit_round(broker, acknowledged)
            except Exception as error:
                raise AssertionError("".join(server.output)) from error
            took_s = time.monotonic() - started
            codes = {r.error_code for r in response.batches}
            assert codes <= {pb.NONE} | RETRIABLE, response
            assert took_s < CALL_SECONDS_MAX, f"a commit on a full disk took {took_s:.1f}s"
            if codes != {pb.NONE}:
                refused += 1
                if refused >= 5 and not health_is(server, health_pb2.HealthCheckResponse.SERVING):
                    break
        assert refused, "the disk never filled"
        # On a disk still full a coordinator loads again after its backoff (a load writes nothing) and serves reads
        # until its next write fails: while neither health nor DescribeCoordinators shows it out, a producer's next
        # commit takes it out of service again.
        out: list[pb.CoordinatorDescription] = []

        def seen_out() -> bool:
            out[:] = [c for c in describe_coordinators(server.stub).values() if c.error_code != pb.NONE]
            if out and health_is(server, health_pb2.HealthCheckResponse.NOT_SERVING):
                return True
            codes = {r.error_code for r in commit_round(broker, acknowledged).batches}
            assert codes <= {pb.NONE} | RETRIABLE, codes
            return False

        wait_for(seen_out, "health NOT_SERVING and DescribeCoordinators shows a coordinator out of service")
        for description in out:
            assert description.error_code in RETRIABLE, description
            assert description.state in ("FAILED", "LOADING"), description
            assert "disk_full" in description.error_message, description
        assert re.search(
            r'diskless_coordinator_failures_total\{coordinator="\d+",kind="disk_full"\} [1-9]', metrics_text(server)
        )
        assert "out of service (disk_full)" in "".join(server.output)

        filler.unlink()
        freed_at = time.monotonic()
        wait_for(lambda: health_is(server, health_pb2.HealthCheckResponse.SERVING), "SERVING again by itself")
        print(f"SERVING {time.monotonic() - freed_at:.2f}s after space returned")
        assert_every_acknowledged_batch_served(server, acknowledged)
        # The batches refused on the full disk are sent again, as a producer would: DUPLICATE if they had
        # been stored after all (commit_round then records their original offsets), else new offsets.
        response = commit_round(broker, acknowledged)
        assert {r.error_code for r in response.batches} == {pb.NONE}, response
        assert_every_acknowledged_batch_served(server, acknowledged)
    finally:
        server.kill()
