"""The PostgreSQL peers, by system name: `postgres` (faithful to Inkless) and `postgres-simple` (before #16)."""

from __future__ import annotations

from pathlib import Path

from bench.postgres_inkless_system import INKLESS_SCHEMA, PostgresPeerSystem
from bench.postgres_system import SIMPLE_SCHEMA, PostgresCluster, PostgresSimpleSystem
from bench.systems import System

PEER_SCHEMAS = {"postgres": INKLESS_SCHEMA, "postgres-simple": SIMPLE_SCHEMA}


def peer_cluster(name: str, directory: Path, install: bool) -> PostgresCluster:
    return PostgresCluster(directory, install, PEER_SCHEMAS[name])


def peer_system(name: str, cluster: PostgresCluster, brokers: int, consumers: int) -> System:
    if name == "postgres-simple":
        return PostgresSimpleSystem(cluster, brokers + consumers + 1)  # one connection per broker and consumer
    return PostgresPeerSystem(cluster, brokers)
