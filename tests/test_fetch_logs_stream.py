"""FetchLogsStream over real gRPC (issue #37): one stream of FetchLogsRequest, each answered once and in order by
the same code as a FetchLogs call, on the node's loop (with the edge loop on and off); the ACL admits it as an
internal call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from protos import internal_pb2_grpc as internal_grpc
from tests.in_process import InProcessNode

UNKNOWN = 99  # a coordinator no node hosts


def _request(node_id: int, coordinator_ids: list[int]) -> internal.FetchLogsRequest:
    partitions = [internal.FetchLogRequest(coordinator_id=c, fetch_offset=0) for c in coordinator_ids]
    return internal.FetchLogsRequest(replica_node_id=node_id, max_wait_ms=0, partitions=partitions)


async def _exchange(address: str, requests: list[internal.FetchLogsRequest]) -> list[internal.FetchLogsResponse]:
    async with grpc.aio.insecure_channel(address) as channel:
        stream = internal_grpc.CoordinatorInternalStub(channel).FetchLogsStream()
        answers: list[internal.FetchLogsResponse] = []
        for request in requests:  # one at a time, as the fetcher sends them: each answered before the next
            await stream.write(request)
            answer = await asyncio.wait_for(stream.read(), 30)
            assert isinstance(answer, internal.FetchLogsResponse)
            answers.append(answer)
        await stream.done_writing()
        assert await asyncio.wait_for(stream.read(), 30) is grpc.aio.EOF
        # The same requests as FetchLogs calls get the same answers.
        stub = internal_grpc.CoordinatorInternalStub(channel)
        assert [await stub.FetchLogs(request, timeout=30) for request in requests] == answers
        return answers


@pytest.mark.parametrize("edge_loop", [True, False])
def test_each_request_of_the_stream_is_answered_in_order_as_a_call(tmp_path: Path, edge_loop: bool) -> None:
    node = InProcessNode(
        tmp_path / "data", coordinators=2, settings={"diskless.server.edge.loop": str(edge_loop).lower()}
    ).start()
    try:
        requests = [_request(7, [UNKNOWN]), _request(7, [1, UNKNOWN]), _request(7, [UNKNOWN, 0])]
        answers = asyncio.run(_exchange(node.address, requests))
        assert [[p.coordinator_id for p in a.partitions] for a in answers] == [[UNKNOWN], [1, UNKNOWN], [UNKNOWN, 0]]
        for answer in answers:
            for part in answer.partitions:
                if part.coordinator_id == UNKNOWN:  # refused per part, as FetchLogs refuses it
                    assert part.error_code == pb.NOT_LEADER_OR_FOLLOWER, part
                    assert f"no coordinator {UNKNOWN} here" in part.error_message
                else:  # a node alone is no replica of another: its leader refuses the fetch, per part too
                    assert part.error_code != pb.NONE, part
    finally:
        node.stop()
