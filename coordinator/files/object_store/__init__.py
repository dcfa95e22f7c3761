"""Object storage of WAL files: one interface, a local-directory backend and an S3 backend.

The coordinator's deletion worker, the orphan scan (on Spark executors), the
tests and the benchmark all go through `ObjectStore`. Calls are blocking
(boto3 is); the coordinator runs them off its event loop.
"""

from coordinator.files.object_store.base import (
    DeleteOutcome,
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    StoreConfig,
)
from coordinator.machine.object_keys import WAL_KEY_PATTERN, key_problem, new_wal_key, wal_fanout_prefixes


def open_object_store(config: StoreConfig) -> ObjectStore:
    """Opens the configured backend (boto3 is imported only for s3)."""
    if config.backend == "local":
        from coordinator.files.object_store.local import LocalObjectStore

        return LocalObjectStore(config)
    if config.backend == "s3":
        from coordinator.files.object_store.s3 import S3ObjectStore

        return S3ObjectStore(config)
    raise ValueError(f"unknown object store backend {config.backend!r} (local or s3)")


__all__ = [
    "WAL_KEY_PATTERN",
    "DeleteOutcome",
    "ObjectInfo",
    "ObjectStore",
    "ObjectStoreError",
    "StoreConfig",
    "key_problem",
    "new_wal_key",
    "open_object_store",
    "wal_fanout_prefixes",
]
