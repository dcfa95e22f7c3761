"""What the simulated brokers commit: file shapes, idempotent producers and retried duplicates.

A workload is system-neutral: a `CommitSpec` lists the batches of one WAL file
as a broker would send them (sorted by partition, as Inkless's brokers do), and
each benchmarked system turns it into its own call (a gRPC request, a
PostgreSQL function call, SQLite rows).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

RECORDS_PER_BATCH = 10
BATCH_BYTES = 1000
MAX_TIMESTAMP_MS = 1_700_000_000_000
PRODUCER_IDS_PER_BROKER = 100_000  # producer id = broker * this + partition + 1
DUPLICATE_SHARE_DEFAULT = 0.01  # share of batches that are a producer's retry of its previous batch


@dataclass(frozen=True, slots=True)
class Shape:
    """A WAL-file shape seen in production diskless clusters."""

    name: str
    partitions: int
    batches_min: int
    batches_max: int  # per file; equal to batches_min for fixed shapes

    @property
    def batches_mean(self) -> float:
        return (self.batches_min + self.batches_max) / 2


SHAPES: dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape("100x100", 100, 100, 100),
        Shape("1600x16", 16, 1600, 1600),
        Shape("1600x320", 320, 1600, 1600),
        Shape("1600x1600", 1600, 1600, 1600),
        Shape("small", 100, 1, 10),
    )
}


class BatchSpec(NamedTuple):
    partition: int
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int


@dataclass(frozen=True, slots=True)
class CommitSpec:
    object_key: str
    broker_id: int
    file_size: int
    batches: tuple[BatchSpec, ...]
    duplicates: int  # batches that are retries of an earlier batch (answered, not stored again)


class BrokerWorkload:
    """One broker's stream of WAL files; producer (broker, partition) writes sequences 0, 10, 20, ..."""

    def __init__(self, broker_id: int, shape: Shape, duplicate_share: float, seed: int, key_prefix: str) -> None:
        self.broker_id = broker_id
        self.shape = shape
        self.duplicate_share = duplicate_share
        self._random = random.Random(seed * 7919 + broker_id)
        self._key_prefix = key_prefix
        self._cursor = self._random.randrange(shape.partitions)
        self._files = 0
        self._next_sequence: dict[int, int] = {}

    def next_commit(self) -> CommitSpec:
        shape = self.shape
        count = self._random.randint(shape.batches_min, shape.batches_max)
        partitions = sorted((self._cursor + i) % shape.partitions for i in range(count))
        self._cursor = (self._cursor + count) % shape.partitions
        batches = []
        duplicates = 0
        for index, partition in enumerate(partitions):
            sequence = self._next_sequence.get(partition, 0)
            if sequence > 0 and self._random.random() < self.duplicate_share:
                sequence -= RECORDS_PER_BATCH  # the producer retries its previous batch
                duplicates += 1
            else:
                self._next_sequence[partition] = sequence + RECORDS_PER_BATCH
            batches.append(
                BatchSpec(
                    partition, index * BATCH_BYTES, BATCH_BYTES, 0, RECORDS_PER_BATCH - 1, MAX_TIMESTAMP_MS,
                    self.broker_id * PRODUCER_IDS_PER_BROKER + partition + 1, 0, sequence,
                    sequence + RECORDS_PER_BATCH - 1,
                )
            )  # fmt: skip
        self._files += 1
        return CommitSpec(
            f"{self._key_prefix}/b{self.broker_id}/{self._files}",
            self.broker_id,
            count * BATCH_BYTES,
            tuple(batches),
            duplicates,
        )
