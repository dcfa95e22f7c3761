"""Reader processes (diskless.server.read.processes): FindBatches served from the state files, off the node's loop.

Real `diskless serve` processes and real files: a reader answers as the node does, follows the coordinators'
states (out of service, damaged and rebuilt), is started again when killed while clients fall back to the node,
and counts its calls where the node's /metrics shows them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from coordinator.client.routes import READER_RETRY_S, ReaderRotation
from coordinator.client.routing_client import RoutingClient
from coordinator.reads.readers.board import Status, StatusBoard
from coordinator.runtime.log.segments import SEGMENT_SUFFIX
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, batch, laid_out, new_topic_id
from tests.in_process import loop_thread
from tests.test_coordinator_faults import (
    COORDINATORS,
    DAMAGES,
    PARTITIONS,
    RETRIABLE,
    assert_every_acknowledged_batch_served,
    commit_round,
    coordinator_of_partition,
    coordinator_state,
    fill,
    wait_for,
)

READ_SETTINGS = {"diskless.server.read.processes": "1", "diskless.metrics.listen": "127.0.0.1:0"}


def read_addresses(server: ServerProcess) -> list[str]:
    found = server.stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=new_topic_id(), partitions=[0])])
    )
    described = server.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest())
    endpoints = [*found.coordinators, *(d.leader for d in described.coordinators)]
    return sorted({a for e in endpoints for r in e.replicas for a in r.read_addresses})


def wait_reader(server: ServerProcess) -> str:
    wait_for(lambda: read_addresses(server), "a reader is advertised")
    return read_addresses(server)[0]


def reader_stub(address: str) -> pb_grpc.DisklessCoordinatorStub:
    return pb_grpc.DisklessCoordinatorStub(grpc.insecure_channel(address))


def metrics(server: ServerProcess) -> str:
    match = re.search(r"metrics at (http://\S+/metrics)", "".join(server.output))
    assert match, "".join(server.output)
    with urllib.request.urlopen(match.group(1), timeout=10) as response:
        return str(response.read().decode())


def reader_calls(server: ServerProcess, code: str = "OK") -> float:
    match = re.search(rf'diskless_reader_calls_total{{code="{code}",reader="0"}} (\S+)', metrics(server))
    return float(match.group(1)) if match else 0.0


def reader_pids(server: ServerProcess) -> list[int]:
    assert server.process is not None
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def request(topic_id: bytes, partitions: list[tuple[int, int]], **fields: int) -> pb.FindBatchesRequest:
    return pb.FindBatchesRequest(
        fetch_max_bytes=fields.get("fetch_max_bytes", 1 << 30),
        max_batches_per_partition=fields.get("max_batches", 0),
        topics=[
            pb.FindBatchesRequest.Topic(
                topic_id=topic_id,
                partitions=[
                    pb.FindBatchesRequest.Partition(
                        partition=p, offset=o, max_partition_fetch_bytes=fields.get("partition_bytes", 1 << 30)
                    )
                    for p, o in partitions
                ],
            )
        ],
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    node = ServerProcess(tmp_path_factory.mktemp("readers") / "data", coordinators=4, settings=READ_SETTINGS).start()
    yield node
    assert node.stop() == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in reader_pids_at_stop), "readers left behind"


reader_pids_at_stop: list[int] = []


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ServerProcess]:
    """A node of the fault tests' shape (COORDINATORS, PARTITIONS), with a reader."""
    node = ServerProcess(tmp_path / "data", coordinators=COORDINATORS, settings=READ_SETTINGS)
    yield node
    if node.process is not None and node.process.poll() is None:
        node.kill()


@pytest.mark.slow
def test_a_reader_answers_find_batches_as_the_node_does(server: ServerProcess) -> None:
    reader = reader_stub(wait_reader(server))
    broker = Broker(server.stub, 4)
    topic_id = broker.create_topic("readers-same", 6)
    for round_ in range(5):
        batches = laid_out([batch(topic_id, p, records=round_ + 1, size=100 + p) for p in range(6)])
        assert all(r.error_code == pb.NONE for r in broker.commit(batches).batches)
    everything = [(p, 0) for p in range(6)]
    requests = [
        request(topic_id, everything),
        request(topic_id, everything, fetch_max_bytes=350),  # the budget runs across partitions
        request(topic_id, everything, max_batches=2, partition_bytes=150),
        request(topic_id, [(0, 3), (1, 15), (2, 10_000), (3, -1)]),  # inside, at the end, past the end, before
        request(topic_id, [(99, 0), (0, 0)]),  # an unknown partition beside a known one
        request(new_topic_id(), [(0, 0)]),  # an unknown topic
        request(b"short", [(0, 0)]),  # a malformed topic id
    ]
    for sent in requests:
        assert reader.FindBatches(sent, timeout=10) == server.stub.FindBatches(sent, timeout=10), sent

    # A topic created after the reader looked its topics up is found at once: a miss is looked up again.
    later = broker.create_topic("readers-later", 2)
    broker.commit(laid_out([batch(later, 0), batch(later, 1)]))
    sent = request(later, [(0, 0), (1, 0)])
    answer = reader.FindBatches(sent, timeout=10)
    assert answer == server.stub.FindBatches(sent, timeout=10)
    assert [len(p.batches) for p in answer.topics[0].partitions] == [1, 1]


