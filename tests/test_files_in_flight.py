"""DescribeFiles sees commits in flight (DESIGN §5, issue #29), through the real gRPC server of an in-process node.

A commit is held where its group is about to be written to the metadata log (the fault point `log.append`, held
on the coordinator's writer thread), so it is checked and not yet durable; a second commit to the same coordinator
waits in its queue, not yet checked. Meanwhile neither file is FILE_STATE_UNKNOWN: a broker whose commit timed out
and that cleans up what it thinks is unknown must not delete a file whose commit then lands. A commit whose write
fails is unknown again once the coordinator has loaded from its log.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import final

import grpc
import pytest

from protos import coordinator_pb2 as pb
from snapshot import fault_points
from tests.harness import Broker, batch, coordinator_of, describe_file, fetch, topic_name
from tests.in_process import WAIT_S, InProcessNode, wait_until


@final
class LogAppends:
    """The fault point `log.append` as a valve: while held, every group waits there with its operations in flight."""

    def __init__(self) -> None:
        self._let_go = threading.Event()
        self._let_go.set()
        self.waiting = threading.Event()
        self.fail_next = False

    def __call__(self, step: str) -> None:
        if step != "log.append":
            return
        if self.fail_next:
            self.fail_next = False
            raise OSError(errno.EIO, "injected: the metadata log's write failed")
        if not self._let_go.is_set():
            self.waiting.set()
            assert self._let_go.wait(WAIT_S), "the test never let the held append go"

    def hold(self) -> None:
        self.waiting.clear()
        self._let_go.clear()

    def let_go(self) -> None:
        self._let_go.set()


@pytest.fixture
def appends() -> Iterator[LogAppends]:
    valve = LogAppends()
    fault_points.install(valve)
    try:
        yield valve
    finally:
        valve.let_go()
        fault_points.install(None)


@pytest.fixture
def calls() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def _commit(broker: Broker, topic_id: bytes, key: str, timeout: float = WAIT_S) -> pb.CommitFileResponse:
    return broker.commit([batch(topic_id, 0)], object_key=key, timeout=timeout)


def _started(node: InProcessNode, settings: dict[str, str] | None = None) -> tuple[Broker, bytes]:
    node.settings.update(settings or {})
    node.start()
    broker = Broker(node.stub, node.coordinators)
    return broker, broker.create_topic(topic_name("in-flight"), 1)


def _state(node: InProcessNode, key: str) -> tuple[int, int, bool, list[int]]:
    described = describe_file(node.stub, key)
    return described.error_code, described.state, described.has_live_batches, list(described.coordinator_ids)


def test_a_commit_checked_or_still_queued_is_known_until_it_lands_then_committed(
    fresh_node: InProcessNode, appends: LogAppends, calls: ThreadPoolExecutor
) -> None:
    # One operation at a time: the second commit stays queued, unchecked, while the first one's write is held.
    broker, topic_id = _started(fresh_node, {"diskless.coordinator.pipeline.enable": "false"})
    owner = coordinator_of(fresh_node.stub, topic_id, 0)
    appends.hold()
    checked: Future[pb.CommitFileResponse] = calls.submit(_commit, broker, topic_id, "wal/in-flight/checked")
    assert appends.waiting.wait(WAIT_S), "the commit never reached the log's append"
    queued: Future[pb.CommitFileResponse] = calls.submit(_commit, broker, topic_id, "wal/in-flight/queued")
    wait_until(
        lambda: fresh_node.loop.call(lambda: fresh_node.node.shards[owner].statistics().queued_operations) == 1,
        "the second commit waits in the coordinator's queue",
    )
    assert not checked.done() and not queued.done()
    # Known while in flight: described as it will be once applied (a queued commit brings batches: LIVE).
    assert _state(fresh_node, "wal/in-flight/checked") == (pb.NONE, pb.FILE_STATE_LIVE, True, [owner])
    assert _state(fresh_node, "wal/in-flight/queued") == (pb.NONE, pb.FILE_STATE_LIVE, True, [owner])
    assert _state(fresh_node, "wal/in-flight/never") == (pb.NONE, pb.FILE_STATE_UNKNOWN, False, [])
    appends.let_go()
    assert [b.error_code for b in checked.result(WAIT_S).batches] == [pb.NONE]
    assert [b.error_code for b in queued.result(WAIT_S).batches] == [pb.NONE]
    for key in ("wal/in-flight/checked", "wal/in-flight/queued"):
        assert _state(fresh_node, key) == (pb.NONE, pb.FILE_STATE_LIVE, True, [owner])
    # Committed: read from the state now, a new node's view of the same log says the same.
    fresh_node.restart()
    assert _state(fresh_node, "wal/in-flight/queued") == (pb.NONE, pb.FILE_STATE_LIVE, True, [owner])


def test_a_brokers_clean_up_racing_its_own_timed_out_commit_keeps_the_file_that_lands(
    fresh_node: InProcessNode, appends: LogAppends, calls: ThreadPoolExecutor, tmp_path: Path
) -> None:
    broker, topic_id = _started(fresh_node)
    uploaded = tmp_path / "objects" / "wal" / "raced"
    uploaded.parent.mkdir(parents=True)
    uploaded.write_bytes(b"x" * 100)  # the broker uploaded its WAL file, then commits it
    appends.hold()
    with pytest.raises(grpc.RpcError) as timed_out:
        _commit(broker, topic_id, "wal/raced", timeout=0.5)
    assert timed_out.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    # The broker's clean-up: a file whose commit failed may go only once the coordinators say they do not know it.
    described = describe_file(fresh_node.stub, "wal/raced")
    if described.error_code == pb.NONE and described.state == pb.FILE_STATE_UNKNOWN:
        uploaded.unlink()
    appends.let_go()
    wait_until(lambda: fetch(fresh_node.stub, topic_id, 0, 0).batches != [], "the timed-out commit lands")
    assert [b.object_key for b in fetch(fresh_node.stub, topic_id, 0, 0).batches] == ["wal/raced"]
    assert uploaded.exists(), "a consumer is sent to a file its broker deleted"
    assert described.error_code == pb.NONE and described.state == pb.FILE_STATE_LIVE, described


def test_a_commit_whose_write_fails_is_unknown_again_once_the_coordinator_has_loaded(
    fresh_node: InProcessNode, appends: LogAppends
) -> None:
    broker, topic_id = _started(fresh_node)
    owner = coordinator_of(fresh_node.stub, topic_id, 0)
    appends.fail_next = True
    failed = _commit(broker, topic_id, "wal/failed").batches[0]
    assert failed.error_code in (pb.COORDINATOR_NOT_AVAILABLE, pb.NOT_COORDINATOR), failed
    # Until it has loaded again the coordinator cannot say: a retriable error, never UNKNOWN.
    wait_until(lambda: describe_file(fresh_node.stub, "wal/failed").error_code == pb.NONE, "the coordinator loads")
    assert _state(fresh_node, "wal/failed") == (pb.NONE, pb.FILE_STATE_UNKNOWN, False, [])
    assert [b.error_code for b in _commit(broker, topic_id, "wal/failed").batches] == [pb.NONE]
    assert _state(fresh_node, "wal/failed") == (pb.NONE, pb.FILE_STATE_LIVE, True, [owner])
