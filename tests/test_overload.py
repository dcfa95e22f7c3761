"""A full coordinator queue refuses calls with RESOURCE_EXHAUSTED, writes nothing for them, and keeps serving."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc

from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, ServerProcess, batch


def test_overload_is_refused_and_nothing_refused_is_written(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        coordinators=1,
        settings={
            "diskless.coordinator.queue.max.operations": "2",
            "diskless.coordinator.group.commit.max.operations": "1",
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
