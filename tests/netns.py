"""A real network for tests: one Linux network namespace per process, each with its own address on a bridge in the
root namespace, and faults on its links (Jepsen's way: packet filters in each namespace, never a killed process).

Layout, for subnet 10.77.S.0/24 (S is the first number whose bridge `dlnbS` did not exist, so two test runs at once
take two subnets): the bridge holds 10.77.S.1 (the test runner, in the root namespace, reaches every process through
it); namespace `dlnsS-NAME` holds `eth0` with its own address, one end of a veth pair whose other end is on the bridge.

Faults are iptables rules inside the namespaces (DROP, never REJECT: a partition makes a connect time out, it does
not refuse it). This machine's kernel has no `sch_netem`, so `tc netem` cannot be used: loss is iptables' `statistic`
match, and delay is an NFQUEUE rule whose packets a small process in the namespace holds for the delay before it
accepts them (tests/netns_delay.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import final

SUBNET_PREFIX = "10.77"
SUBNETS = range(1, 250)  # 10.77.S.0/24: one per network made at once
DELAY_QUEUE = 0  # the NFQUEUE number the delay process of each namespace binds
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cannot_make_namespaces() -> str | None:
    """Why this machine cannot run the harness (one line), or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 iptables)"
    probe = f"dlprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        rule = subprocess.run(
            ["ip", "netns", "exec", probe, "iptables", "-w", "-A", "INPUT", "-m", "statistic", "--mode", "random",
             "--probability", "0.5", "-j", "DROP"],
            capture_output=True, text=True,
        )  # fmt: skip
        if rule.returncode != 0:
            return f"iptables cannot filter in a namespace: {rule.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


@final
@dataclass(slots=True)
class Namespace:
    name: str  # the short name the test gives it ("node0", "etcd1")
    netns: str  # the kernel's name of the namespace
    address: str
    outside: str  # its veth's end on the bridge
    delayer: subprocess.Popen[bytes] | None = None

    def exec_prefix(self) -> tuple[str, ...]:
        """What precedes a command to run it inside the namespace."""
        return ("ip", "netns", "exec", self.netns)

    def iptables(self, *rule: str) -> None:
        run(*self.exec_prefix(), "iptables", "-w", *rule)


@final
@dataclass(slots=True)
class Network:
    """Namespaces on one bridge; `close()` removes them all (processes inside must be ended first)."""

    subnet: int
    bridge: str
    runner_address: str  # the bridge's own address: the test runner's side
    namespaces: dict[str, Namespace] = field(default_factory=dict)

    @classmethod
    def make(cls) -> Network:
        for subnet in SUBNETS:
            bridge = f"dlnb{subnet}"
            if subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], capture_output=True).returncode == 0:
                break  # the bridge's name is the lock on the subnet: made here, nobody else's
        else:
            raise RuntimeError("no free subnet for a test network")
        network = cls(subnet, bridge, f"{SUBNET_PREFIX}.{subnet}.1")
        try:
            run("ip", "addr", "add", f"{network.runner_address}/24", "dev", bridge)
            run("ip", "link", "set", bridge, "up")
        except BaseException:
            network.close()
            raise
        return network

    def add(self, name: str) -> Namespace:
        """A namespace with the next address, its loopback up, linked to the bridge."""
        index = len(self.namespaces)
        outside = f"dl{self.subnet}v{index}"  # interface names are at most 15 characters
        namespace = Namespace(name, f"dlns{self.subnet}-{name}", f"{SUBNET_PREFIX}.{self.subnet}.{10 + index}", outside)
        run("ip", "netns", "add", namespace.netns)
        self.namespaces[name] = namespace
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace.netns)
        run("ip", "link", "set", outside, "master", self.bridge, "up")
        inside = namespace.exec_prefix()
        run(*inside, "ip", "addr", "add", f"{namespace.address}/24", "dev", "eth0")
        run(*inside, "ip", "link", "set", "eth0", "up")
        run(*inside, "ip", "link", "set", "lo", "up")
        return namespace

    def __getitem__(self, name: str) -> Namespace:
        return self.namespaces[name]

    # ------------------------------------------------------------------ faults

    def drop(self, source: str, destination: str) -> None:
        """Every packet from `source` to `destination` is lost (one way: the answers still go)."""
        self[source].iptables("-A", "OUTPUT", "-d", self[destination].address, "-j", "DROP")

    def cut(self, one: str, others: list[str]) -> None:
        """No packet between `one` and any of `others`, either way."""
        for other in others:
            self.drop(one, other)
            self.drop(other, one)

    def lose(self, source: str, destination: str, probability: float) -> None:
        """Each packet from `source` to `destination` is lost with `probability` (one way)."""
        self[source].iptables(
            "-A", "OUTPUT", "-d", self[destination].address, "-m", "statistic", "--mode", "random",
            "--probability", str(probability), "-j", "DROP",
        )  # fmt: skip

    def degrade(self, loss: float, delay_ms: int) -> None:
        """Every link, the runner's included: each packet a namespace sends is lost with `loss`, and those that go
        wait `delay_ms` (the delay process holds them) before they leave."""
        for namespace in self.namespaces.values():
            namespace.iptables(
                "-A", "OUTPUT", "-o", "eth0", "-m", "statistic", "--mode", "random", "--probability", str(loss),
                "-j", "DROP",
            )  # fmt: skip
            if delay_ms > 0:
                self._start_delayer(namespace, delay_ms)
                namespace.iptables(
                    "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", str(DELAY_QUEUE), "--queue-bypass"
                )

    def _start_delayer(self, namespace: Namespace, delay_ms: int) -> None:
        namespace.delayer = subprocess.Popen(
            [*namespace.exec_prefix(), sys.executable, "-m", "tests.netns_delay", str(DELAY_QUEUE), str(delay_ms)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert namespace.delayer.stdout is not None
        ready = namespace.delayer.stdout.readline()  # it binds the queue before the rule sends packets to it
        if b"bound" not in ready:
            raise RuntimeError(f"the delay process of {namespace.name} did not start: {ready!r}")

    def heal(self) -> None:
        """Every rule removed, every delay process ended: the network as made."""
        for namespace in self.namespaces.values():
            namespace.iptables("-F")
            if namespace.delayer is not None:
                namespace.delayer.kill()
                namespace.delayer.wait(timeout=10)
                namespace.delayer = None

    def close(self) -> None:
        for namespace in self.namespaces.values():
            if namespace.delayer is not None:
                namespace.delayer.kill()
                namespace.delayer.wait(timeout=10)
            subprocess.run(["ip", "link", "del", namespace.outside], capture_output=True)  # and its peer inside
            subprocess.run(["ip", "netns", "del", namespace.netns], capture_output=True)
        self.namespaces.clear()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
