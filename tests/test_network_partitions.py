"""Partitions on a real network (issue #40, item 1): three nodes and three etcd members, each in a network namespace
of its own (tests/netns_cluster.py), cut apart and degraded with packet filters while idempotent producers commit
through the routing client (tests/netns_workload.py). Each scenario checks, Jepsen's way, from what the producers
were told and a read-back at the end:

- nothing acknowledged lost or moved, offsets unique and contiguous per partition (tests/history.py);
- never two leaders of one coordinator acknowledging: no older epoch's acknowledgement after a newer one's began;
- the minority side acknowledges nothing while it is cut off (the scenario names it and from when);
- no session revoked by the peer-death probe (cluster/peer_death.py): a partition makes connects time out, never
  refuse, so a node cut off is waited out by its session, not declared dead;
- everything healed within HEAL_BOUND_S of the heal: every coordinator led with its full ISR, every producer's
  commits acknowledged again.

Two coordinators on three nodes: two nodes lead one each and the third leads none, a pure follower. A scenario's
figures print with -s; `DISKLESS_NETNS_DEGRADE_S=60` runs the degraded network for the issue's full minute, and
`DISKLESS_NETNS_REPORT=FILE` appends each scenario's figures to FILE as a JSON line.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import final

import pytest

from tests.cluster_harness import CLUSTER_SETTINGS, wait_for
from tests.history import History, check_history, first_acknowledged_after, longest_gap_s
from tests.netns import cannot_make_namespaces
from tests.netns_cluster import NetnsCluster
from tests.netns_workload import Call, RoutedLoad, acknowledged_by, outcomes, overlapping_leaders

pytestmark = pytest.mark.slow

NODES, COORDINATORS, PARTITIONS = 3, 2, 4
SESSION_S = int(CLUSTER_SETTINGS["diskless.node.session.timeout.ms"]) / 1000
CUT_S = 10.0  # a partition outlasts the session (2 s) and the ISR's lag bound (4 s): both take effect
DEGRADE_S = float(os.environ.get("DISKLESS_NETNS_DEGRADE_S", "30"))
DEGRADE_LOSS, DEGRADE_DELAY_MS = 0.2, 50
# From the heal to every coordinator led with its full ISR and every producer acknowledged again. What it waits
# for: a follower's next fetch (its reconnect backoff under gRPC, capped by the client's 2 s RPC timeout), the
# catch-up, the leader's ISR expansion written to etcd; a node whose session lapsed registers again first.
HEAL_BOUND_S = 20.0
STEADY_S = 1.0
SESSION_LAPSED = ("session may have lapsed", "let its session expire")  # cluster/controller.py's lines
PEER_DEATH_LINE = "refuses connections"  # cluster/peer_death.py's revocation
# A coordinator's lifecycle died, an exception escaped, or one nobody retrieved (a late answer to a caller gone).
NODE_ALARMS = ("CRITICAL", "Traceback", "never retrieved")
ISR_CHANGE = re.compile(r"ISR \[([\d, ]*)\] -> \[([\d, ]*)\]")  # the leader's line (runtime/replication/leader.py)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    reason = cannot_make_namespaces()
    if reason is not None:
        pytest.skip(f"no network namespaces here: {reason}")
    running = NetnsCluster(tmp_path, size=NODES, coordinators=COORDINATORS).start()
    try:
        yield running
    finally:
        running.print_state()  # shown when the test fails
        running.stop()


@final
@dataclass(slots=True)
class Run:
    """One scenario's history and figures; times are time.monotonic(), figures in seconds from the fault."""

    name: str
    leaders: dict[int, int]  # coordinator -> node, before the fault
    fault_at: float = 0.0
    lines_at_fault: list[int] = field(default_factory=list)  # each node's log length when the fault began
    healed_at: float = 0.0
    heal_s: float = -1.0
    calls: list[Call] = field(default_factory=list)
    history: History = field(default_factory=History)
    figures: dict[str, object] = field(default_factory=dict)

    def acknowledged_during_fault(self, coordinator_id: int) -> int:
        return sum(
            1
            for c in self.calls
            if c.acknowledged and c.coordinator_id == coordinator_id and self.fault_at < c.sent_at < self.healed_at
        )


