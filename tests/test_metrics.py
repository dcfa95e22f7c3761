"""The Prometheus endpoint counts what happened, and logs come as JSON when asked (issue 7)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from protos import admin_pb2 as admin_pb
from protos import admin_pb2_grpc as admin_grpc
from protos import coordinator_pb2 as pb
from tests.harness import Broker, ServerProcess, batch, laid_out

pytestmark = pytest.mark.slow

METRICS_LINE = re.compile(r"metrics at http://([\d.]+):(\d+)/metrics")


def scrape(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    deadline = time.monotonic() + 10
    while not (match := next((m for line in server.output if (m := METRICS_LINE.search(line))), None)):
        assert time.monotonic() < deadline, "no metrics line in the log"
        time.sleep(0.05)
    with urllib.request.urlopen(f"http://{match.group(1)}:{match.group(2)}/metrics", timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and all((k, x) in ls for k, x in labels.items()))


def test_metrics_count_what_the_load_did(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", settings={"diskless.metrics.listen": "127.0.0.1:0"}).start()
    try:
        broker = Broker(server.stub, 4)
        topic = broker.create_topic("metered", 8)
        accepted = 0
        commits = 0
        lock = threading.Lock()

        def load(worker: int) -> None:
            nonlocal accepted, commits
            for _ in range(10):
                batches = laid_out([batch(topic, (worker + i) % 8, size=100 + i) for i in range(5)])
                response = broker.commit(batches)
                assert all(b.error_code == pb.NONE for b in response.batches)
                with lock:
                    accepted += len(batches)
                    commits += 1

        threads = [threading.Thread(target=load, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Rejections of known kinds: 3 INVALID_RECORD, 2 UNKNOWN_TOPIC_OR_PARTITION, in one commit.
        rejected = broker.commit(
            laid_out(
                [batch(topic, 0, magic=7), batch(topic, 0, size=0), batch(topic, 1, magic=9), batch(topic, 99),
                 batch(topic, 98), batch(topic, 2)]
            )
        )  # fmt: skip
        assert [b.error_code for b in rejected.batches] == [87, 87, 87, 3, 3, 0]
        # One duplicate: an idempotent batch sent twice.
        first = broker.commit(laid_out([batch(topic, 3, producer_id=9, epoch=0, sequence=0)]))
        again = broker.commit(laid_out([batch(topic, 3, producer_id=9, epoch=0, sequence=0)]))
        assert again.batches[0].is_duplicate and not first.batches[0].is_duplicate
        samples = scrape(server)
        batches_total = accepted + 1 + 1  # the load, batch(topic, 2) and the first idempotent batch
        assert total(samples, "diskless_committed_batches_total") == batches_total
        bytes_total = 4 * 10 * sum(100 + i for i in range(5)) + 100 + 100
        assert total(samples, "diskless_committed_bytes_total") == bytes_total
        assert total(samples, "diskless_rejected_batches_total", error="INVALID_RECORD") == 3
        assert total(samples, "diskless_rejected_batches_total", error="UNKNOWN_TOPIC_OR_PARTITION") == 2
        assert total(samples, "diskless_duplicate_batches_total") == 1
        assert total(samples, "diskless_rpc_requests_total", method="CommitFile", code="OK") == commits + 3
        assert total(samples, "diskless_rpc_duration_seconds_count", method="CommitFile") == commits + 3
        assert total(samples, "diskless_coordinator_live_batches") == batches_total
        assert total(samples, "diskless_coordinator_up") == 4
        assert total(samples, "diskless_coordinator_group_operations_count") >= 1
        assert not any(name == "diskless_coordinator_snapshot_age_seconds" for name, _ in samples)  # none taken yet
        admin = admin_grpc.CoordinatorAdminStub(grpc.insecure_channel(server.address))
        assert all(r.error_code == 0 for r in admin.CreateSnapshot(admin_pb.CreateSnapshotRequest()).results)
        ages = [v for (name, _), v in scrape(server).items() if name == "diskless_coordinator_snapshot_age_seconds"]
        assert len(ages) == 4 and all(0 <= age < 60 for age in ages)
        described = server.stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest()).coordinators
        assert total(samples, "diskless_coordinator_log_flushes_total") == sum(c.log_flush_count for c in described)
        for coordinator in described:
            labels = {"coordinator": str(coordinator.coordinator_id)}
            assert total(samples, "diskless_coordinator_applied_offset", **labels) == coordinator.applied_offset
            assert total(samples, "diskless_coordinator_queued_operations", **labels) == 0
    finally:
        assert server.stop() == 0


def test_state_checkpoints_on_their_thread_are_counted(tmp_path: Path) -> None:
    settings = {"diskless.metrics.listen": "127.0.0.1:0", "diskless.coordinator.state.checkpoint.pages": "4"}
    server = ServerProcess(tmp_path / "data", coordinators=1, settings=settings).start()
    try:
        broker = Broker(server.stub, 1)
        topic = broker.create_topic("checkpointed", 8)
        for n in range(40):  # each commit dirties a page or more of the state: past the 4-page threshold
            response = broker.commit(laid_out([batch(topic, (n + i) % 8, size=100) for i in range(8)]))
            assert all(b.error_code == pb.NONE for b in response.batches)
        deadline = time.monotonic() + 10
        while total(samples := scrape(server), "diskless_coordinator_state_checkpoints_total") == 0:
            assert time.monotonic() < deadline, "no checkpoint counted"
            time.sleep(0.1)
        assert ("diskless_coordinator_state_checkpoints_in_apply_total", (("coordinator", "0"),)) in samples
    finally:
        assert server.stop() == 0


def test_logs_are_json_objects_when_asked(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", settings={"diskless.log.format": "json"}).start()
    try:
        Broker(server.stub, 4).create_topic("logged", 1)
    finally:
        assert server.stop() == 0
    events = [json.loads(line) for line in server.output if line.startswith("{")]
    messages = [e["message"] for e in events]
    assert any("coordinators loaded: SERVING" in m for m in messages)
    assert any(m == "stopped" for m in messages)
    assert all({"time", "level", "logger", "message"} <= set(e) for e in events)
