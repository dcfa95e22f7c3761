"""The `postgres` peer: a PostgreSQL control plane called the way Inkless's brokers call theirs.

Each simulated broker has its own pool of connections (Inkless's brokers use
HikariCP: at most 10 connections, READ COMMITTED, autocommit off) and commits
one WAL file at a time (Inkless's file committer runs on one thread; the driver
already waits for each commit before the next). A commit is a transaction:
BEGIN, one `peer_commit_file` call with the file's batches as an array of
`commit_request` records, COMMIT. A FindBatches call is the same around
`peer_find_batches`, sent through the brokers' pools in turn, and its answer
carries every batch's object key and coordinates, which the client reads and
checks. The SQL is in bench/postgres_inkless_sql.py.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, final

import psycopg

from bench.postgres_inkless_sql import FUNCTIONS, MODEL, PREFILL, SCHEMA
from bench.postgres_system import PeerSchema, PostgresCluster, peer_counters
from bench.systems import Counters, FindOutcome, FindPosition
from bench.workload import CommitSpec

INKLESS_SCHEMA = PeerSchema((SCHEMA, FUNCTIONS), PREFILL, MODEL)

POOL_CONNECTIONS_MAX = 10  # Inkless's default `max.connections` per broker
FORMAT_WAL_V1 = 1
MAGIC_V2 = 2
TIMESTAMP_TYPE_CREATE_TIME = 0
COMMIT_CALL = "SELECT outcome::TEXT FROM peer_commit_file(%s, %s::SMALLINT, %s, %s, %s, %s::commit_request[])"
FIND_CALL = "SELECT partition, high_watermark, batches, error::TEXT FROM peer_find_batches(%s::fetch_request[], %s, 0)"

# One batch of a FindBatches answer in PostgreSQL's text form of `found_batch[]`: the batch id, the object key,
# then the quoted `batch_coordinates` record. The harness's object keys and topic names hold no comma, quote,
# parenthesis or space, so no field is quoted; `_read_batches` checks that every batch of the text matched.
_FOUND_BATCH = re.compile(
    r'"\((\d+),([^,"\\()]+),\\"\((\d+),([0-9a-f-]+),([^,"\\()]+),(\d+),(\d+),(\d+),(\d+),(\d+),(-?\d+),(-?\d+),'
    r'(-?\d+)\)\\"\)"'
)
_FIELD_BASE_OFFSET: Final = 8  # of the 13 fields above
_FIELD_LAST_OFFSET: Final = 9


@final
class _BrokerPool:
    """One broker's connections: opened on first need (HikariCP opens them all at start; idle ones do no work)."""

    def __init__(self, dsn: str, connections_max: int) -> None:
        self._dsn = dsn
        self._connections_max = connections_max
        self._opened: list[psycopg.AsyncConnection] = []
        self._opening = 0
        self._idle: asyncio.Queue[psycopg.AsyncConnection] = asyncio.Queue(maxsize=connections_max)

    async def take(self) -> psycopg.AsyncConnection:
        if self._idle.empty() and len(self._opened) + self._opening < self._connections_max:
            self._opening += 1  # counted before the wait, so concurrent takers cannot open past the maximum
            try:
                connection = await psycopg.AsyncConnection.connect(self._dsn, autocommit=False)
            finally:
                self._opening -= 1
            self._opened.append(connection)
            return connection
        return await self._idle.get()

    def give_back(self, connection: psycopg.AsyncConnection) -> None:
        self._idle.put_nowait(connection)

    async def close(self) -> None:
        for connection in self._opened:
            await connection.close()
        self._opened = []


