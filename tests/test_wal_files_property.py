"""Property test of WAL-file deletion (invariant I4) over random histories against a real node.

Histories mix commits to several owners (some owners never hear of the file:
a commit that reached only some of them), DeleteRecords, DeleteTopics,
restarts (SIGTERM and kill -9), object-store outages and pauses that let the
file workers run. A small model tracks each file's live batches from the
answers. After every step:
- no object is gone while a batch in it is live (I4);
- no object is gone before the grace period after its last live batch went;
and at the end of each history, with the store back: every file no
coordinator needs is deleted and has left every coordinator (no leaks),
and every file with live batches is still there.

Sizes: DISKLESS_FILES_EXAMPLES (default 8) and DISKLESS_FILES_STEPS (default 14); each example starts
its own node (~1 s) and ends by waiting for the deletions (~1-2 s). Derandomized when CI is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.object_store import StoreConfig, new_wal_key, open_object_store
from protos import coordinator_pb2 as pb
from tests.harness import Broker, ServerProcess, batch, delete_records, describe_file, fetch, topic_name
from tests.object_stores import storage_settings

COORDINATORS = 3
GRACE_MS = 300
SETTINGS = {
    "diskless.coordinator.file.worker.interval.ms": "50",
    "diskless.coordinator.file.deletion.grace.period.ms": str(GRACE_MS),
    "diskless.coordinator.file.handover.probe.delay.ms": "300",
    "diskless.coordinator.file.retry.backoff.ms": "50",
    "diskless.coordinator.file.retry.backoff.max.ms": "200",
}
EXAMPLES = int(os.environ.get("DISKLESS_FILES_EXAMPLES", "8"))
STEPS = int(os.environ.get("DISKLESS_FILES_STEPS", "14"))
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SETTLE_S = 20  # the end of a history: how long the deletions may take


@dataclass(slots=True)
class WalFile:
    key: str
    live: dict[tuple[bytes, int], int] = field(default_factory=dict)  # (topic, partition) -> live batches
    idle_since: float | None = None  # monotonic time of the call that removed its last live batch

    @property
    def live_batches(self) -> int:
        return sum(self.live.values())


class WalFileHistories(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="wal-files-"))
        root = self.dir / "objects"
        root.mkdir()
        self.root = root
        self.away = self.dir / "objects.away"
        self.store = open_object_store(StoreConfig(backend="local", local_root=str(root)))
        self.server = ServerProcess(
            self.dir / "data",
            coordinators=COORDINATORS,
            settings={**storage_settings(self.store.config), **SETTINGS},
        ).start()
        self.broker = Broker(self.server.stub, COORDINATORS)
        self.files: list[WalFile] = []
        self.topics: list[bytes] = [self._new_topic(), self._new_topic()]
        self.outage = False

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
        # Owners: every coordinator with batches, plus maybe others that never hear of the file, in any order.
        extra = data.draw(st.sets(st.sampled_from(sorted(set(range(COORDINATORS)) - with_batches) or [None])))
        owners = data.draw(st.permutations(sorted(with_batches | {e for e in extra if e is not None})))
        key = new_wal_key()
        # The broker uploads first (into the moved-away root during an outage: it has its own path to the store).
        uploaded = (self.away if self.outage else self.root) / key
        uploaded.parent.mkdir(parents=True, exist_ok=True)
        uploaded.write_bytes(b"w" * 100 * len(chosen))
        batches = [batch(topic_id, p, byte_offset=i * 100) for i, (topic_id, p) in enumerate(chosen)]
        response = self.broker.commit(batches, object_key=key, owner_ids=owners, file_size=100 * len(chosen))
        assert all(b.error_code == pb.NONE for b in response.batches), response
        self.files.append(WalFile(key, {(topic_id, p): 1 for topic_id, p in chosen}))

    def _forget(self, gone: set[tuple[bytes, int]], since: float) -> None:
        for wal_file in self.files:
            if wal_file.live_batches == 0:
                continue
            for place in gone & wal_file.live.keys():
                wal_file.live[place] = 0
            if wal_file.live_batches == 0:
                wal_file.idle_since = since

    @rule(topic=st.integers(0, 1), partition=st.integers(0, COORDINATORS - 1))
    def delete_records(self, topic: int, partition: int) -> None:
        topic_id = self.topics[topic]
        end = fetch(self.server.stub, topic_id, partition, 0).high_watermark
        sent = time.monotonic()
        result = delete_records(self.server.stub, topic_id, partition, end)
        assert result.error_code == pb.NONE, result
        self._forget({(topic_id, partition)}, sent)

    @rule(topic=st.integers(0, 1))
    def delete_topic(self, topic: int) -> None:
        topic_id = self.topics[topic]
        sent = time.monotonic()
        result = self.server.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[topic_id]))
        assert result.topics[0].error_code == pb.NONE, result
        self._forget({(topic_id, p) for p in range(COORDINATORS)}, sent)
        self.topics[topic] = self._new_topic()

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        self.server.restart(kill=kill)
        self.broker = Broker(self.server.stub, COORDINATORS)

    @rule()
    def toggle_outage(self) -> None:
        if self.outage:
            self.away.rename(self.root)
        else:
            self.root.rename(self.away)
        self.outage = not self.outage

    @rule(pause_ms=st.sampled_from([50, 200, 600]))
    def pause(self, pause_ms: int) -> None:
        time.sleep(pause_ms / 1000)

    # ------------------------------------------------------------------ I4, after every step

    @invariant()
    def no_object_is_deleted_too_early(self) -> None:
        now = time.monotonic()
        for wal_file in self.files:
            if wal_file.live_batches > 0:
                assert self._exists(wal_file.key), f"{wal_file.key} deleted with {wal_file.live} live batches"
            elif wal_file.idle_since is not None and now < wal_file.idle_since + GRACE_MS / 1000:
                assert self._exists(wal_file.key), f"{wal_file.key} deleted before its grace period ended"

    def teardown(self) -> None:
        try:
            if self.outage:
                self.toggle_outage()
            deadline = time.monotonic() + SETTLE_S
            for wal_file in self.files:
                if wal_file.live_batches > 0:
                    assert self._exists(wal_file.key)
                    assert describe_file(self.server.stub, wal_file.key).state == pb.FILE_STATE_LIVE
                    continue
                while self._exists(wal_file.key) or describe_file(self.server.stub, wal_file.key).coordinator_ids:
                    assert time.monotonic() < deadline, (
                        f"{wal_file.key} leaks: no live batch since {time.monotonic() - wal_file.idle_since:.1f} s, "
                        f"yet {describe_file(self.server.stub, wal_file.key)} and exists={self._exists(wal_file.key)}"
                    )
                    time.sleep(0.05)
            assert self.server.stop() == 0, "".join(self.server.output)
        finally:
            if self.server.process is not None and self.server.process.poll() is None:
                self.server.kill()
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)


WalFileHistories.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=CI,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_wal_file_histories = WalFileHistories.TestCase