@pytest.mark.slow
def test_a_reader_serves_find_batches_only_through_the_node_edge(server: ServerProcess) -> None:
    address = wait_reader(server)
    reader = reader_stub(address)
    with pytest.raises(grpc.RpcError) as refused:
        reader.CommitFile(pb.CommitFileRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    raw = grpc.insecure_channel(address).unary_unary("/diskless.coordinator.v1.DisklessCoordinator/FindBatches")
    with pytest.raises(grpc.RpcError) as undecodable:
        raw(b"\xff\xff\xff", timeout=10)
    assert undecodable.value.code() == grpc.StatusCode.INVALID_ARGUMENT, undecodable.value
    assert "not a valid FindBatchesRequest" in str(undecodable.value.details())
    too_many = request(new_topic_id(), [(p, 0) for p in range(10_001)])
    with pytest.raises(grpc.RpcError) as malformed:
        reader.FindBatches(too_many, timeout=10)
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.slow
def test_the_routing_client_reads_from_the_reader_and_metrics_count_it(server: ServerProcess) -> None:
    wait_reader(server)
    broker = Broker(server.stub, 4)
    topic_id = broker.create_topic("readers-client", 3)
    broker.commit(laid_out([batch(topic_id, p) for p in range(3)]))
    before = reader_calls(server)

    async def find() -> pb.FindBatchesResponse:
        async with RoutingClient(server.address) as client:
            answers = [await client.find_batches(request(topic_id, [(0, 0), (1, 0), (2, 0)])) for _ in range(5)]
            return answers[-1]

    answer = loop_thread().run(find())
    assert [len(p.batches) for p in answer.topics[0].partitions] == [1, 1, 1]
    assert reader_calls(server) >= before + 5
    assert 'diskless_reader_up{reader="0"} 1.0' in metrics(server)


@pytest.mark.slow
def test_a_killed_reader_is_started_again_and_clients_fall_back_meanwhile(server: ServerProcess) -> None:
    address = wait_reader(server)
    broker = Broker(server.stub, 4)
    topic_id = broker.create_topic("readers-killed", 2)
    broker.commit(laid_out([batch(topic_id, p) for p in range(2)]))
    sent = request(topic_id, [(0, 0), (1, 0)])

    async def find_twice_across_a_kill() -> tuple[pb.FindBatchesResponse, pb.FindBatchesResponse]:
        async with RoutingClient(server.address, deadline_ms=5000) as client:
            first = await client.find_batches(sent)
            (pid,) = reader_pids(server)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not Path(f"/proc/{pid}/cmdline").exists() or not read_addresses(server), "reader dead")
            return first, await client.find_batches(sent)  # the reader is gone: the node answers

    first, second = loop_thread().run(find_twice_across_a_kill())
    assert first == second and [len(p.batches) for p in second.topics[0].partitions] == [1, 1]
    wait_for(lambda: read_addresses(server) == [address], "the reader serves again, on its old port")
    wait_for(lambda: 'diskless_reader_restarts_total{reader="0"} 1.0' in metrics(server), "restart counted")
    assert reader_stub(address).FindBatches(sent, timeout=10) == second
    reader_pids_at_stop.extend(reader_pids(server))


@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGES)
def test_damage_a_reader_meets_is_rebuilt_by_the_node_and_then_served(node: ServerProcess, damage: str) -> None:
    node.start()
    acknowledged = fill(node, commits=60)
    partitions_of = coordinator_of_partition(node, acknowledged)
    victim = partitions_of[0]
    assert node.stop() == 0
    DAMAGES[damage](node.data_dir / f"coordinator-{victim}" / "state.sqlite")

    node.start()
    reader = reader_stub(wait_reader(node))
    everything = request(acknowledged.topic_id, [(p, 0) for p in range(PARTITIONS)])
    first = reader.FindBatches(everything, timeout=10).topics[0].partitions  # never an INTERNAL status
    refused = [p for p, result in enumerate(first) if result.error_code in RETRIABLE]
    assert refused and all(partitions_of[p] == victim for p in refused), first
    wait_for(lambda: sorted((node.data_dir / f"coordinator-{victim}").glob("state.sqlite.corrupt-*")), "set aside")
    wait_for(lambda: coordinator_state(node, victim) == "ACTIVE", "rebuilt")
    output = "".join(node.output)
    assert "reader 0: coordinator" in output and "a read met damage" in output, output
    # The rebuilt state, read by the reader (a new generation: a new connection), answers as the node does.
    rebuilt = reader.FindBatches(everything, timeout=10)
    assert rebuilt == node.stub.FindBatches(everything, timeout=10)
    assert all(p.error_code == pb.NONE for p in rebuilt.topics[0].partitions), rebuilt
    assert_every_acknowledged_batch_served(node, acknowledged)


