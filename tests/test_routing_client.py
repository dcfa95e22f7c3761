"""The routing client against a real node, and against real gRPC proxies that say a coordinator is elsewhere.

A `RoutingProxy` is a gRPC server on its own loopback port that forwards every call to the real node
but answers routing questions (FindCoordinator, DescribeCoordinators) with the addresses the test
chooses, so one node looks like a cluster of several; it can also refuse calls with NOT_COORDINATOR.
The client is driven on the in-process nodes' event loop (grpc.aio binds to one loop per process).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent import futures
from typing import Any, TypeVar

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.base.backoff import Backoff
from coordinator.client.channels import RETRIABLE_CODE_BYTES
from coordinator.client.request_parts import merge_file_answers
from coordinator.client.routes import RETRIABLE_CODES
from coordinator.client.routing_client import RoutingClient, RoutingError
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.harness import Broker, batch, laid_out, topic_name
from tests.in_process import InProcessNode

T = TypeVar("T")
PARTITIONS = 12
SHORT_DEADLINE_MS = 300


def run(node: InProcessNode, coroutine: Coroutine[Any, Any, T]) -> T:
    return node.loop.run(coroutine)


class RoutingProxy(pb_grpc.DisklessCoordinatorServicer):
    """Forwards to the real node; reports coordinator c at `where[c]`; refuses the first `refusals` data calls."""

    def __init__(self, node: InProcessNode, refusals: int = 0) -> None:
        self.node = node
        self.where: dict[int, str] = {}
        self.refusals = refusals
        self.stall_s = 0.0  # CommitFile calls not refused answer NOT_COORDINATOR only after this long (a slow node)
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_DisklessCoordinatorServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.stop(grace=None)

    def _place(self, endpoint: pb.CoordinatorEndpoint) -> None:
        address = self.where.get(endpoint.coordinator_id)
        if address is None:
            return
        host, _, port = address.rpartition(":")
        endpoint.host, endpoint.port = host, int(port)
        for replica in endpoint.replicas:
            replica.host, replica.port = host, int(port)

    def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: Any) -> pb.FindCoordinatorResponse:
        found = self.node.stub.FindCoordinator(request)
        for endpoint in found.coordinators:
            self._place(endpoint)
        return found

    def DescribeCoordinators(self, request: Any, context: Any) -> pb.DescribeCoordinatorsResponse:
        described = self.node.stub.DescribeCoordinators(request)
        for description in described.coordinators:
            self._place(description.leader)
        return described

    def _refused(self, name: str, request: Any) -> bool:
        with self._lock:
            self.calls.append((name, request))
            refuse = self.refusals > 0
            self.refusals -= refuse
            return refuse

    def CommitFile(self, request: pb.CommitFileRequest, context: Any) -> pb.CommitFileResponse:
        refused = pb.CommitFileResponse.BatchResult(error_code=pb.NOT_COORDINATOR, assigned_base_offset=-1)
        if self._refused("CommitFile", request):
            return pb.CommitFileResponse(batches=[refused for _ in request.batches])
        if self.stall_s:
            time.sleep(self.stall_s)
            return pb.CommitFileResponse(batches=[refused for _ in request.batches])
        return self.node.stub.CommitFile(request)

    def FindBatches(self, request: pb.FindBatchesRequest, context: Any) -> pb.FindBatchesResponse:
        assert not self._refused("FindBatches", request)
        return self.node.stub.FindBatches(request)

    def ListOffsets(self, request: pb.ListOffsetsRequest, context: Any) -> pb.ListOffsetsResponse:
        assert not self._refused("ListOffsets", request)
        return self.node.stub.ListOffsets(request)

    def DescribeFiles(self, request: pb.DescribeFilesRequest, context: Any) -> pb.DescribeFilesResponse:
        assert not self._refused("DescribeFiles", request)
        return self.node.stub.DescribeFiles(request)


@pytest.fixture
def proxies(server: InProcessNode) -> Iterator[list[RoutingProxy]]:
    started = [RoutingProxy(server), RoutingProxy(server)]
    yield started
    for proxy in started:
        proxy.stop()


def commit_request(topic_id: bytes, owners: list[int], key: str) -> pb.CommitFileRequest:
    batches = laid_out([batch(topic_id, p % PARTITIONS, records=p + 1, size=300) for p in range(2 * PARTITIONS)])
    return pb.CommitFileRequest(
        object_key=key,
        object_format=1,
        file_size=sum(b.size for b in batches),
        uploader_broker_id=1,
        owner_ids=owners,
        batches=batches,
    )


def fetch_request(topic_id: bytes, fetch_max_bytes: int) -> pb.FindBatchesRequest:
    partitions = [
        pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1000)
        for p in range(PARTITIONS)
    ]
    return pb.FindBatchesRequest(
        fetch_max_bytes=fetch_max_bytes, topics=[pb.FindBatchesRequest.Topic(topic_id=topic_id, partitions=partitions)]
    )


def committed(response: pb.CommitFileResponse) -> list[tuple[int, int, bool]]:
    return [(b.error_code, b.assigned_base_offset, b.is_duplicate) for b in response.batches]


def found(response: pb.FindBatchesResponse) -> list[tuple[int, int, int, list[tuple[int, int, int]]]]:
    return [
        (p.partition, p.error_code, p.high_watermark, [(b.base_offset, b.last_offset, b.byte_size) for b in p.batches])
        for t in response.topics
        for p in t.partitions
    ]


def two_topics(broker: Broker) -> tuple[bytes, bytes, list[int]]:
    """A topic for the client and one for direct calls, of the same shape, and every coordinator of the first."""
    routed = broker.create_topic(topic_name("routed"), PARTITIONS)
    direct = broker.create_topic(topic_name("direct"), PARTITIONS)
    owners = broker.owners_of([batch(routed, p) for p in range(PARTITIONS)])
    return routed, direct, owners


def test_a_node_without_a_cluster_reports_itself_as_the_one_replica(server: InProcessNode, broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name(), 4)
    answer = server.stub.FindCoordinator(
        pb.FindCoordinatorRequest(topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=range(4))])
    )
    for endpoint in answer.coordinators:
        assert endpoint.leader_node_id == 0 and endpoint.leader_epoch >= 1
        assert [(r.node_id, r.host, r.port, r.in_sync) for r in endpoint.replicas] == [
            (0, "127.0.0.1", server.port, True)
        ]
    for description in server.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators:
        assert (description.node_id, description.role) == (0, "LEADER")
        assert list(description.isr) == list(description.replica_node_ids) == [0]
        assert len(description.leader.replicas) == 1


def test_routed_calls_on_one_node_give_the_direct_answers(server: InProcessNode, broker: Broker) -> None:
    routed, direct, owners = two_topics(broker)
    expected = [broker.owners_of([batch(routed, p)])[0] for p in range(PARTITIONS)]

    async def scenario() -> tuple[Any, ...]:
        # Only the client's calls inside: a blocking call to the node here would stop the loop serving it.
        async with RoutingClient(server.address) as client:
            assert await client.coordinators_of(routed, range(PARTITIONS)) == expected
            assert client.single_address == server.address  # the fast path: one node serves everything
            commit = await client.commit_file(commit_request(routed, owners, "wal/routed-one-node"))
            fetch = await client.find_batches(fetch_request(routed, 4000))
            return commit, fetch

    commit, fetch = run(server, scenario())
    assert committed(commit) == committed(server.stub.CommitFile(commit_request(direct, owners, "wal/direct-one")))
    assert found(fetch) == found(server.stub.FindBatches(fetch_request(direct, 4000)))
    assert all(b.error_code == pb.NONE for b in commit.batches)


def test_parts_go_to_each_coordinator_leader_and_merge_in_request_order(
    server: InProcessNode, broker: Broker, proxies: list[RoutingProxy]
) -> None:
    routed, direct, owners = two_topics(broker)
    first, second = proxies
    for coordinator_id in range(server.coordinators):
        address = (first if coordinator_id % 2 == 0 else second).address
        first.where[coordinator_id] = second.where[coordinator_id] = address
    coordinator_of = dict(enumerate(broker.owners_of([batch(routed, p)])[0] for p in range(PARTITIONS)))
    assert len(set(coordinator_of.values())) > 1, "the topic must span coordinators of both proxies"

    async def scenario() -> tuple[Any, ...]:
        async with RoutingClient([first.address]) as client:
            commit = await client.commit_file(commit_request(routed, owners, "wal/routed-split"))
            assert client.single_address is None
            assert client.calls_sent["CommitFile"] == 2, "one call per node, counted"
            fetches = [await client.find_batches(fetch_request(routed, budget)) for budget in (1, 2500, 10**6)]
            files = await client.describe_files(pb.DescribeFilesRequest(object_keys=["wal/routed-split", "wal/none"]))
            return commit, fetches, files

    commit, fetches, files = run(server, scenario())
    assert committed(commit) == committed(server.stub.CommitFile(commit_request(direct, owners, "wal/direct-split")))
    for fetch, budget in zip(fetches, (1, 2500, 10**6), strict=True):
        assert found(fetch) == found(server.stub.FindBatches(fetch_request(direct, budget))), budget
    for proxy, parity in ((first, 0), (second, 1)):
        commits = [request for name, request in proxy.calls if name == "CommitFile"]
        assert len(commits) == 1, "one part per node, its coordinators' batches together"
        assert {coordinator_of[b.partition] % 2 for b in commits[0].batches} == {parity}
    known = server.stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=["wal/routed-split", "wal/none"]))
    assert [(f.state, sorted(f.coordinator_ids)) for f in files.files] == [
        (f.state, sorted(f.coordinator_ids)) for f in known.files
    ]
    assert files.files[0].state == pb.FILE_STATE_LIVE and files.files[1].state == pb.FILE_STATE_UNKNOWN


def test_a_part_answered_not_coordinator_is_retried_where_the_refreshed_route_points(
    server: InProcessNode, broker: Broker, proxies: list[RoutingProxy]
) -> None:
    routed, direct, owners = two_topics(broker)
    stale = proxies[0]
    stale.refusals = 1
    stale.where = dict.fromkeys(range(server.coordinators), stale.address)

    async def scenario() -> pb.CommitFileResponse:
        async with RoutingClient([stale.address]) as client:
            await client.coordinators_of(routed, range(PARTITIONS))
            stale.where.clear()  # from now on the proxy reports the real node: the coordinators "moved"
            response = await client.commit_file(commit_request(routed, owners, "wal/routed-moved"))
            assert {r.leader_address for r in client.routes().values()} == {server.address}
            assert client.calls_sent["CommitFile"] == 2, "the refused try and the retry both counted"
            return response

    response = run(server, scenario())
    assert [name for name, _ in stale.calls] == ["CommitFile"], "refused once, then sent to the real leader"
    assert committed(response) == committed(server.stub.CommitFile(commit_request(direct, owners, "wal/direct-mv")))


def test_bounded_retries_end_with_the_last_error_at_the_deadline(
    server: InProcessNode, broker: Broker, proxies: list[RoutingProxy]
) -> None:
    routed, _, owners = two_topics(broker)
    stale = proxies[0]
    stale.refusals = 10**9
    stale.where = dict.fromkeys(range(server.coordinators), stale.address)

    async def scenario() -> tuple[pb.CommitFileResponse, float]:
        client = RoutingClient([stale.address], deadline_ms=SHORT_DEADLINE_MS, backoff_initial_ms=10)
        async with client:
            started = time.monotonic()
            response = await client.commit_file(commit_request(routed, owners, "wal/never"))
            return response, time.monotonic() - started

    response, elapsed_s = run(server, scenario())
    assert {b.error_code for b in response.batches} == {pb.NOT_COORDINATOR}
    # Ends at its deadline rather than retrying on: the slack is for a loaded machine's late wake-ups, not the claim.
    assert elapsed_s < SHORT_DEADLINE_MS / 1000 + 5.0
    tries = len(stale.calls)
    assert 2 <= tries <= 10, f"{tries} tries: retried with backoff, not in a tight loop"
    assert server.stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=["wal/never"])).files[0].state == (
        pb.FILE_STATE_UNKNOWN
    )


def test_a_try_cut_by_the_deadline_ends_with_the_last_error(
    server: InProcessNode, broker: Broker, proxies: list[RoutingProxy]
) -> None:
    """A node that answered NOT_COORDINATOR, then is too slow for the call's deadline: gRPC's DEADLINE_EXCEEDED on
    the last try is the deadline passing, and the call ends with the items' last answers, not an exception."""
    routed, _, owners = two_topics(broker)
    stale = proxies[0]
    stale.refusals = 1
    stale.stall_s = 5 * SHORT_DEADLINE_MS / 1000
    stale.where = dict.fromkeys(range(server.coordinators), stale.address)

    async def scenario() -> pb.CommitFileResponse:
        async with RoutingClient([stale.address], deadline_ms=SHORT_DEADLINE_MS, backoff_initial_ms=10) as client:
            return await client.commit_file(commit_request(routed, owners, "wal/slow"))

    response = run(server, scenario())
    assert {b.error_code for b in response.batches} == {pb.NOT_COORDINATOR}
    assert [name for name, _ in stale.calls].count("CommitFile") == 2, "answered once, then cut by the deadline"


