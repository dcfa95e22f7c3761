"""A steady commit load beside the consolidation benchmark, and the store it measures.

`SteadyLoad` commits a small WAL file of genuine batches at a fixed rate (open loop: each commit has an
intended send time, and its latency is measured from it, so a commit held up behind a slow one counts
its wait) until stopped; `p99_ms` of a window with the job running is compared with one without.
`layout_gets` and `live_files` are what the benchmark counts before and after.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from bench.wal_broker import Piece, WalBroker, find_all_batches, gets_to_read, sample_records
from coordinator.files.object_store import ObjectStoreError, StoreConfig, new_wal_key, open_object_store
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

LOAD_BROKER_ID = 999
LOAD_PARTITIONS = 8
LOAD_SENDERS = 16  # commits in flight at most: enough that a slow one never holds the schedule back
DESCRIBE_KEYS_MAX = 1000
SLOWEST_KEPT = 12


class SteadyLoad:
    """Commits one file every 1/rate seconds on its own topic (one coordinator owns it: its partition 0's, the
    others answer as a partial commit would); each commit's latency from its intended send time."""

    def __init__(self, address: str, store: StoreConfig, rate_per_s: float, seed: int = 1) -> None:
        self._address = address
        self._store_config = store
        self._interval_s = 1.0 / rate_per_s
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._latencies_s: list[float] = []
        self._slowest: list[tuple[float, float]] = []  # (intended send time from the window's start, latency) in s
        self._window_start = 0.0
        self._failures = 0
        self.keys: list[str] = []  # committed, over every window: these stay live, no job merges them here
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._topic: bytes = b""

    def start(self) -> None:
        self._latencies_s = []
        self._slowest = []
        self._window_start = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="steady-load", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        ordered = sorted(self._latencies_s)
        return {
            "commits": len(ordered),
            "failures": self._failures,
            "p50_ms": round(percentile(ordered, 0.50) * 1000, 2),
            "p99_ms": round(percentile(ordered, 0.99) * 1000, 2),
            # When the slowest commits were meant to go (s from the window's start): a p99 made of one phase
            # of the job (its planning, say) shows as a cluster here.
            "slowest": [[round(at, 2), round(latency * 1000, 1)] for at, latency in
                        sorted(self._slowest, key=lambda pair: -pair[1])[:SLOWEST_KEPT]],
        }  # fmt: skip

    def _run(self) -> None:
        store = open_object_store(self._store_config)
        with grpc.insecure_channel(self._address) as channel, futures.ThreadPoolExecutor(LOAD_SENDERS) as pool:
            broker = WalBroker(pb_grpc.DisklessCoordinatorStub(channel), store, LOAD_BROKER_ID)
            if not self._topic:
                self._topic = broker.create_topic(f"steady-load-{self._rng.getrandbits(32):08x}", LOAD_PARTITIONS)
            pieces = [Piece(self._topic, p, sample_records(self._rng, 4, int(time.time() * 1000)))
                      for p in range(LOAD_PARTITIONS)]  # fmt: skip
            owners = list(dict.fromkeys(broker.coordinator_of(self._topic, p) for p in range(LOAD_PARTITIONS)))
            sent: list[futures.Future[None]] = []
            intended = time.monotonic()
            while not self._stop.is_set():
                delay = intended - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
                # Open loop: each commit goes at its time on a sender of its own, whatever the earlier ones do.
                sent.append(pool.submit(self._commit, broker, pieces, owners, intended))
                intended += self._interval_s
            futures.wait(sent)
        store.close()

    def _commit(self, broker: WalBroker, pieces: list[Piece], owners: list[int], intended: float) -> None:
        """Uploads then commits one file; the commit's latency counts from its intended time or the upload's end."""
        data, batches = broker.build_file(pieces)
        key = new_wal_key(self._store_config.prefix)
        try:
            broker.store.put(key, data)
            ready = max(intended, time.monotonic())
            answer = broker.commit(key, len(data), owners, batches)
        except (grpc.RpcError, ObjectStoreError):
            with self._lock:
                self._failures += 1
            return
        latency = time.monotonic() - ready
        with self._lock:
            if any(b.error_code != pb.NONE for b in answer.batches):
                self._failures += 1
                return
            self.keys.append(key)
            self._latencies_s.append(latency)
            self._slowest.append((intended - self._window_start, latency))


def percentile(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def layout_gets(stub: pb_grpc.DisklessCoordinatorStub, partitions: Sequence[tuple[bytes, int]]) -> dict[str, int]:
    """GETs to read every partition from its start, and the objects those reads touch."""
    gets, objects = 0, set[str]()
    for topic_id, partition in partitions:
        batches = find_all_batches(stub, topic_id, partition)
        gets += gets_to_read(batches)
        objects.update(b.object_key for b in batches)
    return {"gets": gets, "objects_read": len(objects)}


def live_file_rows(stub: pb_grpc.DisklessCoordinatorStub, keys: Sequence[str]) -> int:
    """Live-file rows these files hold over the coordinators (one per coordinator with a live batch of it)."""
    rows = 0
    for start in range(0, len(keys), DESCRIBE_KEYS_MAX):
        answer = stub.DescribeFiles(pb.DescribeFilesRequest(object_keys=keys[start : start + DESCRIBE_KEYS_MAX]),
                                    timeout=60)  # fmt: skip
        rows += sum(len(f.coordinator_ids) for f in answer.files if f.has_live_batches)
    return rows


def live_files(stub: pb_grpc.DisklessCoordinatorStub) -> dict[str, int]:
    described = stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=60).coordinators
    return {
        "live": sum(c.live_file_count for c in described),
        "awaiting_handover": sum(c.files_awaiting_handover for c in described),
        "awaiting_deletion": sum(c.files_awaiting_deletion for c in described),
    }


def count_objects(root: Path) -> int:
    return sum(1 for path in (root / "wal").rglob("*.wal")) if (root / "wal").is_dir() else 0
