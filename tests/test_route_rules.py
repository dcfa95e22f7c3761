"""The routing client's pure route rules (coordinator/client/routes.py) that the mutation run over coordinator/ found
unpinned (issue #40, item 5; docs/testing.md). Each test names the one-line break it kills."""

from __future__ import annotations

from coordinator.client.request_parts import trim_to_fetch_budget
from coordinator.client.routes import CoordinatorRoute, ReplicaRoute, RoutingTable, endpoint_problem, route_of
from protos import coordinator_pb2 as pb


def test_a_leader_on_node_0_is_a_leader() -> None:
    """Node ids start at 0: an endpoint naming node 0 as leader, on a port, has a leader to send to. Kills
    `endpoint.leader_node_id < 0` made `< 1` in `endpoint_problem`."""
    endpoint = pb.CoordinatorEndpoint(coordinator_id=3, leader_node_id=0, leader_epoch=2, host="10.0.0.1", port=9000)
    assert endpoint_problem(endpoint) is None
    assert route_of(endpoint, "10.0.0.9:9000").leader_address == "10.0.0.1:9000"
    # The rule's two other sides: no leader (-1), or no port, is a problem.
    assert endpoint_problem(pb.CoordinatorEndpoint(leader_node_id=-1, host="h", port=9000)) is not None
    assert endpoint_problem(pb.CoordinatorEndpoint(leader_node_id=1, host="h", port=0)) is not None


def test_reads_cover_every_coordinator_or_none_of_them() -> None:
    """A read cover names one address per coordinator: with no route known, or one coordinator with neither a leader
    nor an in-sync replica, there is no cover (None, and the table asks again), never a partial one. Kills `not
    addresses or any(a is None ...)` made `and` in `RoutingTable.cover`."""
    table = RoutingTable()
    assert table.cover() is None
    served = CoordinatorRoute(0, 1, 1, "h1:1", (ReplicaRoute(1, "h1:1", True, ()),))
    orphan = CoordinatorRoute(1, -1, 1, None, (ReplicaRoute(2, "h2:1", False, ()),))
    table.routes = {0: served, 1: orphan}
    table.coordinators_known = True
    assert table.cover() is None
    assert not table.coordinators_known
    table.routes = {0: served}
    assert table.cover() == ["h1:1"]


def _find_batches(
    fetch_max_bytes: int, partitions: list[tuple[int, list[int]]]
) -> tuple[pb.FindBatchesRequest, pb.FindBatchesResponse]:
    """A FindBatches request on one topic and its merged answer: per partition (max bytes, batch sizes)."""
    request = pb.FindBatchesRequest(fetch_max_bytes=fetch_max_bytes)
    response = pb.FindBatchesResponse()
    asked, answered = request.topics.add(topic_id=b"t" * 16), response.topics.add(topic_id=b"t" * 16)
    for number, (max_bytes, sizes) in enumerate(partitions):
        asked.partitions.add(partition=number, offset=0, max_partition_fetch_bytes=max_bytes)
        answered.partitions.add(partition=number).batches.extend(pb.BatchInfo(byte_size=size) for size in sizes)
    return request, response


def test_merged_parts_are_cut_where_the_budget_is_reached_not_passed() -> None:
    """The client's cut of merged FindBatches parts follows the coordinator's rule (reads/byte_budget.py): after the
    first batch, a batch is added only while the total is below fetch_max_bytes and its partition's bytes below the
    partition's max; a total exactly at the budget stops. Kills `total_bytes >= request.fetch_max_bytes` made `>` in
    `trim_to_fetch_budget` (the answer would exceed what one coordinator's single call returns)."""
    request, response = _find_batches(100, [(1000, [100]), (1000, [10, 10])])
    trim_to_fetch_budget(request, response)
    assert [len(p.batches) for p in response.topics[0].partitions] == [1, 0]
    request, response = _find_batches(1000, [(50, [50, 10]), (1000, [10])])
    trim_to_fetch_budget(request, response)
    assert [len(p.batches) for p in response.topics[0].partitions] == [1, 1]
    request, response = _find_batches(1000, [(1000, [2000, 10]), (1000, [10])])
    trim_to_fetch_budget(request, response)
    assert [len(p.batches) for p in response.topics[0].partitions] == [1, 0], "the first batch always comes"
