"""The pure parts of repair from replicas (issue #29 item 2): a damaged replica leaves the ISR only when a healthy
in-sync copy is live (handing leadership to it), an ISR read before that change cannot bring it back, and the
damaged files are set aside in bounded folders, never deleted on the spot."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.cluster.assignment import NO_LEADER, CoordinatorAssignment, isr_changed
from coordinator.cluster.damaged_replica import without_damaged
from coordinator.machine import records
from coordinator.runtime.log.damage import CorruptLogError
from coordinator.runtime.log.frame import encode_frame
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.shard.damaged_files import damaged_folders, set_aside
from coordinator.runtime.shard.loading import NotThisClustersLog
from coordinator.runtime.shard.repair import repairable_from_replica, where_damaged
from coordinator.runtime.shard.state_opening import LoadFailed
from tests.test_incarnations import INCARNATIONS, assignments


@given(assignments(), st.integers(0, 5), st.dictionaries(st.integers(0, 5), INCARNATIONS))
def test_a_damaged_replica_leaves_the_isr_only_for_a_healthy_live_member_which_then_leads(
    before: CoordinatorAssignment, node: int, live: dict[int, str]
) -> None:
    after = without_damaged(before, node, live)
    if node not in before.isr:
        assert after is None
        return
    healthy = [n for n in before.isr if n != node and before.same_replica(n, live)]
    if not healthy:
        assert isinstance(after, str) and "no healthy copy" in after, "nothing changes: it waits, unavailable"
        return
    assert isinstance(after, CoordinatorAssignment)
    assert after.isr == tuple(n for n in before.isr if n != node)
    assert after.leader != node and after.leader in after.isr
    if before.leader in after.isr:  # a follower left: electing a leader that died is the refresh's (after_nodes_lost)
        assert (after.leader, after.leader_epoch) == (before.leader, before.leader_epoch)
    else:  # it led (or none did): the first healthy member in replica order leads, in a new epoch
        assert before.same_replica(after.leader, live)
        assert after.leader == next(n for n in before.replicas if n in healthy)
        assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1
    assert dict(after.incarnations) == {n: i for n, i in before.incarnations if n != node}


def test_a_damaged_leader_hands_over_and_the_last_member_stays() -> None:
    current = CoordinatorAssignment((0, 1, 2), 0, 4, 9, (0, 1, 2), ((0, "a.1"), (1, "b.1"), (2, "c.1")))
    handed = without_damaged(current, 0, {0: "a.1", 1: "b.2", 2: "c.1"})  # node 1 restarted as another incarnation
    assert isinstance(handed, CoordinatorAssignment)
    assert (handed.leader, handed.leader_epoch, handed.isr) == (2, 5, (1, 2))
    alone = CoordinatorAssignment((0, 1, 2), 0, 4, 9, (0,), ((0, "a.1"),))
    assert isinstance(without_damaged(alone, 0, {0: "a.1", 1: "b.1", 2: "c.1"}), str)
    assert without_damaged(current, 0, {0: "a.1"}) == (
        "no healthy copy: no other in-sync replica is alive (ISR [0, 1, 2], nodes [1, 2] not live as the replica "
        "the ISR knew)"
    )
    assert NO_LEADER not in handed.isr


def test_an_isr_read_before_a_damaged_member_left_cannot_bring_it_back() -> None:
    """The leader's ISR may be older than etcd's: adding a member needs that member's fetch (`joined`)."""
    after_damage = CoordinatorAssignment((0, 1, 2), 1, 5, 10, (1, 2), ((1, "b.1"), (2, "c.1")))
    stale = isr_changed(after_damage, 1, (0, 1, 2))
    assert isinstance(stale, str) and "did not fetch to join" in stale
    rejoined = isr_changed(after_damage, 1, (0, 1, 2), {0: "a.1"})
    assert isinstance(rejoined, CoordinatorAssignment) and rejoined.isr == (0, 1, 2)


def test_damaged_files_are_set_aside_whole_and_only_the_newest_folders_are_kept(tmp_path: Path) -> None:
    directory = tmp_path / "coordinator-0"
    for round_ms in (1000, 2000, 3000, 4000):
        (directory / "log").mkdir(parents=True)
        (directory / "log" / "00000000000000000000.log").write_bytes(b"frames")
        (directory / "snapshots").mkdir()
        (directory / "state.sqlite").write_bytes(b"pages")
        (directory / "leader-epoch-checkpoint").write_text("0 0")
        (directory / "lock").touch()
        folder = set_aside(directory, round_ms, keep=3)
        assert folder.name == f"damaged-{round_ms}"
        assert sorted(p.name for p in directory.iterdir() if not p.name.startswith("damaged-")) == ["lock"]
        assert (folder / "log" / "00000000000000000000.log").read_bytes() == b"frames"
        assert (folder / "state.sqlite").read_bytes() == b"pages"
    assert [p.name for p in damaged_folders(directory)] == ["damaged-2000", "damaged-3000", "damaged-4000"]
    (directory / "state.sqlite").write_bytes(b"again")
    assert set_aside(directory, 4000, keep=3).name == "damaged-4000-1"  # the same millisecond: a new folder


def test_only_damage_a_replica_cures_is_repaired_from_one() -> None:
    assert repairable_from_replica(LoadFailed("no snapshot verifies and the log starts at 40"))
    assert not repairable_from_replica(NotThisClustersLog("the data directory is not this cluster's"))
    assert not repairable_from_replica(OSError("disk full"))
    assert where_damaged(LoadFailed("state.sqlite: the page at offset 4096 fails its checksum")).endswith("checksum")


def test_a_read_of_the_newest_segment_damaged_since_it_was_opened_raises_instead_of_ending_early(
    tmp_path: Path,
) -> None:
    """A leader reads its log for a follower's fetch: a frame of the newest segment that stopped verifying after
    the log was opened is damage, not the end of the log (a follower fetching there would never catch up)."""
    metadata_log = MetadataLog(tmp_path / "log", 1 << 20)
    try:
        for offset in range(6):
            payload = records.encode_batch([records.leader_change(1, 0)])
            metadata_log.append(encode_frame(offset, 1, 1, payload), offset + 1, 1)
        assert [f.base_offset for f in metadata_log.read(0)] == list(range(6))
        segment = next((tmp_path / "log").iterdir())
        data = bytearray(segment.read_bytes())
        data[len(data) // 3] ^= 0x10
        segment.write_bytes(bytes(data))
        with pytest.raises(CorruptLogError) as raised:
            list(metadata_log.read(0))
        assert raised.value.damage is not None and raised.value.damage.segment_path == segment.absolute()
    finally:
        metadata_log.close()