class PostgresPeerSystem:
    name = "postgres"

    def __init__(self, cluster: PostgresCluster, brokers: int) -> None:
        self.cluster = cluster
        self._brokers = brokers
        self._pools: list[_BrokerPool] = []
        self._next_fetching_pool: itertools.cycle[_BrokerPool] | None = None
        self._admin: psycopg.AsyncConnection | None = None
        self._topics: list[uuid.UUID] = []

    async def open(self) -> None:
        self._admin = await psycopg.AsyncConnection.connect(self.cluster.dsn, autocommit=True)
        self._pools = [_BrokerPool(self.cluster.dsn, POOL_CONNECTIONS_MAX) for _ in range(self._brokers)]
        self._next_fetching_pool = itertools.cycle(self._pools)

    async def create_topic(self, name: str, partitions: int) -> int:
        assert self._admin is not None
        topic_id = uuid.uuid4()
        async with self._admin.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO logs (topic_id, partition, topic_name, log_start_offset, high_watermark) "
                "VALUES (%s, %s, %s, 0, 0)",
                [(topic_id, p, name) for p in range(partitions)],
            )
        self._topics.append(topic_id)
        return len(self._topics) - 1

    async def commit(self, topic: int, spec: CommitSpec) -> int:
        topic_id = self._topics[topic]
        # The batches as a `commit_request[]` literal: what a JDBC client sends for an array of records.
        requests = "{" + ",".join(
            f'"({MAGIC_V2},{topic_id},{b.partition},{b.byte_offset},{b.size},{b.base_offset},{b.last_offset},'
            f'{TIMESTAMP_TYPE_CREATE_TIME},{b.max_timestamp},{b.producer_id},{b.producer_epoch},{b.base_sequence},'
            f'{b.last_sequence})"'
            for b in spec.batches
        ) + "}"  # fmt: skip
        pool = self._pools[spec.broker_id % len(self._pools)]
        connection = await pool.take()
        try:
            async with connection.transaction():
                cursor = await connection.execute(COMMIT_CALL, (
                    spec.object_key, FORMAT_WAL_V1, spec.broker_id, spec.file_size, datetime.now(UTC), requests,
                ))  # fmt: skip
                answers = [row[0] for row in await cursor.fetchall()]
        finally:
            pool.give_back(connection)
        stored = answers.count("none")
        if (
            stored + answers.count("duplicate_batch") != len(spec.batches)
            or stored != len(spec.batches) - spec.duplicates
        ):
            raise RuntimeError(f"peer_commit_file {spec.object_key}: {sorted(set(answers))}")
        return stored

    async def find(self, topic: int, positions: Sequence[FindPosition], fetch_max_bytes: int) -> list[FindOutcome]:
        assert self._next_fetching_pool is not None
        topic_id = self._topics[topic]
        requests = "{" + ",".join(f'"({topic_id},{p.partition},{p.offset},{p.max_bytes})"' for p in positions) + "}"
        pool = next(self._next_fetching_pool)
        connection = await pool.take()
        try:
            async with connection.transaction():
                cursor = await connection.execute(FIND_CALL, (requests, fetch_max_bytes))
                answers = await cursor.fetchall()
        finally:
            pool.give_back(connection)
        if len(answers) != len(positions):
            raise RuntimeError(f"peer_find_batches: {len(answers)} answers for {len(positions)} partitions")
        outcomes = []
        for position, (partition, high_watermark, batches, error) in zip(positions, answers, strict=True):
            if error is not None or partition != position.partition:
                raise RuntimeError(f"peer_find_batches partition {position.partition}: {partition} {error}")
            offsets = _read_batches(str(batches), position.offset, int(high_watermark))
            outcomes.append(
                FindOutcome(position.partition, len(offsets), offsets[-1] + 1 if offsets else position.offset)
            )
        return outcomes

    async def counters(self) -> Counters:
        assert self._admin is not None
        return await peer_counters(self._admin, self.cluster)

    async def close(self) -> None:
        for pool in self._pools:
            await pool.close()
        self._pools = []
        self._next_fetching_pool = None
        if self._admin is not None:
            await self._admin.close()
            self._admin = None


def _read_batches(text: str, offset: int, high_watermark: int) -> list[int]:
    """The last offsets of the batches in a `found_batch[]` text, checked: the first holds `offset`, each next
    one starts where the one before ended, all below the high watermark."""
    found = _FOUND_BATCH.findall(text)
    if 2 * len(found) != text.count('"('):  # each batch opens two quoted records
        raise RuntimeError(f"peer_find_batches: unreadable batches {text[:200]}")
    last_offsets = []
    expected = offset
    for index, fields in enumerate(found):
        base_offset, last_offset = int(fields[_FIELD_BASE_OFFSET]), int(fields[_FIELD_LAST_OFFSET])
        starts_right = base_offset <= expected <= last_offset if index == 0 else base_offset == expected
        if not starts_right or last_offset >= high_watermark:
            raise RuntimeError(
                f"peer_find_batches: batch {base_offset}..{last_offset} where offset {expected} was expected "
                f"(high watermark {high_watermark})"
            )
        expected = last_offset + 1
        last_offsets.append(last_offset)
    return last_offsets
