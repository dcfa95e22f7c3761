"""The consolidation plan shipped to the executors as data, in bounded tasks.

The runs used to be handed to `SparkContext.parallelize` as Python objects, a few tasks per core: at
100,000 files (6,250,000 batches) each task carried 40 MB of pickled runs, and the driver's JVM died of
OutOfMemoryError while serializing one. Now each run is encoded compactly (JSON: the source keys once, each
batch as five integers; compressed with zlib) and the runs are packed into task payloads of at most
`diskless.consolidation.task.runs` runs and `diskless.consolidation.task.bytes` compressed bytes (a run
larger than that goes alone: a run is never split). The RDD holds one payload per partition, so a task
carries its own payload and nothing else; the closure (`move_payloads`) carries only the small RunPlan.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from spark.consolidation_rules import Run, SourceBatch

COMPRESSION_LEVEL = 1  # the plan is compressed once on the driver: fast beats small here


@dataclass(frozen=True, slots=True)
class Payload:
    """One task's runs, each encoded (a JSON line) and compressed with zlib on its own: sizes add up."""

    runs: tuple[bytes, ...]

    @property
    def size(self) -> int:
        return sum(len(run) for run in self.runs)


def encode_run(run: Run) -> bytes:
    keys: dict[str, int] = {}
    batches = []
    for b in run.batches:
        index = keys.setdefault(b.object_key, len(keys))
        batches.append([index, b.base_offset, b.last_offset, b.byte_offset, b.size])
    return json.dumps(
        [run.coordinator_id, run.topic_id.hex(), run.partition, list(keys), batches], separators=(",", ":")
    ).encode()


def decode_run(line: bytes) -> Run:
    coordinator_id, topic_hex, partition, keys, batches = json.loads(line)
    topic_id = bytes.fromhex(topic_hex)
    return Run(
        coordinator_id,
        topic_id,
        partition,
        tuple(
            SourceBatch(coordinator_id, topic_id, partition, base, last, keys[index], offset, size)
            for index, base, last, offset, size in batches
        ),
    )


def pack_runs(runs: Iterable[Run], max_runs: int, max_bytes: int, min_tasks: int = 1) -> list[Payload]:
    """The runs in order, cut into payloads of at most `max_runs` runs and `max_bytes` compressed bytes.

    `min_tasks` spreads a small plan over at least that many tasks (runs differ in size: more tasks than
    cores even the load out), never beyond the bounds."""
    compressed = [zlib.compress(encode_run(run), COMPRESSION_LEVEL) for run in runs]
    if not compressed:
        return []
    per_task = max(1, min(max_runs, math.ceil(len(compressed) / max(1, min_tasks))))
    payloads: list[Payload] = []
    taken: list[bytes] = []
    size = 0
    for run in compressed:
        if taken and (len(taken) >= per_task or size + len(run) > max_bytes):
            payloads.append(Payload(tuple(taken)))
            taken, size = [], 0
        taken.append(run)
        size += len(run)
    payloads.append(Payload(tuple(taken)))
    return payloads


def unpack_runs(payload: Payload) -> Iterator[Run]:
    for run in payload.runs:
        yield decode_run(zlib.decompress(run))