def _run(cluster: NetnsCluster, name: str, fault: Callable[[Run], None], fault_s: float) -> Run:
    """Load on a new topic, the fault for `fault_s`, the heal, then the checks every scenario shares."""
    topic_id = cluster.create_topic(name, PARTITIONS)
    coordinators = [cluster.coordinator_of(cluster.nodes[0], topic_id, p) for p in range(PARTITIONS)]
    assert sorted(set(coordinators)) == list(range(COORDINATORS)), coordinators
    in_sync = cluster.wait_fully_in_sync()
    run = Run(name, {c: d.node_id for c, d in in_sync.items()})
    lines = [len(node.output) for node in cluster.nodes]
    load = RoutedLoad(cluster.addresses, run.history, topic_id, coordinators).start()
    try:
        started = time.monotonic()
        wait_for("commits flowing", lambda: load.flowing_since(started))
        time.sleep(STEADY_S)
        run.lines_at_fault = [len(node.output) for node in cluster.nodes]
        term_at_fault = cluster.etcd_term()
        fault(run)
        run.fault_at = time.monotonic()
        time.sleep(fault_s)
        cluster.heal()
        run.healed_at = time.monotonic()
        etcd_elections = cluster.etcd_term() - term_at_fault
        cluster.wait_fully_in_sync(HEAL_BOUND_S)
        wait_for("commits flowing after the heal", lambda: load.flowing_since(run.healed_at), timeout_s=HEAL_BOUND_S)
        run.heal_s = round(time.monotonic() - run.healed_at, 2)
        time.sleep(STEADY_S)
    finally:
        load.stop()
    run.calls = list(load.calls)
    checked = check_history(
        run.history, {c: cluster.nodes[d.node_id].stub for c, d in cluster.wait_fully_in_sync().items()}
    )
    overlaps = overlapping_leaders(run.calls)
    revoked = cluster.log_lines(PEER_DEATH_LINE, since=lines)
    alarms = cluster.log_blocks(*NODE_ALARMS)
    epochs_after = {c: d.leader.leader_epoch for c, d in cluster.wait_fully_in_sync().items()}
    run.figures = {
        "scenario": name,
        "fault_s": fault_s,
        "heal_s": run.heal_s,
        "heal_bound_s": HEAL_BOUND_S,
        "calls": len(run.calls),
        "outcomes": outcomes(run.calls),
        "acknowledged": checked.acknowledged,
        "lost": checked.lost,
        "duplicated": checked.duplicated,
        "gaps": checked.gaps,
        "resend_mismatches": checked.resend_mismatches,
        "leaders_before": run.leaders,
        "leader_epochs_after": epochs_after,
        "acknowledged_during_fault": {c: run.acknowledged_during_fault(c) for c in range(COORDINATORS)},
        "longest_gap_s": {
            c: round(longest_gap_s(run.history, [c], run.fault_at, run.healed_at), 2) for c in range(COORDINATORS)
        },
        "etcd_elections_during_fault": etcd_elections,
        "sessions_lapsed": len(cluster.log_lines(*SESSION_LAPSED, since=run.lines_at_fault)),
        "overlapping_leaders": len(overlaps),
        "peer_death_revocations": len(revoked),
        "node_alarms": len(alarms),
    }
    print(f"\n{name}: " + json.dumps(run.figures))
    if os.environ.get("DISKLESS_NETNS_REPORT"):
        with open(os.environ["DISKLESS_NETNS_REPORT"], "a") as report:
            report.write(json.dumps(run.figures) + "\n")
    assert not load.errors, load.errors
    assert checked.clean, checked.problems
    assert not overlaps, overlaps[:10]
    assert not revoked, revoked
    assert not alarms, alarms[:5]
    return run


def _left_isr(cluster: NetnsCluster, run: Run, coordinator_id: int, node_id: int) -> bool:
    """Whether the coordinator's ISR lost the node after the fault began (its lag, or its session): the fault took."""
    for line in cluster.log_lines(f"coordinator {coordinator_id}: ISR [", since=run.lines_at_fault):
        change = ISR_CHANGE.search(line)
        if change is not None:
            before, after = (set(re.findall(r"\d+", group)) for group in change.groups())
            if str(node_id) in before - after:
                return True
    return False


