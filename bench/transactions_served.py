"""FindBatches READ_COMMITTED against READ_UNCOMMITTED served by a real node (issue #36's read figure over gRPC):

    python -m bench.transactions_served [--calls 2000] [--aborted 10000] [--rounds 3] [--json]

A `diskless serve` process with one coordinator, the node's loop serving reads (`diskless.server.read.processes=0`,
so that its CPU is the process's); one partition holding `--aborted` aborted transactions (a data batch and its ABORT
marker each, committed through CommitFile as `bench.transactions` commits them) and as many plain batches after
them. One client thread calls FindBatches (100 batches per call) at the same random offsets, READ_UNCOMMITTED then
READ_COMMITTED, alternating for `--rounds`: calls per wall second (the client's gRPC included) and the node's CPU
per call, the best round of each; the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import grpc

from bench.node_process import cpu_s, start_node, stop_node
from bench.transactions import BATCH_BYTES, TOPIC, _batch, _marker
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

TRANSACTIONS_PER_FILE = 500
BATCHES_PER_CALL = 100
START_TIMEOUT_S = 120


def _commit(stub: pb_grpc.DisklessCoordinatorStub, batches: list[pb.CommitFileRequest.Batch], key: str) -> None:
    for index, made in enumerate(batches):
        made.byte_offset = index * BATCH_BYTES
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=len(batches) * BATCH_BYTES, uploader_broker_id=1, owner_ids=[0],
        batches=batches,
    )  # fmt: skip
    codes = {b.error_code for b in stub.CommitFile(request, timeout=60).batches}
    assert codes == {pb.NONE}, codes


def _fill(stub: pb_grpc.DisklessCoordinatorStub, aborted: int) -> tuple[int, int]:
    """The partition's aborted transactions, then plain batches: (the end of the first, the high watermark)."""
    for first in range(0, aborted, TRANSACTIONS_PER_FILE):
        batches = []
        for producer in range(first, min(first + TRANSACTIONS_PER_FILE, aborted)):
            batches += [_batch(0, 10_000 + producer, 0, True), _marker(0, 10_000 + producer, False)]
        _commit(stub, batches, f"wal/aborted/{first}")
    dense_end = 0
    for first in range(0, 2 * aborted, 2 * TRANSACTIONS_PER_FILE):
        plain = [_batch(0, -1, -1, False) for _ in range(2 * TRANSACTIONS_PER_FILE)]
        for made in plain:
            made.producer_epoch = made.base_sequence = made.last_sequence = -1
        if first == 0:
            dense_end = _find(stub, 0, False).high_watermark
        _commit(stub, plain, f"wal/plain/{first}")
    return dense_end, _find(stub, 0, False).high_watermark


def _find(
    stub: pb_grpc.DisklessCoordinatorStub, offset: int, committed: bool
) -> pb.FindBatchesResponse.PartitionResult:
    wanted = pb.FindBatchesRequest.Partition(partition=0, offset=offset, max_partition_fetch_bytes=2**30)
    request = pb.FindBatchesRequest(
        fetch_max_bytes=2**30, max_batches_per_partition=BATCHES_PER_CALL,
        isolation_level=pb.READ_COMMITTED if committed else pb.READ_UNCOMMITTED,
        topics=[pb.FindBatchesRequest.Topic(topic_id=TOPIC, partitions=[wanted])],
    )  # fmt: skip
    return stub.FindBatches(request, timeout=30).topics[0].partitions[0]


def _wait_serving(stub: pb_grpc.DisklessCoordinatorStub) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            described = stub.DescribeCoordinators(pb.DescribeCoordinatorsRequest(), timeout=1)
            if all(c.error_code == pb.NONE for c in described.coordinators):
                return
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the node is not serving")


def served_find_batches(aborted: int, calls: int, seed: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        process, address, _ = start_node(Path(directory), 1, {"diskless.server.read.processes": "0"})
        try:
            with grpc.insecure_channel(address) as channel:
                stub = pb_grpc.DisklessCoordinatorStub(channel)
                _wait_serving(stub)
                topic = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC, name="bench", num_partitions=1)
                created = stub.CreatePartitions(pb.CreatePartitionsRequest(topics=[topic]), timeout=30)
                assert created.topics[0].error_code == pb.NONE, created
                dense_end, high_watermark = _fill(stub, aborted)
                generator = random.Random(seed)
                report: dict[str, float] = {}
                ranges = {"dense": (0, dense_end - 200), "after": (dense_end, high_watermark - 2000)}
                for name, (low, high) in ranges.items():
                    offsets = [generator.randrange(low, high) for _ in range(calls)]
                    listed = sum(len(_find(stub, o, True).aborted_transactions) for o in offsets[:200]) / 200
                    best_rate = {False: 0.0, True: 0.0}
                    best_cpu = {False: float("inf"), True: float("inf")}
                    for _ in range(rounds):
                        for committed in (False, True):
                            cpu_started, started = cpu_s(process.pid), time.perf_counter()
                            for offset in offsets:
                                _find(stub, offset, committed)
                            wall = time.perf_counter() - started
                            best_rate[committed] = max(best_rate[committed], calls / wall)
                            cpu_us = (cpu_s(process.pid) - cpu_started) / calls * 1e6
                            best_cpu[committed] = min(best_cpu[committed], cpu_us)
                    report[f"{name}_aborted_listed_per_call"] = listed
                    report[f"{name}_read_uncommitted_calls_per_s"] = best_rate[False]
                    report[f"{name}_read_committed_calls_per_s"] = best_rate[True]
                    report[f"{name}_ratio"] = best_rate[True] / best_rate[False]
                    report[f"{name}_read_uncommitted_node_cpu_us_per_call"] = best_cpu[False]
                    report[f"{name}_read_committed_node_cpu_us_per_call"] = best_cpu[True]
                    report[f"{name}_node_cpu_ratio"] = best_cpu[False] / best_cpu[True]
                return report
        finally:
            stop_node(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--aborted", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = served_find_batches(args.aborted, args.calls, args.seed, args.rounds)
    print(json.dumps(report, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in report.items()))


if __name__ == "__main__":
    main()