def test_a_bad_bootstrap_address_is_a_clear_error(server: InProcessNode) -> None:
    for bad in ("nonsense", "host:", "127.0.0.1:0", ""):
        with pytest.raises(ValueError, match="HOST:PORT"):
            RoutingClient(bad)

    async def unreachable() -> None:
        async with RoutingClient("127.0.0.1:1", deadline_ms=SHORT_DEADLINE_MS) as client:
            await client.find_batches(fetch_request(b"\x01" * 16, 100))

    # The address and why: refused (UNAVAILABLE), or, when a loaded machine wakes the try late, its deadline passing.
    with pytest.raises(RoutingError, match=r"127\.0\.0\.1:1: (UNAVAILABLE|the call's deadline passed)"):
        run(server, unreachable())


def test_list_offsets_and_describe_files_on_one_node(server: InProcessNode, broker: Broker) -> None:
    routed, _, owners = two_topics(broker)

    async def scenario() -> tuple[Any, ...]:
        async with RoutingClient(server.address) as client:
            await client.commit_file(commit_request(routed, owners, "wal/routed-offsets"))
            partitions = [pb.ListOffsetsRequest.Partition(partition=p, timestamp=-1) for p in range(PARTITIONS)]
            offsets = await client.list_offsets(
                pb.ListOffsetsRequest(topics=[pb.ListOffsetsRequest.Topic(topic_id=routed, partitions=partitions)])
            )
            await client.describe_coordinators(pb.DescribeCoordinatorsRequest())
            files = await client.describe_files(pb.DescribeFilesRequest(object_keys=["wal/routed-offsets"]))
            return offsets, files

    offsets, files = run(server, scenario())
    # Partition p holds the batches of p + 1 and p + 1 + PARTITIONS records.
    assert [p.offset for p in offsets.topics[0].partitions] == [2 * p + 2 + PARTITIONS for p in range(PARTITIONS)]
    assert files.files[0].state == pb.FILE_STATE_LIVE and files.files[0].has_live_batches


