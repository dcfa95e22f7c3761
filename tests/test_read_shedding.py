"""Reads shed like writes (issue 29, item 4): FindBatches' answer bytes are admitted against a bound.

A FindBatches request is small, its answer can be large: the edge holds each call's potential answer bytes
(coordinator/reads/find_batches.py `answer_bound`) from before any work until the answer is built, then the
answer's own bytes until gRPC is done with the call; past diskless.server.max.inflight.response.bytes a call
is refused at once with RESOURCE_EXHAUSTED (coordinator/edge/gate.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from coordinator.config.settings import Settings
from coordinator.edge.admission import Admission
from coordinator.reads.find_batches import ENTRY_MAX_BYTES, answer_bound
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, batch, find_batches_request, laid_out
from tests.in_process import InProcessNode, wait_until
from tests.test_metrics import scrape, total
from tests.test_readers import reader_calls, reader_stub, wait_reader

MAX_RESULTS = 10
# One call's potential answer: MAX_RESULTS entries of the longest key, one partition, one topic.
POTENTIAL = MAX_RESULTS * ENTRY_MAX_BYTES + 2048 + 64
BOUND = POTENTIAL + POTENTIAL // 2  # one call being built at once, plus the built answers of a few


def _admission(node: InProcessNode) -> Admission:
    assert node.running is not None
    return node.running.admission


def _filled(node: InProcessNode, batches: int) -> bytes:
    broker = Broker(node.stub, node.coordinators)
    topic = broker.create_topic("shed-reads", 1)
    assert broker.commit(laid_out([batch(topic, 0) for _ in range(batches)])).batches[0].error_code == pb.NONE
    return topic


def test_answer_bound_is_the_most_an_answer_can_take() -> None:
    settings = Settings().with_overrides({"diskless.coordinator.find.batches.max.results": "10"})
    one = find_batches_request(b"t" * 16, 0, 0)
    assert answer_bound(settings, one) == POTENTIAL
    assert (
        answer_bound(settings, find_batches_request(b"t" * 16, 0, 0, batches_max=2)) == POTENTIAL - 8 * ENTRY_MAX_BYTES
    )
    assert answer_bound(Settings(), one) == min(Settings().request_max_bytes, 10000 * ENTRY_MAX_BYTES + 2048 + 64)


def test_find_batches_past_the_answer_bound_is_refused_before_any_work_and_runs_once_released(
    tmp_path: Path,
) -> None:
    node = InProcessNode(
        tmp_path / "data",
        coordinators=1,
        settings={
            "diskless.coordinator.find.batches.max.results": str(MAX_RESULTS),
            "diskless.server.max.inflight.response.bytes": str(BOUND),
        },
    ).start()
    try:
        topic = _filled(node, 30)
        request = find_batches_request(topic, 0, 0)
        admission = _admission(node)
        # Answers in progress elsewhere hold bytes: this call's potential answer does not fit beside them.
        # (From this thread: no call is in progress, so the edge loop does not touch the counts meanwhile.)
        admission.take_response(BOUND - POTENTIAL + 1)
        with pytest.raises(grpc.RpcError) as refused:
            node.stub.FindBatches(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "diskless.server.max.inflight.response.bytes" in (refused.value.details() or "")
        admission.release_response(BOUND - POTENTIAL + 1)
        answer = node.stub.FindBatches(request, timeout=10).topics[0].partitions[0]
        assert answer.error_code == pb.NONE and len(answer.batches) == MAX_RESULTS
        # What the call held is released once gRPC is done with it; its peak was its potential answer.
        wait_until(lambda: admission.statistics().response_bytes == 0, "the answer bytes are released")
        assert admission.statistics().peak_response_bytes == POTENTIAL
    finally:
        node.stop()


def test_a_flood_of_find_batches_is_shed_within_the_bound_and_everything_is_released(tmp_path: Path) -> None:
    node = InProcessNode(
        tmp_path / "data",
        coordinators=1,
        settings={
            "diskless.coordinator.find.batches.max.results": str(MAX_RESULTS),
            "diskless.server.max.inflight.response.bytes": str(BOUND),
            "diskless.server.max.pending.ms": "60000",
            "diskless.server.min.remaining.deadline.ms": "0",
        },
    ).start()
    try:
        topic = _filled(node, 30)
        request = find_batches_request(topic, 0, 0)

        async def flood(calls: int, timeout_s: float = 30) -> list[grpc.StatusCode]:
            async with grpc.aio.insecure_channel(node.address) as channel:
                stub = pb_grpc.DisklessCoordinatorStub(channel)

                async def one() -> grpc.StatusCode:
                    try:
                        await stub.FindBatches(request, timeout=timeout_s)
                    except grpc.aio.AioRpcError as error:
                        return error.code()
                    return grpc.StatusCode.OK

                return await asyncio.gather(*(one() for _ in range(calls)))

        codes = asyncio.run(flood(300))
        assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, set(codes)
        admission = _admission(node)
        wait_until(lambda: admission.statistics().response_bytes == 0, "every answer's bytes are released")
        assert POTENTIAL <= admission.statistics().peak_response_bytes <= BOUND
        # Calls whose callers give up (deadlines far too short) release what they held as well.
        codes = asyncio.run(flood(300, timeout_s=0.05))
        assert grpc.StatusCode.DEADLINE_EXCEEDED in codes, set(codes)
        wait_until(lambda: admission.statistics().response_bytes == 0, "the given-up calls' bytes are released")
        # Released: the node answers again.
        assert node.stub.FindBatches(request, timeout=10).topics[0].partitions[0].error_code == pb.NONE
    finally:
        node.stop()


@pytest.mark.slow
def test_diskless_serve_and_its_reader_shed_a_flood_of_large_find_batches(tmp_path: Path) -> None:
    """`diskless serve` with a reader process: both refuse what passes the bound, both keep serving."""
    server = ServerProcess(
        tmp_path / "data",
        coordinators=1,
        settings={
            "diskless.server.max.inflight.response.bytes": str(2 * 1024 * 1024),
            "diskless.server.read.processes": "1",
            "diskless.server.max.pending.ms": "60000",
            "diskless.metrics.listen": "127.0.0.1:0",
        },
    ).start()
    try:
        broker = Broker(server.stub, 1)
        topic = broker.create_topic("flooded", 1)
        for _ in range(3):
            committed = broker.commit(laid_out([batch(topic, 0) for _ in range(1000)]))
            assert committed.batches[0].error_code == pb.NONE
        request = find_batches_request(topic, 0, 0)
        readers = [wait_reader(server)]

        async def flood(address: str, calls: int) -> list[grpc.StatusCode]:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = pb_grpc.DisklessCoordinatorStub(channel)

                async def one() -> grpc.StatusCode:
                    try:
                        answer = await stub.FindBatches(request, timeout=60)
                    except grpc.aio.AioRpcError as error:
                        return error.code()
                    assert len(answer.topics[0].partitions[0].batches) == 3000
                    return grpc.StatusCode.OK

                return await asyncio.gather(*(one() for _ in range(calls)))

        async def both() -> list[list[grpc.StatusCode]]:
            return await asyncio.gather(flood(server.address, 300), flood(readers[0], 300))

        for codes in asyncio.run(both()):
            assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, set(codes)
        samples = scrape(server)
        assert total(samples, "diskless_shed_calls_total", method="FindBatches", reason="response_bytes") > 0
        assert total(samples, "diskless_server_response_bytes_in_progress") == 0
        assert reader_calls(server, "RESOURCE_EXHAUSTED") > 0
        assert len(reader_stub(readers[0]).FindBatches(request, timeout=30).topics[0].partitions[0].batches) == 3000
    finally:
        assert server.stop() == 0
