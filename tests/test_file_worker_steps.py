"""The file workers' bounded steps and pacing (DESIGN §5; issue #38 item 5): after a consolidation job empties
thousands of files, their hand-overs, probes and deletions go in steps of at most
`diskless.coordinator.file.worker.step.files` files, each followed by a pause that keeps the steps to
`diskless.coordinator.file.worker.duty.percent` of the worker's time, and KnownFiles answers in steps too; nothing
is deleted earlier than before and every file still leaves.

A node in the test's process on a clock the test moves (tests/in_process.py), on a local object store; each
worker's calls to the other coordinators and to the store are recorded by wrapping them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from coordinator.files.object_store import DeleteOutcome
from coordinator.files.workers import FileWorker, pause_ms, steps
from coordinator.machine.state import file_reads
from coordinator.machine.view import FileFacts
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from tests.in_process import InProcessNode
from tests.object_stores import ObjectStoreUnderTest
from tests.test_wal_files import FILE_WORKERS, GRACE_MS, INTERVAL_MS, PROBE_DELAY_MS, Cluster

FILES = 5
STEP_FILES = 2


def test_pause_keeps_the_steps_to_their_duty_share() -> None:
    assert pause_ms(50, 20) == 200  # 50 ms of work in every 250
    assert pause_ms(50, 100) == 0
    assert pause_ms(0, 20) == 0  # a step that took no time (a test's clock) pauses for none
    assert [list(s) for s in steps([1, 2, 3, 4, 5], 2)] == [[1, 2], [3, 4], [5]]
    assert list(steps([], 2)) == []


class Recorded:
    """What the node's file workers asked of the other coordinators and of the store: the sizes of their calls.

    The workers of a node share one peer client and one store: wrapping one worker's wraps them all."""

    def __init__(self, worker: FileWorker, on_hand_over: Any = None) -> None:
        self.hand_overs: list[int] = []
        self.probes: list[int] = []
        self.deletions: list[int] = []
        peers, store = worker._peers, worker._store  # the test wraps what the workers call
        hand_over, known_files, delete = peers.hand_over, peers.known_files, store.delete

        async def recorded_hand_over(from_id: int, to_id: int, files: Sequence[FileFacts], timeout_s: float) -> None:
            self.hand_overs.append(len(files))
            if on_hand_over is not None:
                on_hand_over()
            await hand_over(from_id, to_id, files, timeout_s)

        async def recorded_known_files(ids: Sequence[int], keys: Sequence[str], timeout_s: float) -> Any:
            self.probes.append(len(keys))
            return await known_files(ids, keys, timeout_s)

        def recorded_delete(keys: Sequence[str]) -> DeleteOutcome:
            self.deletions.append(len(keys))
            return delete(keys)

        peers.hand_over = recorded_hand_over  # type: ignore[method-assign]
        peers.known_files = recorded_known_files  # type: ignore[method-assign]
        store.delete = recorded_delete  # type: ignore[method-assign]


def _cluster(tmp_path: Path, store: ObjectStoreUnderTest, duty_percent: int) -> InProcessNode:
    settings = {
        **store.settings,
        **FILE_WORKERS,
        "diskless.coordinator.file.worker.step.files": str(STEP_FILES),
        "diskless.coordinator.file.worker.duty.percent": str(duty_percent),
    }
    return InProcessNode(tmp_path / "data", coordinators=4, settings=settings).start()


@pytest.fixture
def node(tmp_path: Path, local_store_under_test: ObjectStoreUnderTest) -> Iterator[InProcessNode]:
    node = _cluster(tmp_path, local_store_under_test, duty_percent=100)
    yield node
    assert node.stop() == 0, "".join(node.output)


def _files(cluster: Cluster, owner_ids: list[int], on: tuple[int, ...]) -> tuple[list[str], bytes, dict[int, int]]:
    topic_id, partitions = cluster.partitions_on(*on)
    keys = [cluster.upload() for _ in range(FILES)]
    for key in keys:
        cluster.commit(key, topic_id, [partitions[c] for c in on], owner_ids)
    return keys, topic_id, partitions


def test_hand_overs_and_deletions_go_in_steps_of_at_most_the_setting(
    node: InProcessNode, local_store_under_test: ObjectStoreUnderTest
) -> None:
    cluster = Cluster(node, local_store_under_test)
    workers = node.file_workers
    assert all(w._peers is workers[0]._peers and w._store is workers[0]._store for w in workers)
    recorded = Recorded(workers[0])
    keys, topic_id, partitions = _files(cluster, [1, 3], on=(1, 3))
    cluster.empty(topic_id, partitions[3])
    cluster.empty(topic_id, partitions[1])
    for key in keys:
        cluster.wait_deleted(key)
    # Five files in one cycle: three calls of at most two files each, where one call carried them all before.
    assert recorded.hand_overs == [2, 2, 1]  # coordinator 1 to 3
    assert recorded.deletions == [2, 2, 1]  # coordinator 3, the last owner


