"""Property test of WAL-file deletion (invariant I4) over random histories against a real node.

Histories mix commits to several owners (some owners never hear of the file:
a commit that reached only some of them), DeleteRecords, DeleteTopics,
restarts, object-store outages and pauses that let the file workers run. A
small model tracks each file's live batches from the answers. After every step:
- no object is gone while a batch in it is live (I4);
- no object is gone before the grace period after its last live batch went;
and at the end of each history, with the store back: every file no
coordinator needs is deleted and has left every coordinator (no leaks),
and every file with live batches is still there.

Two machines share the rules. `test_wal_file_histories` runs the node in the test's process on a
clock the pauses move (tests/in_process.py): "not before the grace period" is exact in clock time,
and the end of a history moves the clock until every deletion is done. Its restarts drain and close
the node. `test_wal_file_histories_with_kills` runs `diskless serve` on real time, restarted by
SIGTERM or kill -9, for fewer examples.

Sizes: DISKLESS_FILES_EXAMPLES (in process, default 8; 3 in the fast lane, tests/lanes.py),
DISKLESS_FILES_PROCESS_EXAMPLES (with kills, default 2) and DISKLESS_FILES_STEPS (default 14).
Derandomized when CI is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import final

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.files.object_store import StoreConfig, new_wal_key, open_object_store
from protos import coordinator_pb2 as pb
from tests.harness import Broker, ServerProcess, batch, delete_records, describe_file, fetch, topic_name
from tests.in_process import InProcessNode
from tests.lanes import sized
from tests.object_stores import storage_settings

COORDINATORS = 3
# The in-process node's clock: the workers run once a second of it.
INTERVAL_MS = 1000
GRACE_MS = 6 * INTERVAL_MS
SETTINGS = {
    "diskless.coordinator.file.worker.interval.ms": str(INTERVAL_MS),
    "diskless.coordinator.file.deletion.grace.period.ms": str(GRACE_MS),
    "diskless.coordinator.file.handover.probe.delay.ms": str(GRACE_MS),
    "diskless.coordinator.file.retry.backoff.ms": str(INTERVAL_MS),
    "diskless.coordinator.file.retry.backoff.max.ms": str(4 * INTERVAL_MS),
}
PAUSES_MS = [INTERVAL_MS, 4 * INTERVAL_MS, 12 * INTERVAL_MS]
SETTLE_MS = 120 * INTERVAL_MS  # the end of a history: how much clock time the deletions may take
# The same on real time, for the `diskless serve` process.
REAL_TIME_GRACE_MS = 300
REAL_TIME_SETTINGS = {
    "diskless.coordinator.file.worker.interval.ms": "50",
    "diskless.coordinator.file.deletion.grace.period.ms": str(REAL_TIME_GRACE_MS),
    "diskless.coordinator.file.handover.probe.delay.ms": "300",
    "diskless.coordinator.file.retry.backoff.ms": "50",
    "diskless.coordinator.file.retry.backoff.max.ms": "200",
}
REAL_TIME_PAUSES_MS = [50, 200, 600]
SETTLE_S = 20
EXAMPLES = int(os.environ.get("DISKLESS_FILES_EXAMPLES", str(sized(8, 3))))
PROCESS_EXAMPLES = int(os.environ.get("DISKLESS_FILES_PROCESS_EXAMPLES", "2"))
STEPS = int(os.environ.get("DISKLESS_FILES_STEPS", "14"))
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@dataclass(slots=True)
class WalFile:
    key: str
    live: dict[tuple[bytes, int], int] = field(default_factory=dict)  # (topic, partition) -> live batches
    idle_since_ms: int | None = None  # the clock's time at the call that removed its last live batch

    @property
    def live_batches(self) -> int:
        return sum(self.live.values())


class WalFileHistories(RuleBasedStateMachine):
    """The rules and I4; a subclass says where the node runs, what its clock is and how time passes."""

    grace_ms = GRACE_MS

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="wal-files-"))
        root = self.dir / "objects"
        root.mkdir()
        self.root = root
        self.away = self.dir / "objects.away"
        self.store = open_object_store(StoreConfig(backend="local", local_root=str(root)))
        self.server = self.new_node(self.dir / "data", storage_settings(self.store.config))
        self.server.start()
        self.broker = Broker(self.server.stub, COORDINATORS)
        self.files: list[WalFile] = []
        self.topics: list[bytes] = [self._new_topic(), self._new_topic()]
        self.outage = False

    def new_node(self, data_dir: Path, storage: dict[str, str]) -> InProcessNode | ServerProcess:
        raise NotImplementedError

    def now_ms(self) -> int:
        raise NotImplementedError

    def settle(self, done: Callable[[], bool], what: Callable[[], str]) -> None:
        """Lets the workers run until `done`; fails saying `what` when it takes too long."""
        raise NotImplementedError

    def running(self) -> bool:
        raise NotImplementedError

    def _new_topic(self) -> bytes:
        return self.broker.create_topic(topic_name(), COORDINATORS)

    def _exists(self, key: str) -> bool:
        # During an outage the objects are still there, in the moved-away root.
        return (self.away / key).exists() if self.outage else (self.root / key).exists()

    def _coordinator_of(self, topic_id: bytes, partition: int) -> int:
        found = self.server.stub.FindCoordinator(
            pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=topic_id, partitions=[partition])]
            )
        )
        return found.topics[0].partitions[0].coordinator_id

    # ------------------------------------------------------------------ rules

    @rule(
        data=st.data(),
        partitions=st.lists(st.tuples(st.integers(0, 1), st.integers(0, COORDINATORS - 1)), min_size=1, max_size=4),
    )
    def commit(self, data: st.DataObject, partitions: list[tuple[int, int]]) -> None:
        chosen = sorted({(self.topics[t], p) for t, p in partitions})
        with_batches = {self._coordinator_of(topic_id, p) for topic_id, p in chosen}
        # Owners: every coordinator with batches, plus maybe others that never hear of the file, in any order. Drawn
        # in a shape that does not depend on the node's answers (which coordinators hold the partitions), so that
        # hypothesis replays the same draws whatever the node placed where.
        extra = data.draw(st.lists(st.booleans(), min_size=COORDINATORS, max_size=COORDINATORS))
        order = data.draw(st.permutations(range(COORDINATORS)))
        owners = [c for c in order if c in with_batches or extra[c]]
        key = new_wal_key()
        # The broker uploads first (into the moved-away root during an outage: it has its own path to the store).
        uploaded = (self.away if self.outage else self.root) / key
        uploaded.parent.mkdir(parents=True, exist_ok=True)
        uploaded.write_bytes(b"w" * 100 * len(chosen))
        batches = [batch(topic_id, p, byte_offset=i * 100) for i, (topic_id, p) in enumerate(chosen)]
        response = self.broker.commit(batches, object_key=key, owner_ids=owners, file_size=100 * len(chosen))
        assert all(b.error_code == pb.NONE for b in response.batches), response
        self.files.append(WalFile(key, {(topic_id, p): 1 for topic_id, p in chosen}))

    def _forget(self, gone: set[tuple[bytes, int]], since_ms: int) -> None:
        for wal_file in self.files:
            if wal_file.live_batches == 0:
                continue
            for place in gone & wal_file.live.keys():
                wal_file.live[place] = 0
            if wal_file.live_batches == 0:
                wal_file.idle_since_ms = since_ms

    @rule(topic=st.integers(0, 1), partition=st.integers(0, COORDINATORS - 1))
    def delete_records(self, topic: int, partition: int) -> None:
        topic_id = self.topics[topic]
        end = fetch(self.server.stub, topic_id, partition, 0).high_watermark
        sent = self.now_ms()
        result = delete_records(self.server.stub, topic_id, partition, end)
        assert result.error_code == pb.NONE, result
        self._forget({(topic_id, partition)}, sent)

    @rule(topic=st.integers(0, 1))
    def delete_topic(self, topic: int) -> None:
        topic_id = self.topics[topic]
        sent = self.now_ms()
        result = self.server.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[topic_id]))
        assert result.topics[0].error_code == pb.NONE, result
        self._forget({(topic_id, p) for p in range(COORDINATORS)}, sent)
        self.topics[topic] = self._new_topic()

    @rule()
    def toggle_outage(self) -> None:
        if self.outage:
            self.away.rename(self.root)
        else:
            self.root.rename(self.away)
        self.outage = not self.outage

    # ------------------------------------------------------------------ I4, after every step

    @invariant()
    def no_object_is_deleted_too_early(self) -> None:
        now_ms = self.now_ms()
        for wal_file in self.files:
            if wal_file.live_batches > 0:
                assert self._exists(wal_file.key), f"{wal_file.key} deleted with {wal_file.live} live batches"
            elif wal_file.idle_since_ms is not None and now_ms < wal_file.idle_since_ms + self.grace_ms:
                assert self._exists(wal_file.key), f"{wal_file.key} deleted before its grace period ended"

    def teardown(self) -> None:
        try:
            if self.outage:
                self.toggle_outage()
            for wal_file in self.files:
                if wal_file.live_batches > 0:
                    assert self._exists(wal_file.key)
                    assert describe_file(self.server.stub, wal_file.key).state == pb.FILE_STATE_LIVE
                    continue
                key, idle_since_ms = wal_file.key, wal_file.idle_since_ms
                assert idle_since_ms is not None
                self.settle(
                    lambda key=key: not self._exists(key) and not describe_file(self.server.stub, key).coordinator_ids,
                    lambda key=key, idle_since_ms=idle_since_ms: (
                        f"{key} leaks: no live batch for {self.now_ms() - idle_since_ms} ms, "
                        f"yet {describe_file(self.server.stub, key)} and exists={self._exists(key)}"
                    ),
                )
            assert self.server.stop() == 0, "".join(self.server.output)
        finally:
            if self.running():
                self.abandon()
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def abandon(self) -> None:
        raise NotImplementedError


@final
class InProcessHistories(WalFileHistories):
    """The node in this process; pauses move its clock, restarts drain and close it."""

    server: InProcessNode

    def new_node(self, data_dir: Path, storage: dict[str, str]) -> InProcessNode:
        return InProcessNode(data_dir, coordinators=COORDINATORS, settings={**storage, **SETTINGS})

    def now_ms(self) -> int:
        return self.server.clock.now_ms()

    def running(self) -> bool:
        return self.server.is_running()

    def abandon(self) -> None:
        self.server.stop()

    def settle(self, done: Callable[[], bool], what: Callable[[], str]) -> None:
        started_ms = self.now_ms()
        while not done():
            assert self.now_ms() - started_ms < SETTLE_MS, what()
            self.server.advance(INTERVAL_MS)

    @rule()
    def restart(self) -> None:
        self.server.restart()
        self.broker = Broker(self.server.stub, COORDINATORS)

    @rule(pause_ms=st.sampled_from(PAUSES_MS))
    def pause(self, pause_ms: int) -> None:
        self.server.advance(pause_ms)


@final
class ProcessHistories(WalFileHistories):
    """A `diskless serve` process on real time, restarted by SIGTERM or kill -9."""

    server: ServerProcess
    grace_ms = REAL_TIME_GRACE_MS

    def new_node(self, data_dir: Path, storage: dict[str, str]) -> ServerProcess:
        return ServerProcess(data_dir, coordinators=COORDINATORS, settings={**storage, **REAL_TIME_SETTINGS})

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def running(self) -> bool:
        return self.server.process is not None and self.server.process.poll() is None

    def abandon(self) -> None:
        self.server.kill()

    def settle(self, done: Callable[[], bool], what: Callable[[], str]) -> None:
        deadline = time.monotonic() + SETTLE_S
        while not done():
            assert time.monotonic() < deadline, what()
            time.sleep(0.05)

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        self.server.restart(kill=kill)
        self.broker = Broker(self.server.stub, COORDINATORS)

    @rule(pause_ms=st.sampled_from(REAL_TIME_PAUSES_MS))
    def pause(self, pause_ms: int) -> None:
        time.sleep(pause_ms / 1000)  # real time for the process's workers to run (I4 is checked after it)


def history_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=STEPS,
        deadline=None,
        derandomize=CI,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


InProcessHistories.TestCase.settings = history_settings(EXAMPLES)
test_wal_file_histories = InProcessHistories.TestCase
ProcessHistories.TestCase.settings = history_settings(PROCESS_EXAMPLES)
test_wal_file_histories_with_kills = pytest.mark.slow(ProcessHistories.TestCase)  # `diskless serve` with kill -9
