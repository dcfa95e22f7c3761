"""The ObjectStore contract, run against both backends (a local directory and moto's S3 through a proxy)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from coordinator.config.rules import validated
from coordinator.config.settings import Settings
from coordinator.files.object_store import (
    WAL_KEY_PATTERN,
    ObjectStore,
    ObjectStoreError,
    StoreConfig,
    new_wal_key,
    open_object_store,
    wal_fanout_prefixes,
)
from coordinator.files.object_store import local as local_backend
from coordinator.files.object_store.base import DELETE_BATCH_MAX
from tests.object_stores import ObjectStoreUnderTest, TcpToggleProxy

# Valid on both backends (no key is also a directory), chosen so that per-directory order and
# full-key order could disagree: '-' (0x2D) and '.' (0x2E) sort before '/' (0x2F), '0' after it.
NESTED_KEYS = ["x-y", "x.z", "x/y", "x/y-z/w", "x/y.", "x/y0", "x/yz/q", "x/~", "x0", "xy/1/2", "xy0"]
BAD_KEYS = ["", "/abs", "a//b", "../x", "a/../b", "a/./b", "a/", "a\\b", "a\x00b"]


def list_keys(store: ObjectStore, prefix: str, start_after: str = "") -> list[str]:
    return [info.key for info in store.list(prefix, start_after)]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_put_then_head_gives_size_and_modified_time(object_store: ObjectStore) -> None:
    key = f"{object_store.config.prefix}a/b.bin"
    before_ms = now_ms()
    object_store.put(key, b"0123456789")
    after_ms = now_ms()

    info = object_store.head(key)

    assert info is not None
    assert (info.key, info.size) == (key, 10)
    # S3 (and moto) keep whole seconds.
    assert before_ms - 1000 <= info.last_modified_ms <= after_ms + 1000


def test_put_replaces_an_object_and_accepts_empty_data(object_store: ObjectStore) -> None:
    key = f"{object_store.config.prefix}k"
    object_store.put(key, b"long data")
    object_store.put(key, b"")

    info = object_store.head(key)

    assert info is not None and info.size == 0
    assert list_keys(object_store, object_store.config.prefix) == [key]


def test_head_of_a_missing_object_is_none(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    object_store.put(f"{prefix}dir/file", b"x")

    assert object_store.head(f"{prefix}missing") is None
    assert object_store.head(f"{prefix}dir/missing") is None
    assert object_store.head(f"{prefix}dir") is None  # a key prefix is not an object
    assert object_store.head(f"{prefix}dir/file/under") is None


def test_read_range_gives_the_bytes_asked_fewer_at_the_end_none_if_missing(object_store: ObjectStore) -> None:
    key = f"{object_store.config.prefix}ranges/{uuid.uuid4().hex}"
    data = bytes(range(256)) * 4
    object_store.put(key, data)
    assert object_store.read_range(key, 0, len(data)) == data
    assert object_store.read_range(key, 300, 17) == data[300:317]
    assert object_store.read_range(key, len(data) - 5, 100) == data[-5:]  # the object ends first
    assert object_store.read_range(key, len(data) + 10, 5) == b""
    assert object_store.read_range(f"{key}-missing", 0, 10) is None


def test_list_filters_by_plain_string_prefix(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    keys = ["wal/3/x", "wal/30/y", "wal/3f/aaa.wal", "wal/3f/abc.wal", "wal/4f/z", "wal-x", "other"]
    for key in keys:
        object_store.put(prefix + key, key.encode())

    def listed(sub_prefix: str) -> list[str]:
        return [key.removeprefix(prefix) for key in list_keys(object_store, prefix + sub_prefix)]

    assert listed("wal/3") == ["wal/3/x", "wal/30/y", "wal/3f/aaa.wal", "wal/3f/abc.wal"]
    assert listed("wal/3f/") == ["wal/3f/aaa.wal", "wal/3f/abc.wal"]
    assert listed("wal/3f/aa") == ["wal/3f/aaa.wal"]
    assert listed("wal") == ["wal-x", "wal/3/x", "wal/30/y", "wal/3f/aaa.wal", "wal/3f/abc.wal", "wal/4f/z"]
    assert listed("wal/") == ["wal/3/x", "wal/30/y", "wal/3f/aaa.wal", "wal/3f/abc.wal", "wal/4f/z"]
    assert listed("wal/5") == []
    assert listed("nothing/") == []
    assert listed("other") == ["other"]
    assert listed("other/") == []  # an object is not a directory
    assert list_keys(object_store, "no-such-prefix/") == []


def test_list_gives_sizes_and_modified_times(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    before_ms = now_ms()
    object_store.put(f"{prefix}s/one", b"1")
    object_store.put(f"{prefix}s/three", b"333")
    after_ms = now_ms()

    infos = list(object_store.list(f"{prefix}s/"))

    assert [(info.key, info.size) for info in infos] == [(f"{prefix}s/one", 1), (f"{prefix}s/three", 3)]
    for info in infos:
        assert before_ms - 1000 <= info.last_modified_ms <= after_ms + 1000
        assert object_store.head(info.key) == info


def test_list_is_in_full_key_order_across_nested_prefixes(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    for key in reversed(NESTED_KEYS):
        object_store.put(prefix + key, b"")
    expected = sorted(prefix + key for key in NESTED_KEYS)

    assert list_keys(object_store, prefix) == expected
    # Every prefix of every key, cut anywhere (not only at '/').
    sub_prefixes = sorted({prefix + key[:end] for key in NESTED_KEYS for end in range(len(key) + 1)})
    for sub_prefix in sub_prefixes:
        assert list_keys(object_store, sub_prefix) == [key for key in expected if key.startswith(sub_prefix)], (
            sub_prefix
        )


def test_list_starts_after_any_string(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    for key in NESTED_KEYS:
        object_store.put(prefix + key, b"")
    expected = sorted(prefix + key for key in NESTED_KEYS)
    # Existing keys, strings between them (directory names, with and without '/'), and the extremes.
    starts = [*expected, prefix, f"{prefix}x", f"{prefix}x/", f"{prefix}x/y-", f"{prefix}x/yz/", f"{prefix}x/yz/q0"]
    starts += [f"{prefix}xy/", f"{prefix}xz", "", "~"]

    for start_after in starts:
        assert list_keys(object_store, prefix, start_after) == [key for key in expected if key > start_after], (
            start_after
        )
    assert list_keys(object_store, f"{prefix}x/", f"{prefix}x/y.") == [
        f"{prefix}x/y0",
        f"{prefix}x/yz/q",
        f"{prefix}x/~",
    ]


def test_delete_a_batch_counting_missing_objects_as_deleted(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    keys = [f"{prefix}d/{i}" for i in range(5)]
    for key in keys:
        object_store.put(key, b"x")
    batch = [*keys[:3], f"{prefix}d/missing", f"{prefix}never/there"]

    outcome = object_store.delete(batch)

    assert outcome.deleted == batch and outcome.failed == {}
    assert list_keys(object_store, prefix) == keys[3:]
    assert all(object_store.head(key) is None for key in keys[:3])
    # Again: everything is missing now, and still counts as deleted.
    assert object_store.delete(batch).deleted == batch


def test_delete_of_nothing_does_nothing(object_store: ObjectStore) -> None:
    outcome = object_store.delete([])

    assert outcome.deleted == [] and outcome.failed == {}


def test_delete_takes_at_most_the_batch_maximum(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    object_store.put(f"{prefix}keep", b"x")
    full_batch = [f"{prefix}missing/{i}" for i in range(DELETE_BATCH_MAX)]

    assert object_store.delete(full_batch).deleted == full_batch
    with pytest.raises(ValueError, match=str(DELETE_BATCH_MAX)):
        object_store.delete([*full_batch, f"{prefix}keep"])
    assert object_store.head(f"{prefix}keep") is not None


def test_keys_that_could_escape_or_mean_two_things_are_refused(object_store: ObjectStore) -> None:
    object_store.put("fine", b"x")
    for key in BAD_KEYS:
        with pytest.raises(ValueError):
            object_store.put(key, b"x")
        with pytest.raises(ValueError):
            object_store.head(key)
        with pytest.raises(ValueError):
            object_store.delete(["fine", key])  # refused as a whole: nothing deleted
    assert object_store.head("fine") is not None


def test_outage_fails_every_call_and_the_store_recovers_after(object_store_under_test: ObjectStoreUnderTest) -> None:
    store = object_store_under_test.open()
    key = f"{store.config.prefix}before"
    store.put(key, b"kept")
    calls: dict[str, Callable[[], Any]] = {
        "put": lambda: store.put(f"{store.config.prefix}during", b"x"),
        "head": lambda: store.head(key),
        "head of a missing key": lambda: store.head(f"{store.config.prefix}missing"),
        "list": lambda: list(store.list(store.config.prefix)),
        "delete": lambda: store.delete([key]),
        "delete of a missing key": lambda: store.delete([f"{store.config.prefix}missing"]),
    }

    with object_store_under_test.outage():
        for name, call in calls.items():
            with pytest.raises(ObjectStoreError):
                call()
                pytest.fail(f"{name} did not fail during the outage")

    info = store.head(key)
    assert info is not None and info.size == 4
    store.put(f"{store.config.prefix}after", b"x")
    assert list_keys(store, store.config.prefix) == [f"{store.config.prefix}after", key]
    assert store.delete([key]).deleted == [key]


def test_new_wal_keys_match_the_pattern_and_fall_in_one_fanout_prefix(object_store: ObjectStore) -> None:
    prefix = object_store.config.prefix
    fanout = wal_fanout_prefixes(prefix)
    keys = [new_wal_key(prefix) for _ in range(20)]
    keys.append(new_wal_key(prefix, uuid.UUID(int=0)))
    keys.append(new_wal_key(prefix, uuid.UUID(int=2**128 - 1)))

    assert len(set(fanout)) == 256 and fanout == sorted(fanout)
    for key in keys:
        assert key.startswith(prefix)
        assert re.fullmatch(WAL_KEY_PATTERN, key.removeprefix(prefix)), key
        assert sum(key.startswith(fanout_prefix) for fanout_prefix in fanout) == 1, key
        object_store.put(key, b"wal")
    # What a scan of the fan-out prefixes holding these keys finds (listing all 256 is slow on moto).
    used = sorted({fanout_prefix for fanout_prefix in fanout for key in keys if key.startswith(fanout_prefix)})
    assert [key for fanout_prefix in used for key in list_keys(object_store, fanout_prefix)] == sorted(keys)
    assert list_keys(object_store, next(p for p in fanout if p not in used)) == []


def test_storage_settings_configure_the_same_store(object_store_under_test: ObjectStoreUnderTest) -> None:
    settings = validated(Settings().with_overrides(object_store_under_test.settings))

    config = StoreConfig.from_settings(settings)

    if config.backend == "s3":
        config = dataclasses.replace(config, local_root="")  # the s3 backend ignores it
    assert config == object_store_under_test.config


# The local backend only: its files, directories and root.


@pytest.fixture
def local_store(local_store_under_test: ObjectStoreUnderTest) -> ObjectStore:
    return local_store_under_test.open()


def local_root(store: ObjectStore) -> Path:
    return Path(store.config.local_root)


def test_local_put_leaves_no_temporary_file_and_never_lists_one(local_store: ObjectStore) -> None:
    local_store.put("wal/3f/a.wal", b"data")
    # What a crash between the write and the rename leaves behind.
    (local_root(local_store) / "wal/3f/.tmp-0123").write_bytes(b"torn")

    assert sorted(p.name for p in (local_root(local_store) / "wal/3f").iterdir()) == [".tmp-0123", "a.wal"]
    assert list_keys(local_store, "") == ["wal/3f/a.wal"]
    assert list_keys(local_store, "wal/3f/.") == []
    with pytest.raises(ValueError, match="temporary"):
        local_store.put("wal/3f/.tmp-0123", b"x")


def test_local_root_gone_in_the_middle_of_a_listing_fails_it(local_store_under_test: ObjectStoreUnderTest) -> None:
    store = local_store_under_test.open()
    for key in NESTED_KEYS:
        store.put(key, b"")
    listing = store.list("")
    first = next(listing)

    with local_store_under_test.outage(), pytest.raises(ObjectStoreError):
        list(listing)
    assert first.key == sorted(NESTED_KEYS)[0]


def test_local_root_is_created_at_open_only_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet"
    own_root = open_object_store(StoreConfig(backend="local", local_root=str(root)))
    with pytest.raises(ObjectStoreError, match="unavailable"):
        own_root.delete(["a/b"])  # never "deleted": the root may be a volume that is away
    assert not root.exists()

    store = open_object_store(StoreConfig(backend="local", local_root=str(root), create_root=True))
    store.put("a/b", b"x")

    assert (root / "a" / "b").read_bytes() == b"x"


def test_only_the_embedded_default_root_is_created() -> None:
    assert StoreConfig.from_settings(Settings()).create_root
    assert not StoreConfig.from_settings(Settings(storage_local_root="/srv/objects")).create_root


def test_local_root_gone_makes_every_call_raise_instead_of_reporting_deleted(local_store: ObjectStore) -> None:
    root = local_root(local_store)
    local_store.put("wal/00/x.wal", b"x")
    shutil.rmtree(root)

    with pytest.raises(ObjectStoreError, match=re.escape(str(root))):
        local_store.delete(["wal/00/x.wal"])
    with pytest.raises(ObjectStoreError):
        local_store.head("wal/00/x.wal")
    with pytest.raises(ObjectStoreError):
        local_store.list("")
    with pytest.raises(ObjectStoreError):
        local_store.put("wal/00/y.wal", b"y")
    assert not root.exists()  # the put did not recreate the missing root


def test_local_root_back_or_replaced_between_calls_is_used_as_found(local_store: ObjectStore) -> None:
    # A node restarted while its volume was away made an empty root; the volume then came back over it.
    root = local_root(local_store)
    local_store.put("wal/00/x.wal", b"x")
    away = root.with_name("away")
    root.rename(away)
    root.mkdir()
    root.rmdir()
    away.rename(root)

    assert local_store.head("wal/00/x.wal") is not None
    assert local_store.delete(["wal/00/x.wal"]).deleted == ["wal/00/x.wal"]
    assert not (root / "wal" / "00" / "x.wal").exists()


def test_local_delete_of_a_directory_fails_that_key_only(local_store: ObjectStore) -> None:
    local_store.put("dir/file", b"x")
    local_store.put("other", b"x")

    outcome = local_store.delete(["dir", "other"])

    assert outcome.deleted == ["other"]
    assert list(outcome.failed) == ["dir"] and "dir" in outcome.failed["dir"]
    assert local_store.head("dir/file") is not None


def test_local_put_retries_when_its_directory_vanishes(
    local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = local_backend._write_temp_file
    attempts: list[str] = []

    def write_after_a_concurrent_cleanup(directory: str, data: bytes) -> str:
        attempts.append(directory)
        if len(attempts) == 1:
            os.rmdir(directory)  # as a concurrent cleanup of empty directories would
        return real_write(directory, data)

    monkeypatch.setattr(local_backend, "_write_temp_file", write_after_a_concurrent_cleanup)
    local_store.put("wal/ab/c.wal", b"data")

    assert len(attempts) == 2
    assert (local_root(local_store) / "wal/ab/c.wal").read_bytes() == b"data"


def test_local_list_reads_only_directories_that_can_match(
    local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ["wal/3f/a.wal", "wal/3f/b.wal", "wal/4a/c.wal", "wal/30/d.wal", "other/deep/e"]:
        local_store.put(key, b"")
    root = local_root(local_store)
    real_scandir = os.scandir
    scanned: list[str] = []

    def recording_scandir(path: str) -> Iterator[os.DirEntry[str]]:
        scanned.append(os.path.relpath(path, root))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)  # what the local backend calls

    assert list_keys(local_store, "wal/3f/") == ["wal/3f/a.wal", "wal/3f/b.wal"]
    assert scanned == ["wal/3f"]
    scanned.clear()
    assert list_keys(local_store, "wal/3") == ["wal/30/d.wal", "wal/3f/a.wal", "wal/3f/b.wal"]
    assert scanned == ["wal", "wal/30", "wal/3f"]
    scanned.clear()
    assert list_keys(local_store, "wal/", "wal/3f/a.wal") == ["wal/3f/b.wal", "wal/4a/c.wal"]
    assert scanned == ["wal", "wal/3f", "wal/4a"]  # wal/30 is wholly before start_after


def test_local_list_is_lazy(local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ["a/1", "b/2", "c/3"]:
        local_store.put(key, b"")
    real_scandir = os.scandir
    scanned: list[str] = []

    def recording_scandir(path: str) -> Iterator[os.DirEntry[str]]:
        scanned.append(os.path.basename(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)  # what the local backend calls
    listing = local_store.list("")

    assert next(listing).key == "a/1"
    assert "c" not in scanned


# The S3 backend only: what moto cannot be made to do is forced on the client.


@pytest.fixture
def s3_store(s3_store_under_test: ObjectStoreUnderTest) -> ObjectStore:
    return s3_store_under_test.open()


@pytest.mark.slow
def test_s3_missing_bucket_fails_every_call_naming_it(s3_store_under_test: ObjectStoreUnderTest) -> None:
    config = s3_store_under_test.config
    store = open_object_store(dataclasses.replace(config, s3_bucket="no-such-bucket-here"))
    calls: list[Callable[[], object]] = [
        lambda: store.put("k", b"x"),
        lambda: store.head("k"),  # a bare 404, like a missing key
        lambda: store.list(""),
        lambda: store.delete(["k"]),
    ]
    try:
        for call in calls:
            with pytest.raises(ObjectStoreError, match="no-such-bucket-here"):
                call()
    finally:
        store.close()


@pytest.mark.slow
def test_s3_per_key_delete_errors_are_failures_except_missing_keys(
    s3_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def delete_objects(**request: Any) -> dict[str, Any]:
        assert request["Delete"]["Quiet"] is True
        return {
            "Errors": [
                {"Key": "denied", "Code": "AccessDenied", "Message": "Access Denied"},
                {"Key": "gone", "Code": "NoSuchKey", "Message": "The specified key does not exist."},
            ]
        }

    monkeypatch.setattr(s3_store._client, "delete_objects", delete_objects)  # type: ignore[attr-defined]

    outcome = s3_store.delete(["ok", "denied", "gone"])

    assert outcome.deleted == ["ok", "gone"]
    assert outcome.failed == {"denied": "AccessDenied: Access Denied"}


@pytest.mark.slow
@pytest.mark.parametrize(("code", "status"), [("SlowDown", 503), ("InternalError", 500), ("AccessDenied", 403)])
def test_s3_error_answers_become_object_store_errors(
    s3_store: ObjectStore, monkeypatch: pytest.MonkeyPatch, code: str, status: int
) -> None:
    def put_object(**request: Any) -> dict[str, Any]:
        raise ClientError(
            {"Error": {"Code": code, "Message": "no"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
        )

    monkeypatch.setattr(s3_store._client, "put_object", put_object)  # type: ignore[attr-defined]

    with pytest.raises(ObjectStoreError, match=rf"{code} \(HTTP {status}\).*") as raised:
        s3_store.put("k", b"x")
    assert s3_store.config.s3_bucket in str(raised.value) and s3_store.config.s3_endpoint_url in str(raised.value)


def test_tcp_toggle_proxy_cuts_open_connections_and_listens_again_on_its_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        proxy = TcpToggleProxy("127.0.0.1", upstream.getsockname()[1])
        try:
            held = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            held.sendall(b"ping")
            upstream_side, _ = upstream.accept()
            upstream_side.settimeout(5)
            assert upstream_side.recv(4) == b"ping"
            upstream_side.sendall(b"pong")
            assert held.recv(4) == b"pong"
            port = proxy.port

            proxy.disable()

            assert _read_to_end(held) == b"" and _read_to_end(upstream_side) == b""
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5)
            proxy.enable()
            assert proxy.port == port
            with socket.create_connection(("127.0.0.1", port), timeout=5) as again:
                again.sendall(b"ping")
                upstream_again, _ = upstream.accept()
                assert upstream_again.recv(4) == b"ping"
            held.close()
            upstream_side.close()
            upstream_again.close()
        finally:
            proxy.close()


def _read_to_end(connection: socket.socket) -> bytes:
    """What is left to read until the peer closes (a reset counts as closed)."""
    with contextlib.suppress(ConnectionResetError):
        return connection.recv(65536)
    return b""
