"""`diskless serve` as an operator runs it: start-up line, health, reflection, settings, drain on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from protos import coordinator_pb2 as pb
from tests.harness import REPO, Broker, ServerProcess, batch, laid_out


@pytest.mark.slow
def test_startup_line_names_the_address_and_the_data_dir(fresh_server: ServerProcess) -> None:
    fresh_server.start()
    line = next(line for line in fresh_server.output if "listening on" in line)
    assert f"listening on 127.0.0.1:{fresh_server.port}" in line
    assert str(fresh_server.data_dir.resolve()) in line
    assert "4 coordinators" in line


@pytest.mark.slow
def test_reflection_lists_the_service_and_health(fresh_server: ServerProcess) -> None:
    fresh_server.start()
    with grpc.insecure_channel(fresh_server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        services = {s.name for answer in answers for s in answer.list_services_response.service}
    assert "diskless.coordinator.v1.DisklessCoordinator" in services
    assert "grpc.health.v1.Health" in services


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_in_flight_commits_and_exits_zero(fresh_server: ServerProcess, signum: int) -> None:
    fresh_server.start()
    broker = Broker(fresh_server.stub, fresh_server.coordinators)
    topic = broker.create_topic(f"drain-{signum}", 4)
    acknowledged: list[tuple[int, int]] = []
    refused: list[grpc.StatusCode] = []
    started = threading.Barrier(9)

    def commit_loop(partition: int) -> None:
        started.wait()
        for _ in range(200):
            try:
                response = broker.commit(laid_out([batch(topic, partition % 4, 3)]))
            except grpc.RpcError as error:
                refused.append(error.code())
                return
            assert response.batches[0].error_code == pb.NONE
            acknowledged.append((partition % 4, response.batches[0].assigned_base_offset))

    threads = [threading.Thread(target=commit_loop, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    started.wait()
    assert fresh_server.process is not None
    fresh_server.process.send_signal(signum)
    assert fresh_server.process.wait(timeout=60) == 0
    for thread in threads:
        thread.join()
    assert set(refused) <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}, refused
    fresh_server.start()
    for partition, offset in acknowledged:
        found = fresh_server.stub.FindBatches(
            pb.FindBatchesRequest(
                fetch_max_bytes=1 << 20,
                topics=[
                    pb.FindBatchesRequest.Topic(
                        topic_id=topic,
                        partitions=[
                            pb.FindBatchesRequest.Partition(
                                partition=partition, offset=offset, max_partition_fetch_bytes=1 << 20
                            )
                        ],
                    )
                ],
            )
        )
        assert found.topics[0].partitions[0].batches[0].base_offset == offset


@pytest.mark.slow
def test_properties_file_environment_and_flags_in_that_order(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", settings={"diskless.coordinator.commit.max.batches": "2"}).start()
    try:
        broker = Broker(server.stub, server.coordinators)
        topic = broker.create_topic("limits", 1)
        assert broker.commit(laid_out([batch(topic, 0), batch(topic, 0)])).batches[1].error_code == pb.NONE
        with pytest.raises(grpc.RpcError) as refused:
            broker.commit(laid_out([batch(topic, 0), batch(topic, 0), batch(topic, 0)]))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "diskless.coordinator.commit.max.batches" in (refused.value.details() or "")
    finally:
        assert server.stop() == 0
    os.environ["DISKLESS_COORDINATOR_COMMIT_MAX_BATCHES"] = "3"
    try:
        server.start()
        broker = Broker(server.stub, server.coordinators)
        topic = broker.create_topic("limits-env", 1)
        assert broker.commit(laid_out([batch(topic, 0) for _ in range(3)])).batches[2].error_code == pb.NONE
    finally:
        del os.environ["DISKLESS_COORDINATOR_COMMIT_MAX_BATCHES"]
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("content", "named"),
    [
        # One case in the fast lane (tests/test_settings.py has the rules in-process); the rest are slow.
        pytest.param(
            "diskless.coordinator.queue.max.operations=0\n",
            "diskless.coordinator.queue.max.operations",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "diskless.coordinator.queue.max.operations=many\n",
            "diskless.coordinator.queue.max.operations",
            marks=pytest.mark.slow,
        ),
        ("diskless.no.such.setting=1\n", "diskless.no.such.setting"),
        pytest.param("diskless.listen=nowhere\n", "diskless.listen", marks=pytest.mark.slow),
    ],
)
def test_a_bad_setting_refuses_to_start_and_names_it(tmp_path: Path, content: str, named: str) -> None:
    config = tmp_path / "bad.properties"
    config.write_text(content)
    finished = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--data-dir", str(tmp_path / "d"), "--config", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 2
    assert named in finished.stderr


@pytest.mark.slow
def test_an_address_in_use_is_one_line_and_exit_1(fresh_server: ServerProcess, tmp_path: Path) -> None:
    fresh_server.start()
    finished = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--data-dir", str(tmp_path / "d"), "--listen",
         fresh_server.address],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert finished.returncode == 1, finished.stderr
    assert f"cannot listen on {fresh_server.address}" in finished.stderr
    assert "Traceback" not in finished.stderr


def test_settings_command_lists_every_setting() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "coordinator", "settings", "--markdown"], cwd=REPO, capture_output=True, text=True
    )
    assert finished.returncode == 0
    assert "`diskless.metadata.topic.num.partitions` | `8`" in finished.stdout