@pytest.mark.parametrize("code", sorted(RETRIABLE_CODES))
def test_the_fast_path_byte_scan_never_misses_a_retriable_item(code: int) -> None:
    partition = {"error_code": code}
    answers = {
        "CommitFile": pb.CommitFileResponse(batches=[pb.CommitFileResponse.BatchResult(error_code=code)]),
        "FindBatches": pb.FindBatchesResponse(topics=[{"partitions": [partition]}]),
        "ListOffsets": pb.ListOffsetsResponse(topics=[{"partitions": [partition]}]),
        "DeleteRecords": pb.DeleteRecordsResponse(topics=[{"partitions": [partition]}]),
        "DescribeFiles": pb.DescribeFilesResponse(files=[{"object_key": "wal/x", "error_code": code}]),
    }
    for method, answer in answers.items():
        assert RETRIABLE_CODE_BYTES[method].search(answer.SerializeToString()), method


# ---------------------------------------------------------------- DescribeFiles: merging the nodes' answers


def _file(state: int = pb.FILE_STATE_UNKNOWN, *ids: int, error: int = pb.NONE) -> pb.DescribeFilesResponse.FileResult:
    return pb.DescribeFilesResponse.FileResult(
        object_key="wal/k", error_code=error, state=state, has_live_batches=state == pb.FILE_STATE_LIVE,
        coordinator_ids=ids,
    )  # fmt: skip


