"""A `diskless serve` process for the standalone benchmarks: started on a free loopback port with a properties file
of settings, its log in a file beside its data, waited for until every coordinator serves, stopped (SIGTERM, then
SIGKILL past a bound); and what /proc says of it (RSS, CPU)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
METRICS_LINE = re.compile(r"metrics at (http://[\d.]+:\d+/metrics)")


def status_kib(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def start_node(
    directory: Path, coordinators: int, settings: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str, Path]:
    config = directory / "node.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    log_path = directory / "node.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", "--data-dir", str(directory / "data"), "--listen",
             "127.0.0.1:0", "--coordinators", str(coordinators), "--config", str(config)],
            stdout=subprocess.PIPE, stderr=log_file,
        )  # fmt: skip
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    for raw in process.stdout:
        line = raw.decode(errors="replace")
        if "listening on" in line:
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe from filling
            return process, line.split("listening on ")[1].split(",")[0], log_path
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError(f"the node did not start:\n{log_path.read_text(errors='replace')[-3000:]}")


async def wait_serving(stub: pb_grpc.DisklessCoordinatorAsyncStub) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            described = await stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=1)
            if all(c.error_code == pb.NONE for c in described.coordinators):
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the node is not serving")


def stop_node(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the node drains), then SIGKILL if it has not exited within STOP_TIMEOUT_S."""
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
