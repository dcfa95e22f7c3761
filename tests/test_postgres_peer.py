"""The `postgres` peer does Inkless's work and answers what the coordinator answers.

Against a real PostgreSQL cluster (skipped where none is installed) and, for
the answers, a real `diskless serve` node fed the same commits: FindBatches
returns each batch's object key and coordinates under the same per-partition
and request-wide byte budgets; a commit coalesces byte-adjacent batches of a
partition into one row and every batch still gets its own offset and is found.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from bench.coordinator_system import CoordinatorServer, CoordinatorSystem  # noqa: E402
from bench.postgres_peers import peer_cluster, peer_system  # noqa: E402
from bench.postgres_system import PostgresCluster, find_binaries  # noqa: E402
from bench.systems import FindOutcome, FindPosition, System  # noqa: E402
from bench.workload import BATCH_BYTES, SHAPES, BrokerWorkload, CommitSpec, Shape  # noqa: E402

MIB = 1024 * 1024
TEN_PARTITIONS = Shape("10x10", 10, 10, 10)  # one batch per partition per file: nothing coalesces
FILES = 120  # 120 batches of 1000 bytes per partition: a 1 MiB request over 10 partitions stops inside them

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_binaries() is None, reason="PostgreSQL is not installed")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    directory = Path(tempfile.mkdtemp(prefix="peer-test-"))
    os.chmod(directory, 0o755)  # the server runs as the postgres user
    started = peer_cluster("postgres", directory / "postgres", install=False)
    try:
        started.start()
        yield started
    finally:
        started.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorServer]:
    server = CoordinatorServer(tmp_path_factory.mktemp("coordinator") / "data", 2, {})
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _specs(shape: Shape, files: int, duplicate_share: float, prefix: str) -> list[CommitSpec]:
    brokers = [BrokerWorkload(b, shape, duplicate_share, seed=7, key_prefix=prefix) for b in range(2)]
    return [brokers[i % 2].next_commit() for i in range(files)]


async def _commit_all(systems: Sequence[System], specs: Sequence[CommitSpec], name: str, partitions: int) -> list[int]:
    topics = []
    for system in systems:
        await system.open()
        topics.append(await system.create_topic(name, partitions))
    for spec in specs:
        for system, topic in zip(systems, topics, strict=True):
            await system.commit(topic, spec)
    return topics


def _both(cluster: PostgresCluster, coordinator: CoordinatorServer) -> tuple[System, System]:
    return peer_system("postgres", cluster, brokers=2, consumers=0), CoordinatorSystem("coordinator", [coordinator])


def test_find_batches_answers_what_the_coordinator_answers_under_both_budgets(
    cluster: PostgresCluster, coordinator: CoordinatorServer
) -> None:
    asks: list[tuple[list[FindPosition], int]] = [
        ([FindPosition(p, 0, MIB) for p in range(10)], MIB),  # a consumer from the start: the request budget
        ([FindPosition(p, 100, 64 * 1024) for p in range(10)], MIB),  # a lagging one: each partition's budget
        ([FindPosition(p, 105, 64 * 1024) for p in (3, 1, 2)], MIB),  # inside a batch, out of partition order
        ([FindPosition(p, 0, MIB) for p in range(10)], 500),  # a request budget below one batch: its first only
        ([FindPosition(p, FILES * 10, MIB) for p in range(10)], MIB),  # at the high watermark: nothing
    ]

    async def scenario() -> list[tuple[list[FindOutcome], list[FindOutcome]]]:
        peer, reference = systems = _both(cluster, coordinator)
        try:
            topics = await _commit_all(systems, _specs(TEN_PARTITIONS, FILES, 0.0, "find"), "find", 10)
            return [
                (await peer.find(topics[0], positions, budget), await reference.find(topics[1], positions, budget))
                for positions, budget in asks
            ]
        finally:
            for system in systems:
                await system.close()

    answers = asyncio.run(scenario())
    for (positions, budget), (peer, reference) in zip(asks, answers, strict=True):
        assert peer == reference, (positions[0], budget)
    from_start, lagging, _, first_only, at_tail = (peer for peer, _ in answers)
    assert sum(o.batches for o in from_start) == -(-MIB // BATCH_BYTES)  # 1,049 batches reach 1 MiB
    assert [o.batches for o in lagging] == [66] * 10  # 66 batches reach 64 KiB
    assert [o.batches for o in first_only] == [1] + [0] * 9
    assert all(o.batches == 0 and o.next_offset == FILES * 10 for o in at_tail)


def test_find_batches_returns_each_batch_object_key_and_coordinates(cluster: PostgresCluster) -> None:
    specs = _specs(TEN_PARTITIONS, 6, 0.0, "keys")

    async def commit() -> None:
        peer = peer_system("postgres", cluster, brokers=2, consumers=0)
        try:
            await _commit_all([peer], specs, "keys", 10)
        finally:
            await peer.close()

    asyncio.run(commit())
    with psycopg.connect(cluster.dsn, autocommit=True) as connection:
        topic_id = _topic_id(connection, "keys")
        answers = connection.execute(
            "SELECT a.partition, a.high_watermark, a.error::TEXT, b.object_key, (b.coordinates).* "
            "FROM peer_find_batches(%s::fetch_request[], %s) a LEFT JOIN LATERAL unnest(a.batches) b ON TRUE "
            "ORDER BY a.partition, (b.coordinates).base_offset",
            ("{" + ",".join(f'"({topic_id},{p},0,{MIB})"' for p in (2, 7, 99)) + "}", MIB),
        ).fetchall()
    expected = {p: [(s.object_key, b) for s in specs for b in s.batches if b.partition == p] for p in (2, 7)}
    unknown = [a for a in answers if a[0] == 99]
    assert [(a[1], a[2], a[3]) for a in unknown] == [(-1, "unknown_topic_or_partition", None)]
    for partition, batches in expected.items():
        found = [a for a in answers if a[0] == partition]
        assert len(found) == len(batches) and all(a[1] == 60 and a[2] is None for a in found)
        for index, (answer, (object_key, batch)) in enumerate(zip(found, batches, strict=True)):
            magic, answer_topic, topic_name, answer_partition, byte_offset, byte_size, base, last, _, max_ts, kind = (
                answer[4:]
            )
            assert (answer[3], byte_offset, byte_size, max_ts) == (object_key, batch.byte_offset, batch.size,
                                                                   batch.max_timestamp)  # fmt: skip
            assert (magic, answer_topic, topic_name, answer_partition, kind) == (2, topic_id, "keys", partition, 0)
            assert (base, last) == (index * 10, index * 10 + 9)


def test_byte_adjacent_batches_share_a_row_and_every_batch_keeps_its_offset(
    cluster: PostgresCluster, coordinator: CoordinatorServer
) -> None:
    shape = replace(SHAPES["1600x16"], batches_min=400, batches_max=400)  # 25 adjacent batches per partition
    specs = _specs(shape, 6, 0.02, "coalesce")
    duplicates = sum(s.duplicates for s in specs)
    runs = _runs_of_accepted_adjacent_batches(specs)
    assert duplicates > 0 and runs > len(specs) * 16  # some duplicate splits a run

    async def scenario() -> tuple[list[FindOutcome], list[FindOutcome]]:
        peer, reference = systems = _both(cluster, coordinator)
        try:
            topics = await _commit_all(systems, specs, "coalesce", 16)
            everything = [FindPosition(p, 0, 2**31 - 1) for p in range(16)]
            found = await peer.find(topics[0], everything, 2**31 - 1)
            # From any offset, even inside a coalesced row, the answer starts with the row holding it (the peer's
            # find checks that) and moves the consumer past it.
            for offset in range(0, found[3].next_offset, 10):
                (one,) = await peer.find(topics[0], [FindPosition(3, offset, BATCH_BYTES)], BATCH_BYTES)
                assert one.batches == 1 and offset < one.next_offset <= found[3].next_offset
            return found, await reference.find(topics[1], everything, 2**31 - 1)
        finally:
            for system in systems:
                await system.close()

    peer, reference = asyncio.run(scenario())
    stored = len(specs) * 400 - duplicates
    assert [o.next_offset for o in peer] == [o.next_offset for o in reference]  # the same high watermarks
    assert sum(o.batches for o in reference) == stored
    assert sum(o.batches for o in peer) == runs  # one row per run, and FindBatches returns the rows
    with psycopg.connect(cluster.dsn, autocommit=True) as connection:
        topic_id = _topic_id(connection, "coalesce")
        rows = connection.execute(
            "SELECT b.partition, b.base_offset, b.last_offset, b.byte_offset, b.byte_size, f.object_key "
            "FROM batches b JOIN files f USING (file_id) WHERE b.topic_id = %s ORDER BY partition, base_offset",
            (topic_id,),
        ).fetchall()
    assert sum((last - base + 1) // 10 for _, base, last, *_ in rows) == stored
    ends: dict[int, int] = {}
    for partition, base, last, byte_offset, byte_size, object_key in rows:
        assert base == ends.get(partition, 0)  # each row starts where the partition's last one ended
        ends[partition] = last + 1
        spec = next(s for s in specs if s.object_key == object_key)
        covered = [b for b in spec.batches if byte_offset <= b.byte_offset < byte_offset + byte_size]
        assert all(b.partition == partition for b in covered)  # only this partition's batches
        assert sum(b.size for b in covered) == byte_size
        assert len(covered) * 10 == last - base + 1  # and no duplicate among them


def _topic_id(connection: Any, name: str) -> uuid.UUID:
    row = connection.execute("SELECT DISTINCT topic_id FROM logs WHERE topic_name = %s", (name,)).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _runs_of_accepted_adjacent_batches(specs: Sequence[CommitSpec]) -> int:
    """What coalescing stores: per file, one row per run of a partition's accepted batches that follow each
    other in the file (a retried duplicate is refused, and its bytes end the run)."""
    newest_sequence: dict[int, int] = {}
    runs = 0
    for spec in specs:
        previous_accepted: tuple[int, int] | None = None  # (partition, end byte) of the batch just before
        for batch in spec.batches:
            if batch.last_sequence <= newest_sequence.get(batch.producer_id, -1):
                previous_accepted = None
                continue
            newest_sequence[batch.producer_id] = batch.last_sequence
            if previous_accepted != (batch.partition, batch.byte_offset):
                runs += 1
            previous_accepted = (batch.partition, batch.byte_offset + batch.size)
    return runs


def test_commit_answers_offsets_duplicates_and_refusals_per_batch(cluster: PostgresCluster) -> None:
    topic_id = uuid.uuid4()

    def request(partition: int, byte_offset: int, producer: int, epoch: int, sequence: int) -> str:
        fields = (2, topic_id, partition, byte_offset, 1000, 0, 9, 0, 1_700_000_000_000, producer, epoch, sequence,
                  sequence + 9)  # fmt: skip
        return '"(' + ",".join(map(str, fields)) + ')"'

    def commit(connection: Any, key: str, *batches: str) -> list[tuple[Any, ...]]:
        with connection.transaction():
            return list(connection.execute(
                "SELECT partition, assigned_base_offset, outcome::TEXT FROM peer_commit_file(%s, 1::SMALLINT, 0, "
                "%s, now(), %s::commit_request[])", (key, 1000 * len(batches), "{" + ",".join(batches) + "}"),
            ))  # fmt: skip

    with psycopg.connect(cluster.dsn) as connection:
        with connection.transaction():
            connection.execute(
                "INSERT INTO logs (topic_id, partition, topic_name, log_start_offset, high_watermark) "
                "VALUES (%s, 0, 'answers', 0, 0), (%s, 1, 'answers', 0, 0)", (topic_id, topic_id),
            )  # fmt: skip
        first = commit(connection, "answers/1", request(0, 0, 5, 0, 0), request(0, 1000, 5, 0, 10),
                       request(1, 2000, 6, 0, 0))  # fmt: skip
        assert first == [(0, 0, "none"), (0, 10, "none"), (1, 0, "none")]
        again = commit(
            connection, "answers/2",
            request(0, 0, 5, 0, 10),  # a retry: the offset it got the first time
            request(0, 1000, 5, 0, 30),  # a gap in the sequence
            request(0, 2000, 5, 0, 20),  # the next one
            request(1, 3000, 6, 1, 5),  # a new epoch must start at 0
            request(2, 4000, 7, 0, 0),  # no such partition
        )  # fmt: skip
        assert [(p, o, e) for p, o, e in again] == [
            (0, 10, "duplicate_batch"), (0, None, "sequence_out_of_order"), (0, 20, "none"),
            (1, None, "sequence_out_of_order"), (2, None, "nonexistent_log"),
        ]  # fmt: skip
        fenced = commit(connection, "answers/3", request(1, 0, 6, 1, 0), request(1, 1000, 6, 0, 10))
        assert fenced == [(1, 10, "none"), (1, None, "invalid_producer_epoch")]
        refused = commit(connection, "answers/4", request(0, 0, 5, 0, 20))
        assert refused == [(0, 20, "duplicate_batch")]
        logs = connection.execute(
            "SELECT partition, high_watermark, byte_size, earliest_batch_timestamp FROM logs WHERE topic_id = %s "
            "ORDER BY partition", (topic_id,),
        ).fetchall()  # fmt: skip
        assert logs == [(0, 30, 3000, 1700000000000), (1, 20, 2000, 1700000000000)]
        states = connection.execute("SELECT object_key, state::TEXT FROM files WHERE object_key LIKE 'answers/%%' "
                                    "ORDER BY object_key").fetchall()  # fmt: skip
        # Nothing of answers/4 was stored: it is marked for deletion at once.
        assert states == [("answers/1", "uploaded"), ("answers/2", "uploaded"), ("answers/3", "uploaded"),
                          ("answers/4", "deleting")]  # fmt: skip
