"""ListFileKeys, the orphan scan's known keys: pages of one snapshot, every state of file, bounds and access.

Against nodes in the test's process (real gRPC, real SQLite, a clock the test
moves). What must happen between two pages of one stream (a commit, a reload,
time passing) is done by driving the node's own stream (`Router.list_file_keys`)
page by page on the node's loop: over gRPC the node may have read pages ahead
into the transport's buffers before the test could act.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path

import grpc
import pytest

from coordinator.runtime.shard import ShardState
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from tests.certificates import channel_credentials, issue
from tests.harness import Broker, batch, coordinator_of, delete_records, describe_file
from tests.in_process import InProcessNode, wait_until

COORDINATORS = 4
STATES = (pb.FILE_STATE_LIVE, pb.FILE_STATE_AWAITING_HANDOVER, pb.FILE_STATE_AWAITING_DELETION)


def stream(node: InProcessNode, coordinator_id: int, page_max_keys: int = 0) -> list[pb.ListFileKeysPage]:
    request = pb.ListFileKeysRequest(coordinator_id=coordinator_id, page_max_keys=page_max_keys)
    return list(node.stub.ListFileKeys(request, timeout=30))


def keys_of(pages: list[pb.ListFileKeysPage]) -> dict[str, int]:
    """The stream's keys with their states; fails on a key streamed twice."""
    pairs = [(key, state) for page in pages for key, state in zip(page.object_keys, page.states, strict=True)]
    assert len({key for key, _ in pairs}) == len(pairs), "a key in two pages"
    return dict(pairs)


def commit_one(broker: Broker, topic: bytes, owner_ids: list[int] | None = None) -> str:
    key = f"wal/{uuid.uuid4().hex}"
    assert broker.commit([batch(topic, 0)], key, owner_ids=owner_ids).batches[0].error_code == pb.NONE
    return key


class NodeStream:
    """The node's own stream of one coordinator's keys, a page at a time on the node's loop."""

    def __init__(self, node: InProcessNode, coordinator_id: int, page_max_keys: int) -> None:
        self._node = node
        request = pb.ListFileKeysRequest(coordinator_id=coordinator_id, page_max_keys=page_max_keys)
        self._pages: AsyncGenerator[pb.ListFileKeysPage, None] = node.node.router.list_file_keys(request)

    def next_page(self) -> pb.ListFileKeysPage:
        async def step() -> pb.ListFileKeysPage:
            return await anext(self._pages)

        return self._node.loop.run(step())

    def rest(self) -> list[pb.ListFileKeysPage]:
        pages = [self.next_page()]
        while not pages[-1].last:
            pages.append(self.next_page())
        return pages

    def close(self) -> None:
        self._node.loop.run(self._pages.aclose())


def test_pages_hold_every_file_in_every_state_once_as_describe_files_sees_them(fresh_node: InProcessNode) -> None:
    node = fresh_node.start()
    broker = Broker(node.stub, COORDINATORS)
    live_topic, gone_topic = broker.create_topic("live", 1), broker.create_topic("gone", 1)
    owner = coordinator_of(node.stub, gone_topic, 0)
    live = [commit_one(broker, live_topic) for _ in range(7)]
    handover = commit_one(broker, gone_topic, owner_ids=[owner, (owner + 1) % COORDINATORS])
    deletion = commit_one(broker, gone_topic, owner_ids=[owner])
    assert delete_records(node.stub, gone_topic, 0, -1).error_code == pb.NONE
    streamed = {}
    for coordinator_id in range(COORDINATORS):
        pages = stream(node, coordinator_id, page_max_keys=2)
        assert all(p.error_code == pb.NONE and p.coordinator_id == coordinator_id for p in pages)
        assert [p.last for p in pages] == [False] * (len(pages) - 1) + [True]
        assert all(len(p.object_keys) == 2 for p in pages[:-1]) and len(pages[-1].object_keys) <= 2
        assert len({(p.leader_epoch, p.applied_offset) for p in pages}) == 1, "pages of more than one snapshot"
        streamed[coordinator_id] = keys_of(pages)
        assert pages[-1].key_count == len(streamed[coordinator_id])
    committed = [*live, handover, deletion]
    known = {key for keys in streamed.values() for key in keys}
    assert known == set(committed)
    live_holder = coordinator_of(node.stub, live_topic, 0)
    assert set(live) <= set(streamed[live_holder])  # 7 keys or more: 4 pages of 2 at least, across boundaries
    for key in committed:  # each coordinator streams the key in the state DescribeFiles gives it
        described = describe_file(node.stub, key)
        holders = sorted(c for c, keys in streamed.items() if key in keys)
        assert holders == sorted(described.coordinator_ids), key
        assert min(streamed[c][key] for c in holders) == described.state, key
    assert streamed[owner][handover] == pb.FILE_STATE_AWAITING_HANDOVER
    assert streamed[owner][deletion] == pb.FILE_STATE_AWAITING_DELETION
    assert {state for keys in streamed.values() for state in keys.values()} == set(STATES)


def test_one_stream_is_one_snapshot_whatever_is_committed_meanwhile(fresh_node: InProcessNode) -> None:
    node = fresh_node.start()
    broker = Broker(node.stub, COORDINATORS)
    topic = broker.create_topic("snapshot", 1)
    coordinator_id = coordinator_of(node.stub, topic, 0)
    before = {commit_one(broker, topic) for _ in range(3)}
    pages = NodeStream(node, coordinator_id, page_max_keys=1)
    first = pages.next_page()
    late = commit_one(broker, topic)  # applied while the stream is between pages
    streamed = [first, *pages.rest()]
    assert set(keys_of(streamed)) == before and late not in keys_of(streamed)
    again = stream(node, coordinator_id)
    assert set(keys_of(again)) == before | {late} and again[0].applied_offset > first.applied_offset


