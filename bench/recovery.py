"""Recovery targets (DESIGN §6): replay speed, restart from snapshot + tail, snapshot copy speed, commit p99.

    python -m bench.recovery [--batches 1000000] [--tail-records 100000] [--partitions 1000]
                             [--batches-per-file 100] [--runs 7] [--load-seconds 4] [--work-dir DIR]

1. Builds one coordinator's metadata log of --batches live batches (files of --batches-per-file
   batches over --partitions partitions) and replays it into a fresh SQLite: batches/s.
2. Snapshots that state with the backup API as the node does (default settings: step, rate bound):
   MB/s of the copy, fsync and checksum included; the median of --runs copies.
3. Appends a tail of --tail-records records (one file of one batch each), deletes state.sqlite and
   starts `diskless serve --coordinators 1` on the directory: seconds until health says SERVING
   (restore of the snapshot + replay of the tail + process start).
4. Commit p99 on that node under a closed-loop load, without a snapshot and while snapshots run back
   to back (CreateSnapshot in a loop): --runs rounds, each one phase of each kind, in alternating
   order (quiet then busy, busy then quiet, ...) so that drift in the machine's other load falls on
   both; the figure is the ratio of the median p99s, with each phase's p99 and the spread shown.

Targets (2-core machine): replay >= 100k batches/s; back to serving <= 10 s; copy >= 200 MB/s;
p99 during snapshots <= 2x the p99 without. The machine (CPU, cores, memory, the work dir's file
system and mount options, load average before and after) is printed first: on a shared machine
the p99s move with other people's work, which the spread shows.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.report import load_average, machine
from coordinator.config.settings import Settings
from coordinator.machine import records
from coordinator.machine.records import CommittedBatch
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.shard.log_replay import rebuild_from_log
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from snapshot.snapshots import delete_snapshot, snapshot_directory, take_snapshot

SEGMENT_BYTES = 64 * 1024 * 1024
APPEND_TIME_MS = 1_700_000_000_000
FRAMES_PER_APPEND = 2000  # one fdatasync per chunk while building the log


class LogBuilder:
    """Writes a coordinator-0 log of partition creations and file commits, as the node would have."""

    def __init__(self, directory: Path, partitions: int) -> None:
        self.log = MetadataLog(directory / "log", SEGMENT_BYTES)
        self.partitions = partitions
        self.high_watermarks = [0] * partitions
        self.next_batch_id = 0
        self.next_file_id = 0
        self.epoch = max(1, self.log.position().last_epoch)
        self._pending: list[bytes] = []
        self._pending_end = self.log.end_offset

    def _frame(self, frame_records: list[records.MetadataRecord]) -> None:
        base = self._pending_end
        self._pending.append(encode_frame(base, self.epoch, len(frame_records), records.encode_batch(frame_records)))
        self._pending_end = base + len(frame_records)
        if len(self._pending) >= FRAMES_PER_APPEND:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self.log.append(b"".join(self._pending), self._pending_end, self.epoch)
            self._pending = []

    def start(self, topic_id: bytes) -> None:
        self._frame([records.leader_change(self.epoch, 0)])
        self._frame([records.partition_created(i, topic_id, "bench", i) for i in range(self.partitions)])

    def commit(self, batch_count: int) -> None:
        batches = []
        for i in range(batch_count):
            key = (self.next_batch_id + i) % self.partitions
            base = self.high_watermarks[key]
            self.high_watermarks[key] = base + 10
            batches.append(
                CommittedBatch(self.next_batch_id + i, key, i * 1000, 1000, base, base + 9, APPEND_TIME_MS, -1, -1, -1,
                               -1, 2, 0)
            )  # fmt: skip
        self.next_batch_id += batch_count
        record = records.file_committed(
            self.next_file_id, f"wal/{uuid.uuid4()}", batch_count * 1000, 1, [0], APPEND_TIME_MS, batches
        )
        self.next_file_id += 1
        self._frame([record])

    def close(self) -> None:
        self.flush()
        self.log.close()


def build_and_replay(coordinator: Path, args: argparse.Namespace) -> LogBuilder:
    builder = LogBuilder(coordinator, args.partitions)
    builder.start(uuid.uuid4().bytes)
    for _ in range(args.batches // args.batches_per_file):
        builder.commit(args.batches_per_file)
    builder.flush()
    started = time.perf_counter()
    rebuild_from_log(coordinator, 0, coordinator / "state.sqlite")
    elapsed = time.perf_counter() - started
    print(f"replay: {args.batches} batches ({args.batches // args.batches_per_file} records) in {elapsed:.2f}s = "
          f"{args.batches / elapsed:,.0f} batches/s (target >= 100,000)", flush=True)  # fmt: skip
    return builder


def snapshot_copy(coordinator: Path, runs: int) -> None:
    """The median rate of `runs` copies; the last one stays for the restart."""
    settings = Settings()
    rates = []
    for run in range(runs):
        started = time.perf_counter()
        manifest = take_snapshot(
            coordinator / "state.sqlite", snapshot_directory(coordinator), settings.snapshot_copy_step_pages,
            APPEND_TIME_MS, settings.snapshot_copy_max_bytes_per_second,
        )  # fmt: skip
        rates.append(manifest.size_bytes / 1e6 / (time.perf_counter() - started))
        if run < runs - 1:
            delete_snapshot(manifest)
    print(f"snapshot copy: {manifest.size_bytes / 1e6:.0f} MB, {settings.snapshot_copy_step_pages}-page steps: "
          f"median {statistics.median(rates):.0f} MB/s of {runs} copies ({min(rates):.0f}-{max(rates):.0f}) "
          "incl. fsync and checksum (target >= 200)", flush=True)  # fmt: skip


def describe_machine(work: Path) -> str:
    facts = machine()
    mount = max(
        (line.split() for line in Path("/proc/mounts").read_text().splitlines()),
        key=lambda fields: len(fields[1]) if str(work.resolve()).startswith(fields[1]) else -1,
    )
    return (
        f"machine: {facts['cpu']}, {facts['cores']} cores, {facts['memory_gib']} GiB, kernel {facts['kernel']}, "
        f"SQLite {facts['sqlite']}; work dir {work} on {mount[2]} ({mount[3]}); load average {load_average()}"
    )


def start_node(data_dir: Path, coordinators: int = 1) -> tuple[subprocess.Popen[str], str, float]:
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
         "--coordinators", str(coordinators)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    address = ""
    for line in process.stdout:
        if "listening on" in line:
            address = line.split("listening on ")[1].split(",")[0]
            break
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()  # type: ignore[union-attr]
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(address))
    while True:
        try:
            if (
                health.Check(health_pb2.HealthCheckRequest(), timeout=1).status  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
                == health_pb2.HealthCheckResponse.SERVING
            ):
                return process, address, time.perf_counter() - started
        except grpc.RpcError:
            pass
        if process.poll() is not None:
            raise RuntimeError("the node exited while loading")
        time.sleep(0.01)


@dataclass(frozen=True, slots=True)
class Phase:
    snapshots: bool
    latencies: list[float]
    seconds: float
    snapshots_taken: int
    snapshot_bytes: int  # copied by the snapshots taken

    @property
    def p99_ms(self) -> float:
        return p99_ms(self.latencies)

    def line(self) -> str:
        p50_ms = statistics.median(self.latencies) * 1000
        text = (
            f"{'during snapshots' if self.snapshots else 'no snapshot':>16}: p99 {self.p99_ms:6.1f} ms, "
            f"p50 {p50_ms:5.1f} ms, {len(self.latencies) / self.seconds:4.0f} commits/s"
        )
        if self.snapshots:
            copied_mb_per_s = self.snapshot_bytes / 1e6 / self.seconds
            text += f", {self.snapshots_taken} snapshots ({copied_mb_per_s:.0f} MB/s copied in the node)"
        return text


def commit_load(address: str, topic_id: bytes, seconds: float, clients: int, snapshots: bool) -> Phase:
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds
    taken = 0
    copied_bytes = 0

    def client(index: int) -> None:
        stub = pb_grpc.DisklessCoordinatorStub(grpc.insecure_channel(address))
        n = 0
        while time.monotonic() < stop_at:
            batches = [pb.CommitFileRequest.Batch(magic=2, topic_id=topic_id, partition=(index * 10 + n + i) % 100,
                                                  byte_offset=i * 100, size=100, base_offset=0, last_offset=0,
                                                  batch_max_timestamp=APPEND_TIME_MS, timestamp_type=pb.CREATE_TIME,
                                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                  last_sequence=-1) for i in range(10)]  # fmt: skip
            request = pb.CommitFileRequest(object_key=f"wal/{uuid.uuid4()}", object_format=1, file_size=1000,
                                           uploader_broker_id=index, owner_ids=[0], batches=batches)  # fmt: skip
            started = time.perf_counter()
            stub.CommitFile(request, timeout=30)
            latencies.append(time.perf_counter() - started)
            n += 1

    def snapshotter() -> None:
        nonlocal taken, copied_bytes
        stub = admin_pb2_grpc.CoordinatorAdminStub(grpc.insecure_channel(address))
        while time.monotonic() < stop_at:
            response = stub.CreateSnapshot(admin.CreateSnapshotRequest(), timeout=60)
            taken += 1
            copied_bytes += sum(result.snapshot.size_bytes for result in response.results)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    if snapshots:
        threads.append(threading.Thread(target=snapshotter))
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Phase(snapshots, latencies, time.monotonic() - started, taken, copied_bytes)


def compare_p99(address: str, topic_id: bytes, args: argparse.Namespace) -> None:
    """Rounds of one quiet and one busy phase, in alternating order; the ratio of the median p99s."""
    commit_load(address, topic_id, 2, args.clients, snapshots=False)  # warm-up
    print(f"commit p99, {args.runs} rounds of {args.load_seconds:g} s phases, {args.clients} closed-loop clients "
          f"(load average {load_average()}):", flush=True)  # fmt: skip
    phases: dict[bool, list[Phase]] = {False: [], True: []}
    for run in range(args.runs):
        for snapshots in (False, True) if run % 2 == 0 else (True, False):
            phase = commit_load(address, topic_id, args.load_seconds, args.clients, snapshots)
            phases[snapshots].append(phase)
            print(f"  round {run + 1} {phase.line()}", flush=True)
    quiet = [phase.p99_ms for phase in phases[False]]
    busy = [phase.p99_ms for phase in phases[True]]
    quiet_ms, busy_ms = statistics.median(quiet), statistics.median(busy)
    per_round = ", ".join(f"{b / q:.2f}" for q, b in zip(quiet, busy, strict=True))
    print(f"commit p99: median {quiet_ms:.1f} ms without a snapshot ({min(quiet):.1f}-{max(quiet):.1f}), "
          f"{busy_ms:.1f} ms during back-to-back snapshots ({min(busy):.1f}-{max(busy):.1f}): "
          f"{busy_ms / quiet_ms:.2f}x (target <= 2); per-round ratios {per_round}; "
          f"load average {load_average()}", flush=True)  # fmt: skip


def p99_ms(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98] * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--tail-records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--batches-per-file", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7, help="snapshot copies, and rounds of the p99 comparison")
    parser.add_argument("--load-seconds", type=float, default=4.0, help="length of each p99 phase")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--work-dir", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-recovery-", dir=args.work_dir))
    print(describe_machine(work), flush=True)
    try:
        coordinator = work / "data" / "coordinator-0"
        builder = build_and_replay(coordinator, args)
        snapshot_copy(coordinator, args.runs)
        for _ in range(args.tail_records):
            builder.commit(1)
        builder.close()
        for name in ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm"):
            (coordinator / name).unlink(missing_ok=True)
        process, address, serving_s = start_node(work / "data")
        print(f"restart: {args.batches + args.tail_records} live batches, snapshot + {args.tail_records}-record tail: "
              f"SERVING after {serving_s:.2f}s (target <= 10)", flush=True)  # fmt: skip
        try:
            stub = pb_grpc.DisklessCoordinatorStub(grpc.insecure_channel(address))
            topic_id = uuid.uuid4().bytes
            topic = pb.CreatePartitionsRequest.Topic(topic_id=topic_id, name="load", num_partitions=100)
            stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[topic]))
            compare_p99(address, topic_id, args)
        finally:
            process.terminate()
            process.wait(timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
