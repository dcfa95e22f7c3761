"""A local etcd for tests and benchmarks: Debian's etcd-server, started on free loopback ports with its own data
directory (never a system service). Members can be killed and restarted one by one (their data directory kept).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ETCD_START_TIMEOUT_S = 20.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"  # another address where the member runs in a network namespace (tests/netns_cluster.py)
    command_prefix: tuple[str, ...] = ()  # what precedes etcd's command line there (`ip netns exec NAME`)

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def status(self, timeout_s: float = 1.0) -> dict[str, Any] | None:
        """The member's own Status (etcd's maintenance API through its JSON gateway), or None if it does not answer."""
        if not self.running:
            return None
        request = urllib.request.Request(f"http://{self.endpoint}/v3/maintenance/status", data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                status: dict[str, Any] = json.loads(answer.read())
        except (OSError, ValueError):  # refused, timed out (URLError is an OSError), or not JSON
            return None
        return status

    def stop(self) -> None:
        """kill -9: etcd's own WAL makes a member's restart lose nothing it acknowledged."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


class EtcdCluster:
    """`size` etcd members on loopback; `endpoints` is what `diskless serve --etcd` takes."""

    def __init__(self, directory: Path, size: int = 1, election_timeout_ms: int | None = None) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError(
                "etcd is not installed: the README's test command installs it (apt-get install etcd-server)"
            )
        self._binary = binary
        # etcd's own default (1000 ms, its heartbeat a tenth) unless a test scales it with its short node sessions.
        self._election_timeout_ms = election_timeout_ms
        self.members = [EtcdMember(f"etcd{i}", _free_port(), _free_port(), directory / f"etcd{i}") for i in range(size)]

    @property
    def endpoints(self) -> str:
        return ",".join(member.endpoint for member in self.members)

    def start(self) -> None:
        for member in self.members:
            self._launch(member)
        self._wait_healthy(self.members)

    def restart(self, member: EtcdMember) -> None:
        """Starts a stopped member again on its ports and data directory (it rejoins its cluster)."""
        member.stop()
        self._launch(member)
        self._wait_healthy([member])

    def leader(self) -> EtcdMember | None:
        """The member leading etcd's raft now (the one whose Status names itself leader), or None during an election."""
        for member in self.members:
            status = member.status() or {}
            leader_id = status.get("leader", "0")
            if leader_id != "0" and leader_id == status.get("header", {}).get("member_id"):
                return member
        return None

    def _launch(self, member: EtcdMember) -> None:
        initial = ",".join(f"{m.name}=http://{m.host}:{m.peer_port}" for m in self.members)
        member.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(member.data_dir.parent / f"{member.name}.log", "ab")  # noqa: SIM115 - the process keeps it
        timing = []
        if self._election_timeout_ms is not None:
            timing = ["--election-timeout", str(self._election_timeout_ms),
                      "--heartbeat-interval", str(max(10, self._election_timeout_ms // 10))]  # fmt: skip
        member.process = subprocess.Popen(
            [
                *member.command_prefix,
                self._binary,
                "--name", member.name,
                "--data-dir", str(member.data_dir),
                "--listen-client-urls", f"http://{member.host}:{member.client_port}",
                "--advertise-client-urls", f"http://{member.host}:{member.client_port}",
                "--listen-peer-urls", f"http://{member.host}:{member.peer_port}",
                "--initial-advertise-peer-urls", f"http://{member.host}:{member.peer_port}",
                "--initial-cluster", initial,
                "--initial-cluster-state", "new",
                *timing,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def _wait_healthy(self, members: list[EtcdMember]) -> None:
        deadline = time.monotonic() + ETCD_START_TIMEOUT_S
        for member in members:
            while True:
                assert member.process is not None
                if member.process.poll() is not None:
                    raise RuntimeError(f"etcd member {member.name} exited with {member.process.returncode}")
                try:
                    with socket.create_connection((member.host, member.client_port), timeout=0.5):
                        break
                except OSError as error:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"etcd member {member.name} did not listen within {ETCD_START_TIMEOUT_S} s"
                        ) from error
                    time.sleep(0.05)

    def stop(self) -> None:
        for member in self.members:
            member.stop()