def test_a_file_any_node_knows_is_known_and_unknown_needs_every_nodes_word() -> None:
    unknown, in_flight = _file(), _file(pb.FILE_STATE_LIVE, 2)  # a node describes a commit in flight as it will land
    unavailable = _file(error=pb.COORDINATOR_NOT_AVAILABLE)
    merged = merge_file_answers([unknown, in_flight, unknown])
    assert (merged.error_code, merged.state, merged.has_live_batches, list(merged.coordinator_ids)) == (
        pb.NONE, pb.FILE_STATE_LIVE, True, [2]
    )  # fmt: skip
    # Known wins over another node's error: whatever that node would say, the file must not be deleted.
    assert merge_file_answers([unavailable, _file(pb.FILE_STATE_AWAITING_DELETION, 1)]).state == (
        pb.FILE_STATE_AWAITING_DELETION
    )
    # Nobody knows it: an error anywhere is the answer, never UNKNOWN; UNKNOWN only when every node said so.
    assert merge_file_answers([unknown, unavailable, unknown]).error_code == pb.COORDINATOR_NOT_AVAILABLE
    assert merge_file_answers([unknown, unknown]).state == pb.FILE_STATE_UNKNOWN
    assert merge_file_answers([unknown, unknown]).error_code == pb.NONE