def _follower(run: Run) -> int:
    """A node that leads no coordinator."""
    return min(set(range(NODES)) - set(run.leaders.values()))


def test_leader_cut_from_its_followers_acknowledges_nothing_and_the_other_coordinator_goes_on(
    cluster: NetnsCluster,
) -> None:
    cut: list[int] = []

    def fault(run: Run) -> None:
        cut.append(run.leaders[0])
        cluster.cut_node_from_nodes(run.leaders[0])

    run = _run(cluster, "leader-cut-from-followers", fault, CUT_S)
    leader = cut[0]
    # It still holds its session (etcd reaches it), so nobody else may lead: it must refuse, its ISR shrunk below
    # min.insync.replicas (Kafka's way: unavailable, never acknowledged by one replica).
    assert not acknowledged_by(run.calls, leader, run.fault_at, run.healed_at)
    other = 1
    assert run.leaders[other] != leader
    assert run.acknowledged_during_fault(other) > 0, "the coordinator led on the majority side stopped"


def test_leader_cut_from_etcd_steps_down_within_its_session_and_a_follower_takes_over(cluster: NetnsCluster) -> None:
    cut: list[int] = []

    def fault(run: Run) -> None:
        cut.append(run.leaders[0])
        cluster.cut_node_from_etcd(run.leaders[0])

    run = _run(cluster, "leader-cut-from-etcd", fault, CUT_S)
    leader = cut[0]
    late = acknowledged_by(run.calls, leader, run.fault_at + SESSION_S, run.healed_at)
    assert not late, f"the node cut from etcd acknowledged after its session could have lapsed: {late[:3]}"
    failover = first_acknowledged_after(run.history, run.fault_at + SESSION_S, 0)
    run.figures["failover_s"] = None if failover is None else round(failover + SESSION_S, 2)
    print(f"failover of coordinator 0 from the fault: {run.figures['failover_s']} s")
    assert run.acknowledged_during_fault(0) > 0, "no follower took over coordinator 0 during the cut"


def test_a_follower_cut_off_then_back_rejoins_and_acknowledges_nothing_meanwhile(cluster: NetnsCluster) -> None:
    cut: list[int] = []

    def fault(run: Run) -> None:
        cut.append(_follower(run))
        cluster.isolate_node(cut[0])

    run = _run(cluster, "follower-cut-off", fault, CUT_S)
    assert not acknowledged_by(run.calls, cut[0], run.fault_at, run.healed_at)
    for coordinator_id in range(COORDINATORS):
        assert _left_isr(cluster, run, coordinator_id, cut[0]), f"coordinator {coordinator_id} kept the follower"
        assert run.acknowledged_during_fault(coordinator_id) > 0, f"coordinator {coordinator_id} stopped"


def test_one_way_loss_from_a_leader_to_a_follower_shrinks_the_isr_and_commits_go_on(cluster: NetnsCluster) -> None:
    def fault(run: Run) -> None:
        cluster.network.drop(f"node{run.leaders[0]}", f"node{_follower(run)}")

    run = _run(cluster, "one-way-loss-leader-to-follower", fault, CUT_S)
    assert _left_isr(cluster, run, 0, _follower(run)), "the follower that hears nothing from its leader stayed in"
    assert run.acknowledged_during_fault(0) > 0, "the leader stopped acknowledging"


def test_loss_and_delay_on_every_link_lose_nothing(cluster: NetnsCluster) -> None:
    def fault(run: Run) -> None:
        cluster.network.degrade(DEGRADE_LOSS, DEGRADE_DELAY_MS)

    run = _run(cluster, f"loss-{int(DEGRADE_LOSS * 100)}pct-delay-{DEGRADE_DELAY_MS}ms", fault, DEGRADE_S)
    during = [c for c in run.calls if c.acknowledged and run.fault_at + 1 < c.sent_at < run.healed_at]
    assert during, "nothing committed while degraded"
    # Each acknowledgement crossed a delayed link at least once (the leader's answer to the runner): the delay took.
    fastest_s = min(c.answered_at - c.sent_at for c in during)
    print(f"fastest acknowledgement while degraded: {fastest_s * 1000:.0f} ms")
    assert fastest_s >= DEGRADE_DELAY_MS / 1000, fastest_s
