"""The PostgreSQL peers' server, and `postgres-simple`: the peer as it was before issue #16.

The harness installs PostgreSQL with apt-get if no server binaries are found,
initdb's a cluster into a temporary directory owned by the `postgres` user,
installs one peer's schema and functions (`PeerSchema`), starts it on a free
loopback port and stops it afterwards.

`postgres-simple` (bench/postgres_sql.py) is kept to show what the faithful
`postgres` peer (bench/postgres_inkless_system.py) changed: its brokers are
psycopg connections, one per broker and consumer, each calling
`commit_file_v1` once per WAL file (autocommit: the call is its own
transaction), and its FindBatches is one query that counts each partition's
batches and returns the last offset (no object keys, no request-wide budget).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import postgres_sql
from bench.postgres_sql import FIND_BATCHES
from bench.systems import (
    Counters,
    FindOutcome,
    FindPosition,
    SystemUnavailable,
    children_of,
    processes_counters,
)
from bench.workload import CommitSpec

START_TIMEOUT_S = 120
# Sized for a 24 GiB machine, durable as shipped (fsync, synchronous_commit and full_page_writes stay on).
SERVER_SETTINGS = {
    "shared_buffers": "2GB",
    "max_wal_size": "16GB",
    "checkpoint_timeout": "30min",
    "max_connections": "200",
    "listen_addresses": "'127.0.0.1'",
    "synchronous_commit": "on",
    "fsync": "on",
}


@dataclass(frozen=True, slots=True)
class PeerSchema:
    """What one peer installs in a fresh cluster, how it prefills a grown state, and what it models."""

    statements: tuple[str, ...]
    prefill: str  # `;\n`-separated statements taking topic_id, batches, partitions, per_file, files
    model: str


SIMPLE_SCHEMA = PeerSchema(
    (postgres_sql.SCHEMA, postgres_sql.COMMIT_FUNCTION),
    postgres_sql.PREFILL,
    "peer model: the peer before issue #16 (Inkless's commit_file_v1 of 2025: one row per batch, JSONB "
    "arguments, one autocommit call; FindBatches counts batches, no object keys, no request budget)",
)


class PostgresUnavailable(SystemUnavailable):
    """No PostgreSQL server binaries, and installing them was not allowed or failed."""


def find_binaries() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def ensure_installed(install: bool) -> Path:
    found = find_binaries()
    if found is not None:
        return found
    if not install:
        raise PostgresUnavailable("PostgreSQL is not installed (apt-get install -y postgresql) and --no-install")
    if shutil.which("apt-get") is None:
        raise PostgresUnavailable("PostgreSQL is not installed and apt-get is not available")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "postgresql"]):
        done = subprocess.run(
            command, capture_output=True, text=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"{' '.join(command)} failed: {done.stderr.strip()[-300:]}")
    found = find_binaries()
    if found is None:
        raise PostgresUnavailable("apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_postgres(command: list[str]) -> list[str]:
    """Runs a command as the `postgres` user when we are root (the server refuses to run as root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


class PostgresCluster:
    def __init__(self, directory: Path, install: bool, schema: PeerSchema) -> None:
        self.directory = directory
        self.schema = schema
        self.binaries = ensure_installed(install)
        self.port = 0
        self.version = ""

    @property
    def data(self) -> Path:
        return self.directory / "pgdata"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run([str(self.binaries / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                   "--no-sync"])  # fmt: skip
        self.port = _free_port()
        with (self.data / "postgresql.conf").open("a") as conf:
            for name, value in {**SERVER_SETTINGS, "port": str(self.port),
                                "unix_socket_directories": f"'{self.directory}'"}.items():  # fmt: skip
                conf.write(f"{name} = {value}\n")
        self._run([str(self.binaries / "pg_ctl"), "-D", str(self.data), "-l", str(self.directory / "server.log"),
                   "-w", "-t", str(START_TIMEOUT_S), "start"])  # fmt: skip
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            self.version = str(connection.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            for statement in self.schema.statements:
                connection.execute(statement)

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(_as_postgres(command), capture_output=True, text=True, cwd="/")
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {done.stdout[-500:]} {done.stderr[-500:]}")

    @property
    def description(self) -> str:
        return f"PostgreSQL {self.version}; {self.schema.model}"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    @property
    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def prefill(self, batches: int, partitions: int, per_file: int) -> None:
        """The state `batches` committed batches leave (files of `per_file` over `partitions` partitions)."""
        params = {"topic_id": uuid.uuid4(), "batches": batches, "partitions": partitions, "per_file": per_file,
                  "files": -(-batches // per_file)}  # fmt: skip
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            for statement in self.schema.prefill.split(";\n"):
                if statement.strip():
                    connection.execute(statement, params)
            connection.execute("VACUUM ANALYZE")
            connection.execute("CHECKPOINT")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run([str(self.binaries / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])


class PostgresSimpleSystem:
    name = "postgres-simple"

    def __init__(self, cluster: PostgresCluster, connections: int) -> None:
        self.cluster = cluster
        self._connection_count = connections
        self._idle: list[psycopg.AsyncConnection] = []
        self._admin: psycopg.AsyncConnection | None = None
        self._topics: list[uuid.UUID] = []

    async def open(self) -> None:
        self._admin = await psycopg.AsyncConnection.connect(self.cluster.dsn, autocommit=True)
        for _ in range(self._connection_count):
            self._idle.append(await psycopg.AsyncConnection.connect(self.cluster.dsn, autocommit=True))

    async def create_topic(self, name: str, partitions: int) -> int:
        assert self._admin is not None
        topic_id = uuid.uuid4()
        async with self._admin.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO logs VALUES (%s, %s, %s, 0, 0)", [(topic_id, p, name) for p in range(partitions)]
            )
        self._topics.append(topic_id)
        return len(self._topics) - 1

    async def commit(self, topic: int, spec: CommitSpec) -> int:
        topic_id = str(self._topics[topic])
        requests = json.dumps([
            {"batch_number": i, "magic": 2, "topic_id": topic_id, "partition": b.partition,
             "byte_offset": b.byte_offset, "byte_size": b.size, "base_offset": b.base_offset,
             "last_offset": b.last_offset, "timestamp_type": 0, "batch_max_timestamp": b.max_timestamp,
             "producer_id": b.producer_id, "producer_epoch": b.producer_epoch, "base_sequence": b.base_sequence,
             "last_sequence": b.last_sequence}
            for i, b in enumerate(spec.batches)
        ])  # fmt: skip
        connection = self._idle.pop()
        try:
            cursor = await connection.execute(
                "SELECT error FROM commit_file_v1(%s, 1::SMALLINT, %s, %s, now(), %s::JSONB)",
                (spec.object_key, spec.broker_id, spec.file_size, requests),
            )
            answers = [row[0] for row in await cursor.fetchall()]
        finally:
            self._idle.append(connection)
        stored = answers.count("none")
        if (
            stored + answers.count("duplicate_batch") != len(spec.batches)
            or stored != len(spec.batches) - spec.duplicates
        ):
            raise RuntimeError(f"commit_file_v1 {spec.object_key}: {sorted(set(answers))}")
        return stored

    async def find(self, topic: int, positions: Sequence[FindPosition], fetch_max_bytes: int) -> list[FindOutcome]:
        connection = self._idle.pop()
        try:
            cursor = await connection.execute(FIND_BATCHES, {
                "topic_id": self._topics[topic], "partitions": [p.partition for p in positions],
                "offsets": [p.offset for p in positions], "limits": [max(1, p.max_bytes // 1000) for p in positions],
            })  # fmt: skip
            found = {partition: (count, last) for partition, count, last in await cursor.fetchall()}
        finally:
            self._idle.append(connection)
        outcomes = []
        for p in positions:
            count, last = found.get(p.partition, (0, None))
            outcomes.append(FindOutcome(p.partition, count, last + 1 if count else p.offset))
        return outcomes

    async def counters(self) -> Counters:
        assert self._admin is not None
        return await peer_counters(self._admin, self.cluster)

    async def close(self) -> None:
        for connection in [*self._idle, *([self._admin] if self._admin else [])]:
            await connection.close()
        self._idle = []
        self._admin = None


async def peer_counters(admin: psycopg.AsyncConnection, cluster: PostgresCluster) -> Counters:
    """CPU and bytes written of every PostgreSQL process, and the WAL fsyncs so far."""
    await admin.execute("SELECT pg_stat_force_next_flush()")
    cursor = await admin.execute("SELECT wal_sync FROM pg_stat_wal")
    row = await cursor.fetchone()
    postmaster = cluster.postmaster_pid
    return processes_counters([postmaster, *children_of(postmaster)], int(row[0]) if row else -1)