_STATES = st.sampled_from(
    [pb.FILE_STATE_UNKNOWN, pb.FILE_STATE_LIVE, pb.FILE_STATE_AWAITING_HANDOVER, pb.FILE_STATE_AWAITING_DELETION]
)
_ANSWERS = st.lists(
    st.one_of(
        st.builds(lambda s, c: _file(s, *([] if s == pb.FILE_STATE_UNKNOWN else [c])), _STATES, st.integers(0, 7)),
        st.sampled_from(sorted(RETRIABLE_CODES)).map(lambda code: _file(error=code)),
    ),
    min_size=1,
    max_size=6,
)


@given(_ANSWERS)
def test_merged_file_answers_follow_the_brokers_deletion_rule(
    answers: list[pb.DescribeFilesResponse.FileResult],
) -> None:
    """The model: known if any node knows it (the most alive state), else an error if any, else UNKNOWN."""
    merged = merge_file_answers(answers)
    known = [a.state for a in answers if a.error_code == pb.NONE and a.state != pb.FILE_STATE_UNKNOWN]
    if known:
        assert merged.error_code == pb.NONE and merged.state == min(known)  # the enum is ordered most alive first
        assert merged.has_live_batches == (pb.FILE_STATE_LIVE in known)
    elif any(a.error_code != pb.NONE for a in answers):
        assert merged.error_code != pb.NONE
    else:
        assert (merged.error_code, merged.state) == (pb.NONE, pb.FILE_STATE_UNKNOWN)
    deletable = merged.error_code == pb.NONE and merged.state == pb.FILE_STATE_UNKNOWN
    assert deletable == all(a.error_code == pb.NONE and a.state == pb.FILE_STATE_UNKNOWN for a in answers)