def test_a_probe_asks_about_at_most_a_step_of_files_per_call(
    node: InProcessNode, local_store_under_test: ObjectStoreUnderTest
) -> None:
    cluster = Cluster(node, local_store_under_test)
    taker = Recorded(node.file_workers[3])  # the node's only prober here: 3
    keys, topic_id, partitions = _files(cluster, [0, 3], on=(3,))  # the first owner, 0, never heard of them
    cluster.empty(topic_id, partitions[3])
    cluster.advance(PROBE_DELAY_MS - INTERVAL_MS)
    assert taker.probes == [], "asked before the probe delay"
    assert all(cluster.state(key) == (pb.FILE_STATE_AWAITING_HANDOVER, [3]) for key in keys)
    cluster.run_until(
        lambda: all(cluster.state(key) == (pb.FILE_STATE_AWAITING_DELETION, [3]) for key in keys),
        "coordinator 3 takes the files",
    )
    assert taker.probes == [2, 2, 1]
    cluster.advance(GRACE_MS - INTERVAL_MS)
    assert all(cluster.exists(key) for key in keys), "deleted before the grace period ended"
    for key in keys:
        cluster.wait_deleted(key)


def test_after_a_step_that_took_time_the_worker_pauses_for_its_duty_share(
    tmp_path: Path, local_store_under_test: ObjectStoreUnderTest
) -> None:
    node = _cluster(tmp_path, local_store_under_test, duty_percent=20)
    try:
        cluster = Cluster(node, local_store_under_test)
        step_ms = 100
        # Each hand-over call takes 100 ms of the node's clock: the worker then pauses 400 ms before the next one.
        first = Recorded(node.file_workers[1], on_hand_over=lambda: node.clock.advance(step_ms))
        keys, topic_id, partitions = _files(cluster, [1, 3], on=(1, 3))
        cluster.empty(topic_id, partitions[3])
        cluster.empty(topic_id, partitions[1])
        node.wait_file_workers_asleep()

        def advance(duration_ms: int) -> None:
            # The clock moved by hand: the harness's advance would not expect the steps to move it too.
            node.clock.advance(duration_ms)
            node.clock.wait_idle()

        advance(INTERVAL_MS)
        assert first.hand_overs == [2], "the second step came before its pause"
        advance(4 * step_ms - 1)
        assert first.hand_overs == [2], "the pause was shorter than 4 times the step"
        advance(1)
        assert first.hand_overs == [2, 2]
        advance(4 * step_ms)
        assert first.hand_overs == [2, 2, 1]
        for key in keys:
            cluster.wait_deleted(key)
    finally:
        assert node.stop() == 0, "".join(node.output)


def test_known_files_answers_each_key_whatever_the_step(
    tmp_path: Path, local_store_under_test: ObjectStoreUnderTest
) -> None:
    settings = {**local_store_under_test.settings, "diskless.coordinator.known.files.step.lookups": "3"}
    node = InProcessNode(tmp_path / "data", coordinators=4, settings=settings).start()
    try:
        cluster = Cluster(node, local_store_under_test)
        keys, _, _ = _files(cluster, [1, 2], on=(1, 2))
        unknown = cluster.upload()
        asked = [*keys[:2], unknown, *keys[2:]]
        # Three coordinators asked with three lookups a step: one key per step, six steps.
        answer = cluster.internal().KnownFiles(internal.KnownFilesRequest(coordinator_ids=[0, 1, 2], object_keys=asked))
        assert answer.error_code == pb.NONE, answer
        assert [f.object_key for f in answer.files] == asked
        for found in answer.files:
            expected = [] if found.object_key == unknown else [1, 2]
            assert list(found.coordinator_ids) == expected, found
            assert list(found.states) == [pb.FILE_STATE_LIVE] * len(expected), found
    finally:
        assert node.stop() == 0, "".join(node.output)


def test_the_workers_read_their_lists_off_the_nodes_loop(
    node: InProcessNode, local_store_under_test: ObjectStoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every list a file worker reads is read on a thread where no loop runs, never on the thread of the node's loop
    (where a scan on a slow disk held every coordinator's commits for a second), and the files still leave."""
    on_a_loop: list[bool] = []
    idle_files = file_reads.idle_files

    def recorded_idle_files(*args: Any) -> list[FileFacts]:
        try:
            asyncio.get_running_loop()
            on_a_loop.append(True)
        except RuntimeError:  # no loop runs on this thread
            on_a_loop.append(False)
        return idle_files(*args)

    monkeypatch.setattr(file_reads, "idle_files", recorded_idle_files)
    cluster = Cluster(node, local_store_under_test)
    keys, topic_id, partitions = _files(cluster, [1, 3], on=(1, 3))
    cluster.empty(topic_id, partitions[3])
    cluster.empty(topic_id, partitions[1])
    for key in keys:
        cluster.wait_deleted(key)
    assert on_a_loop and not any(on_a_loop), on_a_loop
