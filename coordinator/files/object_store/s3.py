"""The S3 backend (AWS or any S3-compatible endpoint), through boto3."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar, final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from coordinator.files.object_store.base import (
    DELETE_BATCH_MAX,
    DeleteOutcome,
    ObjectInfo,
    ObjectStoreError,
    StoreConfig,
)
from coordinator.machine.object_keys import key_problem

# Attempts per request, first included (botocore's standard mode: backoff with jitter, transient errors only).
# Small, because every caller retries an ObjectStoreError later anyway.
MAX_ATTEMPTS = 3
# Answers meaning "no such object" rather than an error: HEAD's bare 404 and DeleteObjects' per-key code.
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
MISSING_BUCKET_CODE = "NoSuchBucket"

_Result = TypeVar("_Result")

# Clients are thread-safe, sessions are not: clients are made under the lock from one session, which
# loads S3's service model once per process instead of once per store (a tenth of a second each).
_SESSION_LOCK = threading.Lock()
_session: boto3.session.Session | None = None


def _shared_session() -> boto3.session.Session:
    global _session
    if _session is None:
        _session = boto3.session.Session()
    return _session


@final
class S3ObjectStore:
    """Keys are full keys in `config.s3_bucket` (the caller includes `config.s3_prefix`).

    Credentials come from boto3's usual chain (environment, profile, instance role).
    Every failure to get an answer (connection, timeout, throttling, 5xx, a missing
    bucket, a refused request) raises ObjectStoreError after botocore's own retries.
    """

    def __init__(self, config: StoreConfig) -> None:
        if not config.s3_bucket:
            raise ValueError("the S3 object store needs a bucket")
        self.config = config
        self._bucket = config.s3_bucket
        timeout_s = config.request_timeout_ms / 1000
        client_config = Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            # total_max_attempts counts the first attempt; botocore's max_attempts would not.
            retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
        )
        try:
            with _SESSION_LOCK:
                self._client: Any = _shared_session().client(
                    "s3",
                    region_name=config.s3_region,
                    endpoint_url=config.s3_endpoint_url or None,
                    config=client_config,
                )
        except BotoCoreError as error:
            raise ObjectStoreError(f"cannot create the S3 client of bucket {self._bucket}: {error}") from error
        self._endpoint = self._client.meta.endpoint_url

    def put(self, key: str, data: bytes) -> None:
        _check_key(key)
        self._request("put", self._where(key), self._client.put_object, Bucket=self._bucket, Key=key, Body=data)

    def head(self, key: str) -> ObjectInfo | None:
        _check_key(key)
        try:
            response = self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as error:
            if _error_code(error) not in NOT_FOUND_CODES:
                raise self._error("head", self._where(key), error) from error
            # A HEAD error has no body: a missing bucket is a bare 404 too, and must not read as a missing object.
            self._request("head bucket", self._where(""), self._client.head_bucket, Bucket=self._bucket)
            return None
        except BotoCoreError as error:
            raise self._error("head", self._where(key), error) from error
        return ObjectInfo(key, response["ContentLength"], _epoch_ms(response["LastModified"]))

    def read_range(self, key: str, start: int, size: int) -> bytes | None:
        _check_key(key)
        if start < 0 or size < 0:
            raise ValueError(f"read of {key!r}: start {start} and size {size} must be >= 0")
        if size == 0:
            return b"" if self.head(key) is not None else None
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=key, Range=f"bytes={start}-{start + size - 1}")
            body: bytes = response["Body"].read()
        except ClientError as error:
            code = _error_code(error)
            if code == "InvalidRange":  # past the end: the object holds nothing there
                return b""
            if code not in NOT_FOUND_CODES:
                raise self._error("read", self._where(key), error) from error
            return None
        except BotoCoreError as error:
            raise self._error("read", self._where(key), error) from error
        return body

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        """Objects whose key starts with `prefix`, by key order; the first page is fetched before returning."""
        arguments: dict[str, str] = {"Bucket": self._bucket, "Prefix": prefix}
        if start_after:
            arguments["StartAfter"] = start_after
        pages = iter(self._client.get_paginator("list_objects_v2").paginate(**arguments))
        first_page = self._request("list", self._where(f"{prefix}*"), next, pages, None)
        return self._list(prefix, first_page, pages)

    def delete(self, keys: Sequence[str]) -> DeleteOutcome:
        if len(keys) > DELETE_BATCH_MAX:
            raise ValueError(f"cannot delete {len(keys)} objects in one call (at most {DELETE_BATCH_MAX})")
        for key in keys:
            _check_key(key)
        if not keys:
            return DeleteOutcome()  # S3 refuses an empty DeleteObjects
        objects = [{"Key": key} for key in dict.fromkeys(keys)]
        response = self._request(
            "delete",
            f"{len(objects)} keys in {self._where('')}",
            self._client.delete_objects,
            Bucket=self._bucket,
            Delete={"Objects": objects, "Quiet": True},
        )
        failed: dict[str, str] = {}
        # Quiet mode reports only failures; a key already missing is not one (S3 does not report it at all).
        for error in response.get("Errors", []):
            if error.get("Code") not in NOT_FOUND_CODES:
                failed[error["Key"]] = f"{error.get('Code')}: {error.get('Message', '')}"
        return DeleteOutcome(deleted=[key for key in keys if key not in failed], failed=failed)

    def close(self) -> None:
        self._client.close()

    def _list(
        self, prefix: str, first_page: dict[str, Any] | None, pages: Iterator[dict[str, Any]]
    ) -> Iterator[ObjectInfo]:
        page = first_page
        while page is not None:
            for item in page.get("Contents", []):
                yield ObjectInfo(item["Key"], item["Size"], _epoch_ms(item["LastModified"]))
            page = self._request("list", self._where(f"{prefix}*"), next, pages, None)

    def _request(self, operation: str, target: str, call: Callable[..., _Result], *args: Any, **kwargs: Any) -> _Result:
        try:
            return call(*args, **kwargs)
        except ParamValidationError as error:
            raise ValueError(f"S3 {operation} of {target}: {error}") from error
        except (ClientError, BotoCoreError) as error:
            raise self._error(operation, target, error) from error

    def _where(self, key: str) -> str:
        return f"s3://{self._bucket}/{key}"

    def _error(self, operation: str, target: str, error: Exception) -> ObjectStoreError:
        if isinstance(error, ClientError):
            code = _error_code(error)
            if code == MISSING_BUCKET_CODE or (operation == "head bucket" and code in NOT_FOUND_CODES):
                return ObjectStoreError(f"S3 bucket {self._bucket} does not exist at {self._endpoint}")
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            detail = f"{code} (HTTP {status}): {error.response.get('Error', {}).get('Message', '')}"
        else:
            detail = str(error)
        return ObjectStoreError(f"S3 {operation} of {target} at {self._endpoint} failed: {detail}")


def _check_key(key: str) -> None:
    problem = key_problem(key)
    if problem is not None:
        raise ValueError(problem)


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of boto3's timezone-aware datetime."""
    return round(moment.timestamp() * 1000)