class LaggingFollower(RoutingProxy):
    """A follower (node 7) of every coordinator that lags its leader, the real node: FindBatches answers `code` for
    every partition (one it has not applied yet, an offset past its high watermark)."""

    FOLLOWER = 7

    def __init__(self, node: InProcessNode, code: int) -> None:
        super().__init__(node)
        self.code = code

    def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: Any) -> pb.FindCoordinatorResponse:
        found = self.node.stub.FindCoordinator(request)
        for endpoint in found.coordinators:
            endpoint.replicas.add(node_id=self.FOLLOWER, host="127.0.0.1", port=self.port, in_sync=True)
        return found

    def FindBatches(self, request: pb.FindBatchesRequest, context: Any) -> pb.FindBatchesResponse:
        self.calls.append(("FindBatches", request))
        response = pb.FindBatchesResponse()
        for topic in request.topics:
            answered = response.topics.add(topic_id=topic.topic_id)
            for wanted in topic.partitions:
                answered.partitions.add(partition=wanted.partition, error_code=self.code, log_start_offset=-1,
                                        high_watermark=-1, local_log_start_offset=-1)  # fmt: skip
        return response


@pytest.mark.parametrize("code", [pb.UNKNOWN_TOPIC_OR_PARTITION, pb.OFFSET_OUT_OF_RANGE])
def test_reads_preferring_a_lagging_follower_are_answered_by_the_leader_where_it_lags(
    server: InProcessNode, broker: Broker, code: int
) -> None:
    """KIP-392's follower fetching, never a wrong answer: a partition a follower does not know yet, or an offset past
    its high watermark, is the leader's to answer (a consumer would otherwise reset its offset)."""
    routed, _, owners = two_topics(broker)
    server.stub.CommitFile(commit_request(routed, owners, f"wal/lagging-{code}"))
    follower = LaggingFollower(server, code)
    try:

        async def scenario() -> pb.FindBatchesResponse:
            async with RoutingClient([follower.address], read_node_id=LaggingFollower.FOLLOWER) as client:
                return await client.find_batches(fetch_request(routed, 10**6))

        answer = run(server, scenario())
    finally:
        follower.stop()
    assert found(answer) == found(server.stub.FindBatches(fetch_request(routed, 10**6)))
    assert all(error == pb.NONE and batches for _, error, _, batches in found(answer))
    assert [name for name, _ in follower.calls] == ["FindBatches"], "asked of the follower once, then the leader"


def test_retry_waits_grow_to_a_250_ms_cap_and_are_jittered_down_by_at_most_a_fifth() -> None:
    # A failover ends within a refresh of a peer seeing the death: a 1 s cap left commits a second behind the new
    # leader (issue #37). The jitter only shortens a wait, so the cap stays one.
    calls = RoutingClient("127.0.0.1:1", jitter=random.Random(5))
    backoff = Backoff(calls.backoff_initial_ms, calls.backoff_max_ms)
    waits = [calls.next_wait_ms(backoff) for _ in range(12)]
    bounds = [backoff.wait_ms(failures) for failures in range(1, 13)]
    assert (calls.backoff_initial_ms, calls.backoff_max_ms) == (20, 250)
    assert bounds[-1] == 250
    assert all(0.8 * bound <= wait <= bound for wait, bound in zip(waits, bounds, strict=True)), waits
    assert len({round(w, 3) for w in waits[-6:]}) > 1, "capped waits are all the same: no jitter"
