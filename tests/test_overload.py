"""Overload is refused with RESOURCE_EXHAUSTED, nothing refused is written, and the node keeps serving.

A full coordinator queue refuses calls; so does the edge, past its bounds of calls and request bytes in progress
or when a call's deadline is nearly gone (issue 12).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import grpc
import pytest

from coordinator.config.rules import validated
from coordinator.config.settings import Settings, SettingsError
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, batch, fetch_all_batches, high_watermark, laid_out
from tests.test_metrics import scrape, total


@pytest.mark.slow
def test_overload_is_refused_and_nothing_refused_is_written(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        coordinators=1,
        settings={
            "diskless.coordinator.queue.max.operations": "2",
            "diskless.coordinator.group.commit.max.operations": "1",
            # 300 calls at once: gRPC holds them all until the node takes them up (its queue refuses, not gRPC).
            "diskless.server.max.pending.calls": "1000",
            "diskless.server.max.pending.ms": "60000",
        },
    ).start()
    try:
        topic = Broker(server.stub, 1).create_topic("overload", 1)

        async def flood() -> list[pb.CommitFileResponse | grpc.StatusCode]:
            async with grpc.aio.insecure_channel(server.address) as channel:
                stub = pb_grpc.DisklessCoordinatorStub(channel)

                async def one() -> pb.CommitFileResponse | grpc.StatusCode:
                    request = pb.CommitFileRequest(
                        object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100, uploader_broker_id=1,
                        owner_ids=[0], batches=[batch(topic, 0, 2)],
                    )  # fmt: skip
                    try:
                        return await stub.CommitFile(request, timeout=30)
                    except grpc.aio.AioRpcError as error:
                        return error.code()

                return await asyncio.gather(*(one() for _ in range(300)))

        outcomes = asyncio.run(flood())
        refused = [o for o in outcomes if isinstance(o, grpc.StatusCode)]
        accepted = [o for o in outcomes if not isinstance(o, grpc.StatusCode)]
        assert refused, "a queue of 2 under 300 concurrent commits must refuse some"
        assert set(refused) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert all(r.batches[0].error_code == pb.NONE for r in accepted)
        offsets = sorted(r.batches[0].assigned_base_offset for r in accepted)
        assert offsets == list(range(0, 2 * len(accepted), 2)), "only accepted commits took offsets"
        listed = server.stub.ListOffsets(
            pb.ListOffsetsRequest(
                topics=[pb.ListOffsetsRequest.Topic(topic_id=topic, partitions=[pb.ListOffsetsRequest.Partition()])]
            )
        )
        listed_partition = listed.topics[0].partitions[0]
        listed_partition_offset = listed_partition.offset
        assert listed_partition.error_code == pb.NONE
        assert listed_partition_offset == 0  # timestamp 0 finds the first batch
        described = server.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest())
        assert described.coordinators[0].live_batch_count == len(accepted)
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------- admission at the edge (issue 12, part 4)

COMMIT_BATCHES = 200  # about 10 KB of request per commit
BURST = 200
SAME_READ_S = 0.005  # answers read together by the client, seen in any order


Outcome = tuple[pb.CommitFileResponse | grpc.aio.AioRpcError, float]  # answer or error, when it came (perf_counter)


def commit_request(topic: bytes) -> pb.CommitFileRequest:
    """A commit of COMMIT_BATCHES batches (about 10 KB)."""
    batches = laid_out([batch(topic, 0, 2) for _ in range(COMMIT_BATCHES)])
    return pb.CommitFileRequest(
        object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=100 * COMMIT_BATCHES,
        uploader_broker_id=1, owner_ids=[0], batches=batches,
    )  # fmt: skip


async def commit_once(stub: pb_grpc.DisklessCoordinatorStub, topic: bytes) -> Outcome:
    try:
        answer: pb.CommitFileResponse | grpc.aio.AioRpcError = await stub.CommitFile(commit_request(topic), timeout=60)
    except grpc.aio.AioRpcError as error:
        answer = error
    return answer, time.perf_counter()


async def _burst(address: str, topic: bytes, count: int) -> list[Outcome]:
    """`count` concurrent commits of COMMIT_BATCHES batches each."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.DisklessCoordinatorStub(channel)
        return await asyncio.gather(*(commit_once(stub, topic) for _ in range(count)))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("diskless.server.max.inflight.request.bytes", "30000", "request_bytes"),
        ("diskless.server.max.concurrent.rpcs", "2", "calls"),
    ],
)
def test_past_a_bound_calls_are_refused_at_once_and_nothing_refused_is_written(
    tmp_path: Path, setting: str, value: str, reason: str
) -> None:
    server = ServerProcess(
        tmp_path / "data",
        coordinators=1,
        # gRPC's own queue is left unbounded here: what this test refuses, the gate refuses.
        settings={setting: value, "diskless.metrics.listen": "127.0.0.1:0", "diskless.server.max.pending.ms": "60000"},
    ).start()
    try:
        topic = Broker(server.stub, 1).create_topic("bounded", 1)
        outcomes = asyncio.run(_burst(server.address, topic, BURST))
        refused = [(error, came) for error, came in outcomes if isinstance(error, grpc.aio.AioRpcError)]
        accepted = [answer for answer, _ in outcomes if isinstance(answer, pb.CommitFileResponse)]
        assert refused and accepted, f"{len(refused)} refused, {len(accepted)} accepted"
        assert {error.code() for error, _ in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert all(setting in (error.details() or "") for error, _ in refused), refused[0][0].details()
        # A refusal waits for nothing: a call is refused only while admitted ones are in progress, so each refusal
        # comes before the last admitted call's answer (an order within the run, not a time a loaded machine misses).
        # Answers that reach this client in one read resume its coroutines in any order: a refusal sent just before
        # the last admitted answer may be seen microseconds after it (37 us in a CI run), never milliseconds.
        last_accepted = max(came for answer, came in outcomes if isinstance(answer, pb.CommitFileResponse))
        assert max(came for _, came in refused) < last_accepted + SAME_READ_S, "a refusal waited for the admitted calls"
        # Every acknowledged batch is there, in the offsets it was given; no refused batch is.
        assert all(b.error_code == pb.NONE for answer in accepted for b in answer.batches)
        acknowledged = sorted(b.assigned_base_offset for answer in accepted for b in answer.batches)
        found, _, high_watermark = fetch_all_batches(server.stub, topic, 0)
        assert [b.base_offset for b in found] == acknowledged == list(range(0, high_watermark, 2))
        samples = scrape(server)
        assert total(samples, "diskless_shed_calls_total", method="CommitFile", reason=reason) == len(refused)
        assert total(samples, "diskless_rpc_requests_total", method="CommitFile", code="RESOURCE_EXHAUSTED") == len(
            refused
        )
        if reason == "request_bytes":
            assert total(samples, "diskless_server_request_bytes_in_progress_peak") <= int(value)
        else:
            assert total(samples, "diskless_server_calls_in_progress_peak") <= int(value)
        refusal_lines = [line for line in server.output if "refusing CommitFile with RESOURCE_EXHAUSTED" in line]
        assert 1 <= len(refusal_lines) <= 2, refusal_lines  # one line per interval, with the count it stood for
        # The node recovers: once the burst is over, calls go through.
        after = Broker(server.stub, 1).commit(laid_out([batch(topic, 0, 2)]))
        assert after.batches[0].error_code == pb.NONE
        assert after.batches[0].assigned_base_offset == high_watermark
    finally:
        assert server.stop() == 0


@pytest.mark.slow
def test_a_call_with_too_little_deadline_left_is_refused_and_one_without_a_deadline_runs(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        coordinators=1,
        settings={"diskless.server.min.remaining.deadline.ms": "60000", "diskless.metrics.listen": "127.0.0.1:0"},
    ).start()
    try:
        broker = Broker(server.stub, 1)
        topic = broker.create_topic("deadlines", 1)  # the harness's calls set no deadline
        with pytest.raises(grpc.RpcError) as refused:
            broker.commit(laid_out([batch(topic, 0)]), owner_ids=[0], timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "diskless.server.min.remaining.deadline.ms" in (refused.value.details() or "")
        assert total(scrape(server), "diskless_shed_calls_total", reason="deadline") == 1
        assert high_watermark(server.stub, topic, 0) == 0, "the refused commit wrote nothing"
        request = pb.CommitFileRequest(
            object_key="wal/no-deadline", object_format=1, file_size=100, uploader_broker_id=1, owner_ids=[0],
            batches=[batch(topic, 0)],
        )  # fmt: skip
        assert server.stub.CommitFile(request).batches[0].error_code == pb.NONE  # no deadline: always run
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    "name",
    [
        "diskless.server.max.inflight.request.bytes",
        "diskless.server.min.remaining.deadline.ms",
        "diskless.server.max.pending.calls",
        "diskless.server.max.pending.ms",
        "diskless.server.stream.window.bytes",
    ],
)
def test_a_negative_bound_is_refused_at_start(name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        validated(Settings().with_overrides({name: "-1"}))


@pytest.mark.slow
def test_calls_grpc_cancels_before_the_node_takes_them_up_show_in_the_metrics(tmp_path: Path) -> None:
    """Past diskless.server.max.pending.calls gRPC cancels calls the node never saw: never run, still counted."""
    server = ServerProcess(
        tmp_path / "data",
        coordinators=1,
        settings={"diskless.server.max.pending.calls": "1", "diskless.metrics.listen": "127.0.0.1:0"},
    ).start()
    try:
        topic = Broker(server.stub, 1).create_topic("pending", 1)
        before = scrape(server)
        outcomes = asyncio.run(_burst(server.address, topic, BURST))
        after = scrape(server)
        codes = [a.code() if isinstance(a, grpc.aio.AioRpcError) else grpc.StatusCode.OK for a, _ in outcomes]
        cancelled = codes.count(grpc.StatusCode.CANCELLED)
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED}
        assert cancelled > 0, f"one call may wait in gRPC: a burst of {BURST} must see some cancelled"
        grown = {}
        for name in ("started", "succeeded", "failed"):
            metric = f"diskless_grpc_calls_{name}_total"
            grown[name] = total(after, metric) - total(before, metric)
        unanswered = grown["started"] - grown["succeeded"] - grown["failed"]  # gRPC cancelled them unseen
        assert unanswered == cancelled
        accepted = [a for a, _ in outcomes if isinstance(a, pb.CommitFileResponse)]
        found = fetch_all_batches(server.stub, topic, 0)[0]
        assert len(found) == COMMIT_BATCHES * len(accepted), "a cancelled call wrote nothing"
    finally:
        assert server.stop() == 0
