"""Object stores for tests: a moto S3 server, a TCP proxy to cut it off, and fixtures over both backends.

Registered as a pytest plugin by tests/conftest.py. Fixtures:

- `object_store_under_test` (parametrized, ids local/s3) -> ObjectStoreUnderTest with `.config`,
  `.settings` (the `diskless.storage.*` properties of a coordinator), `.open()` and `.outage()`;
- `object_store_config`: that fixture's `.config` (same parameter, so both can be used together);
- `object_store`: that fixture's store, opened (closed at teardown);
- `local_store_under_test`, `s3_store_under_test`: one backend only;
- `moto_server` (session): the S3 endpoint. While it runs, boto3's credential chain (this process's
  and every subprocess started meanwhile) sees fake keys, never real ones.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

from coordinator.files.object_store import ObjectStore, StoreConfig, open_object_store

MOTO_START_TIMEOUT_S = 30
MOTO_START_ATTEMPTS = 3  # the free port we picked may be taken before moto binds it
# Short, so a request cut off by an outage fails fast instead of waiting out the production default.
TEST_REQUEST_TIMEOUT_MS = 5000
TEST_S3_PREFIX = "cluster-a/"
TEST_S3_REGION = "us-east-1"
FAKE_AWS_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": TEST_S3_REGION,
}
# Anything that could send a test to a real account or endpoint, or through an HTTP proxy.
REAL_AWS_VARIABLES = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
PROXY_BUFFER_BYTES = 65536
PROXY_POLL_S = 0.05


def storage_settings(config: StoreConfig) -> dict[str, str]:
    """The `diskless.storage.*` properties of a coordinator process that opens `config`."""
    settings = {
        "diskless.storage.backend": config.backend,
        "diskless.storage.request.timeout.ms": str(config.request_timeout_ms),
    }
    if config.backend == "local":
        settings["diskless.storage.local.root"] = config.local_root
    else:
        settings["diskless.storage.s3.bucket"] = config.s3_bucket
        settings["diskless.storage.s3.prefix"] = config.s3_prefix
        settings["diskless.storage.s3.endpoint.url"] = config.s3_endpoint_url
        settings["diskless.storage.s3.region"] = config.s3_region
    return settings


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TcpToggleProxy:
    """A TCP proxy on 127.0.0.1 in front of `upstream`: `disable()` cuts it off, `enable()` restores it.

    Disabled, the port refuses connections and every open one is closed; enabled again, it
    listens on the same port, so clients configured with `endpoint_url` reconnect unchanged.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._accept_thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._pumps: set[threading.Thread] = set()
        self.enable()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def enabled(self) -> bool:
        return self._listener is not None

    def enable(self) -> None:
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # The closed connections of the previous listener may linger in TIME_WAIT on this port.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._stop = threading.Event()
        self._accept_thread = threading.Thread(
            target=self._accept, args=(listener, self._stop), name=f"proxy-{self.port}", daemon=True
        )
        self._accept_thread.start()

    def disable(self) -> None:
        """Refuses new connections and closes the open ones; returns once both are true."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        self._stop.set()
        assert self._accept_thread is not None
        self._accept_thread.join()
        listener.close()  # connections still in the backlog are reset
        with self._lock:
            connections, pumps = list(self._connections), list(self._pumps)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)  # its pump sees EOF, stops and closes both ends
        for pump in pumps:
            pump.join(timeout=5)

    def close(self) -> None:
        self.disable()

    def _accept(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            readable, _, _ = select.select([listener], [], [], PROXY_POLL_S)
            if not readable:
                continue
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()  # as a dead upstream would: the client sees the connection drop
                continue
            upstream.settimeout(None)
            pump = threading.Thread(target=self._pump, args=(client, upstream), daemon=True)
            with self._lock:
                self._connections.update((client, upstream))
                self._pumps.add(pump)
            pump.start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        peer = {client: upstream, upstream: client}
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [])
                for source in readable:
                    data = source.recv(PROXY_BUFFER_BYTES)
                    if not data:
                        return
                    peer[source].sendall(data)
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.difference_update((client, upstream))
                self._pumps.discard(threading.current_thread())
            client.close()
            upstream.close()


@dataclass(slots=True)
class MotoServer:
    port: int
    process: subprocess.Popen[bytes]
    _client: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> Any:
        """A boto3 S3 client straight to moto (no proxy), for setting up buckets; made once, it is thread-safe."""
        if self._client is None:
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint_url, region_name=TEST_S3_REGION
            )
        return self._client


def _start_moto(log_path: Path) -> MotoServer:
    for _ in range(MOTO_START_ATTEMPTS):
        port = free_port()
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + MOTO_START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                time.sleep(0.05)
                continue
            return MotoServer(port, process)
        process.kill()
        process.wait()
    raise RuntimeError(f"moto server did not start:\n{log_path.read_text(errors='replace')}")


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto's S3 in server mode on 127.0.0.1, shared by the session (tests use buckets of their own)."""
    with pytest.MonkeyPatch.context() as environment:
        for name, value in FAKE_AWS_ENVIRONMENT.items():
            environment.setenv(name, value)
        for name in REAL_AWS_VARIABLES:
            environment.delenv(name, raising=False)
        no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
        environment.setenv("NO_PROXY", no_proxy)
        server = _start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
        try:
            yield server
        finally:
            if server._client is not None:
                server._client.close()
            server.process.terminate()
            try:
                server.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait()