@pytest.mark.slow
def test_a_coordinator_out_of_service_answers_its_code_on_the_reader(node: ServerProcess) -> None:
    node.start()
    acknowledged = fill(node, commits=20)
    partitions_of = coordinator_of_partition(node, acknowledged)
    victim = partitions_of[0]
    assert node.stop() == 0
    log_directory = node.data_dir / f"coordinator-{victim}" / "log"
    for path in log_directory.glob(f"*{SEGMENT_SUFFIX}"):  # the state is now ahead of its log: FAILED
        path.unlink()

    node.start(wait_serving=False)
    wait_for(lambda: coordinator_state(node, victim) == "FAILED", "the coordinator failed to load")
    reader = reader_stub(wait_reader(node))
    answer = reader.FindBatches(request(acknowledged.topic_id, [(p, 0) for p in range(PARTITIONS)]), timeout=10)
    for p, result in enumerate(answer.topics[0].partitions):
        if partitions_of[p] == victim:
            assert result.error_code == pb.COORDINATOR_NOT_AVAILABLE and not result.batches, result
        else:
            assert result.error_code == pb.NONE and result.batches, result
    unknown = reader.FindBatches(request(new_topic_id(), [(0, 0)]), timeout=10).topics[0].partitions[0]
    assert unknown.error_code == pb.COORDINATOR_NOT_AVAILABLE, unknown  # the coordinator out may hold it
    response = commit_round(Broker(node.stub, COORDINATORS), acknowledged)
    assert {r.error_code for r in response.batches} == {pb.NONE, pb.COORDINATOR_NOT_AVAILABLE}


ORPHANED_READER = """
import multiprocessing

from coordinator.base.child_processes import start_child
from coordinator.config.settings import Settings
from coordinator.reads.readers.board import StatusBoard
from coordinator.reads.readers.counters import CallCounts
from coordinator.reads.readers.worker import ReaderPlan, run_reader

if __name__ == "__main__":
    plan = ReaderPlan(0, Settings(), "127.0.0.1", 0, ())
    words = (StatusBoard.create(0).words, CallCounts.create(1).words)
    process, ours = start_child(
        multiprocessing.get_context("spawn"), run_reader, (plan, *words), "diskless-reader-0", daemon=False
    )
    ours.close()  # the node is gone (killed) before its reader says it listens
    process.join(60)
    print("exit code", process.exitcode)
"""


@pytest.mark.slow
def test_a_reader_whose_node_is_gone_before_it_listens_ends_quietly(tmp_path: Path) -> None:
    script = tmp_path / "orphaned_reader.py"
    script.write_text(ORPHANED_READER)
    ended = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent
    )
    assert "exit code 0" in ended.stdout, ended.stdout + ended.stderr
    assert "Traceback" not in ended.stderr, ended.stderr
    assert "Event loop is closed" not in ended.stderr, ended.stderr
    assert "the node is gone" in ended.stderr, ended.stderr  # it did start, and met the closed pipe


def test_the_board_holds_a_code_and_a_generation_in_one_word() -> None:
    board = StatusBoard.create(3)
    assert board.status(2) == Status(pb.COORDINATOR_LOAD_IN_PROGRESS, 0) and not board.status(2).readable
    board.publish(1, Status(0, 7))
    board.publish(2, Status(pb.COORDINATOR_NOT_AVAILABLE, 2**40))
    assert board.status(1).readable and board.status(1).generation == 7
    assert board.status(2) == Status(pb.COORDINATOR_NOT_AVAILABLE, 2**40)
    with pytest.raises(ValueError):
        board.publish(0, Status(-1, 1))  # only require_active's codes, all positive, are published
    # A reader's check at every call: the generation when readable, else the status that says why not.
    assert board.readable_generation(1) == 7
    assert board.readable_generation(2) == Status(pb.COORDINATOR_NOT_AVAILABLE, 2**40)
    assert board.readable_generation(0) == Status(pb.COORDINATOR_LOAD_IN_PROGRESS, 0)


def test_reads_go_to_the_readers_in_turn_skipping_one_unreachable_for_a_while() -> None:
    rotation = ReaderRotation()
    assert rotation.pick("node:1", 0.0) is None  # no readers: the node itself
    rotation.learn("node:1", ("r:1", "r:2"))
    assert {rotation.pick("node:1", 0.0), rotation.pick("node:1", 0.0)} == {"r:1", "r:2"}
    rotation.unreachable("r:1", 10.0)
    assert {rotation.pick("node:1", 10.5) for _ in range(4)} == {"r:2"}
    rotation.unreachable("r:2", 10.5)
    assert rotation.pick("node:1", 10.9) is None  # both skipped: the node answers
    assert rotation.pick("node:1", 10.0 + READER_RETRY_S) == "r:1"  # tried again once the while is over
