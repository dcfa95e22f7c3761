"""The object-store interface, its configuration and the rules every key obeys."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coordinator.config.settings import Settings

DELETE_BATCH_MAX = 1000  # S3's DeleteObjects limit; the local backend uses the same bound


class ObjectStoreError(Exception):
    """The store could not be reached or refused a request; the caller retries later."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str  # relative to the local root, or the full key in the bucket (prefix included)
    size: int
    last_modified_ms: int


@dataclass(slots=True)
class DeleteOutcome:
    """Keys deleted (an object already missing counts as deleted) and keys that failed, with why."""

    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Everything needed to open a store; picklable, so Spark executors open their own."""

    backend: str  # "local" or "s3"
    local_root: str = ""
    s3_bucket: str = ""
    s3_prefix: str = ""
    s3_endpoint_url: str = ""
    s3_region: str = "us-east-1"
    request_timeout_ms: int = 30000
    create_root: bool = False  # local: create the root if missing (only the embedded default, under the data dir)

    @classmethod
    def from_settings(cls, settings: Settings) -> StoreConfig:
        return cls(
            backend=settings.storage_backend,
            local_root=str(settings.storage_local_directory),
            s3_bucket=settings.storage_s3_bucket,
            s3_prefix=settings.storage_s3_prefix,
            s3_endpoint_url=settings.storage_s3_endpoint_url,
            s3_region=settings.storage_s3_region,
            request_timeout_ms=settings.storage_request_timeout_ms,
            create_root=settings.storage_backend == "local" and not settings.storage_local_root,
        )

    @property
    def prefix(self) -> str:
        """Where brokers write WAL files and where the orphan scan looks ('' for the local backend)."""
        return self.s3_prefix if self.backend == "s3" else ""


class ObjectStore(Protocol):
    """Blocking calls; every one raises ObjectStoreError when the store cannot answer."""

    config: StoreConfig

    def put(self, key: str, data: bytes) -> None: ...

    def head(self, key: str) -> ObjectInfo | None:
        """The object's facts, or None if it does not exist."""
        ...

    def read_range(self, key: str, start: int, size: int) -> bytes | None:
        """`size` bytes of the object from `start`, or None if it does not exist; fewer if it ends before."""
        ...

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        """Objects whose key starts with `prefix` (a plain string prefix, not only a folder), by key order."""
        ...

    def delete(self, keys: Sequence[str]) -> DeleteOutcome:
        """Deletes up to DELETE_BATCH_MAX keys; a missing object counts as deleted."""
        ...

    def close(self) -> None: ...