@dataclass(slots=True)
class ObjectStoreUnderTest:
    """A fresh store of one backend: its config, its coordinator settings, an outage switch."""

    config: StoreConfig
    proxy: TcpToggleProxy | None = None  # s3 only: between the store and moto
    _stores: list[ObjectStore] = field(default_factory=list)

    @property
    def backend(self) -> str:
        return self.config.backend

    @property
    def settings(self) -> dict[str, str]:
        """The `diskless.storage.*` properties of a coordinator process using this store."""
        return storage_settings(self.config)

    def open(self) -> ObjectStore:
        """Opens a store on the config (closed at teardown)."""
        store = open_object_store(self.config)
        self._stores.append(store)
        return store

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """Makes the store unreachable inside the block: the local root moved away, or the S3 proxy cut off."""
        if self.proxy is not None:
            self.proxy.disable()
            try:
                yield
            finally:
                self.proxy.enable()
            return
        root = Path(self.config.local_root)
        away = root.with_name(f"{root.name}.away")
        root.rename(away)
        try:
            yield
        finally:
            away.rename(root)

    def close(self) -> None:
        for store in self._stores:
            store.close()
        if self.proxy is not None:
            self.proxy.close()


@pytest.fixture
def local_store_under_test(tmp_path: Path) -> Iterator[ObjectStoreUnderTest]:
    root = tmp_path / "objects"
    root.mkdir()
    under_test = ObjectStoreUnderTest(
        StoreConfig(backend="local", local_root=str(root), request_timeout_ms=TEST_REQUEST_TIMEOUT_MS)
    )
    yield under_test
    under_test.close()


@pytest.fixture
def s3_store_under_test(moto_server: MotoServer) -> Iterator[ObjectStoreUnderTest]:
    """A fresh bucket with prefix 'cluster-a/', reached through a TcpToggleProxy of the test's own."""
    bucket = f"test-{uuid.uuid4().hex[:20]}"
    moto_server.client.create_bucket(Bucket=bucket)
    proxy = TcpToggleProxy("127.0.0.1", moto_server.port)
    under_test = ObjectStoreUnderTest(
        StoreConfig(
            backend="s3",
            s3_bucket=bucket,
            s3_prefix=TEST_S3_PREFIX,
            s3_endpoint_url=proxy.endpoint_url,
            s3_region=TEST_S3_REGION,
            request_timeout_ms=TEST_REQUEST_TIMEOUT_MS,
        ),
        proxy=proxy,
    )
    yield under_test
    under_test.close()


# The s3 cases start moto's server (once a session): they are in the slow lane, the local ones are not.
@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def object_store_under_test(request: pytest.FixtureRequest) -> ObjectStoreUnderTest:
    under_test: ObjectStoreUnderTest = request.getfixturevalue(f"{request.param}_store_under_test")
    return under_test


@pytest.fixture
def object_store_config(object_store_under_test: ObjectStoreUnderTest) -> StoreConfig:
    return object_store_under_test.config


@pytest.fixture
def object_store(object_store_under_test: ObjectStoreUnderTest) -> ObjectStore:
    return object_store_under_test.open()