def test_requests_the_node_cannot_answer_are_refused_naming_the_rule(server: InProcessNode) -> None:
    for request, rule in [
        (pb.ListFileKeysRequest(coordinator_id=0, page_max_keys=-1), "page_max_keys must be 0..10000"),
        (pb.ListFileKeysRequest(coordinator_id=0, page_max_keys=10001), "diskless.coordinator.file.keys.page.max"),
        (pb.ListFileKeysRequest(coordinator_id=-1), "coordinator_id must be 0..3"),
        (pb.ListFileKeysRequest(coordinator_id=COORDINATORS), "coordinator_id must be 0..3"),
    ]:
        with pytest.raises(grpc.RpcError) as refused:
            list(server.stub.ListFileKeys(request, timeout=10))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
        assert rule in (refused.value.details() or ""), refused.value.details()
    assert stream(server, 0, page_max_keys=10000)[-1].last  # the bound itself is fine


def test_streams_past_their_bound_are_refused_and_a_closed_one_frees_its_place(tmp_path: Path) -> None:
    settings = {
        "diskless.coordinator.file.keys.streams.max": "1",
        "diskless.coordinator.file.keys.stream.max.ms": "1000",
    }
    node = InProcessNode(tmp_path / "data", COORDINATORS, settings).start()
    try:
        broker = Broker(node.stub, COORDINATORS)
        topic = broker.create_topic("bounded", 1)
        coordinator_id = coordinator_of(node.stub, topic, 0)
        for _ in range(3):
            commit_one(broker, topic)
        open_stream = NodeStream(node, coordinator_id, page_max_keys=1)
        assert len(open_stream.next_page().object_keys) == 1
        with pytest.raises(grpc.RpcError) as refused:
            stream(node, coordinator_id)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "diskless.coordinator.file.keys.streams.max=1" in (refused.value.details() or "")
        open_stream.close()
        assert len(keys_of(stream(node, coordinator_id))) == 3

        slow = NodeStream(node, coordinator_id, page_max_keys=1)
        slow.next_page()
        node.advance(1001)  # the stream has now run past diskless.coordinator.file.keys.stream.max.ms
        ended = slow.next_page()
        assert (ended.error_code, ended.last) == (pb.REQUEST_TIMED_OUT, True), ended
        assert "diskless.coordinator.file.keys.stream.max.ms=1000" in ended.error_message
        slow.close()
        assert stream(node, coordinator_id)[-1].last
    finally:
        node.stop()


def test_a_coordinator_reloading_under_a_stream_ends_it_with_an_error(fresh_node: InProcessNode) -> None:
    node = fresh_node.start()
    broker = Broker(node.stub, COORDINATORS)
    topic = broker.create_topic("reloaded", 1)
    coordinator_id = coordinator_of(node.stub, topic, 0)
    keys = {commit_one(broker, topic) for _ in range(3)}
    pages = NodeStream(node, coordinator_id, page_max_keys=1)
    pages.next_page()
    shard = node.node.shards[coordinator_id]
    node.loop.call(lambda: shard.report_damage(RuntimeError("injected: damaged")))  # closes its files, rebuilds
    wait_until(lambda: node.loop.call(lambda: shard.state) is ShardState.ACTIVE, "the coordinator is back")
    ended = pages.next_page()
    assert ended.last and ended.error_code in (pb.NOT_COORDINATOR, pb.COORDINATOR_NOT_AVAILABLE), ended
    pages.close()
    assert set(keys_of(stream(node, coordinator_id))) == keys


@pytest.fixture
def secured_node(tmp_path: Path) -> Iterator[tuple[InProcessNode, grpc.ChannelCredentials]]:
    """A node serving mutual TLS with an ACL that grants `operator` DESCRIBE; `stranger`'s credentials beside it."""
    ca = issue("keys-test-ca", ca=True)
    certificate, key = issue("localhost", ca, server=True).write(tmp_path, "node")
    (tmp_path / "ca.crt").write_bytes(ca.certificate_pem)
    (tmp_path / "acl").write_text("User:operator DESCRIBE\n")
    tls = {
        "diskless.acl.file": str(tmp_path / "acl"),
        "diskless.ssl.certificate.location": str(certificate),
        "diskless.ssl.key.location": str(key),
        "diskless.ssl.ca.location": str(tmp_path / "ca.crt"),
        "diskless.ssl.client.auth": "required",
    }
    node = InProcessNode(
        tmp_path / "data", COORDINATORS, tls, credentials=channel_credentials(ca, issue("operator", ca))
    ).start()
    yield node, channel_credentials(ca, issue("stranger", ca))
    node.stop()


def test_list_file_keys_needs_describe(secured_node: tuple[InProcessNode, grpc.ChannelCredentials]) -> None:
    node, stranger = secured_node
    assert stream(node, 0)[-1].last  # the operator holds DESCRIBE
    with grpc.secure_channel(node.address, stranger) as channel, pytest.raises(grpc.RpcError) as denied:
        list(pb_grpc.DisklessCoordinatorStub(channel).ListFileKeys(pb.ListFileKeysRequest(), timeout=10))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    details = denied.value.details() or ""
    assert "User:stranger" in details and "DESCRIBE" in details and "ListFileKeys" in details, details
