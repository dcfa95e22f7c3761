"""The network-partition harness's own checks (tests/netns_workload.py, tests/netns_delay.py), on made-up histories
and messages: each finds what it names and nothing else, so a scenario that passes has been checked."""

from __future__ import annotations

import struct

from tests.netns_delay import NFNL_SUBSYS_QUEUE, NFQA_PACKET_HDR, NFQNL_MSG_PACKET, attribute, packet_ids
from tests.netns_workload import Call, acknowledged_by, outcomes, overlapping_leaders


def _call(node: int, epoch: int, sent: float, answered: float, outcome: str = "NONE", coordinator: int = 0) -> Call:
    return Call(100, 0, 0, coordinator, sent, answered, outcome, 0, node, epoch)


def test_leaderships_that_follow_one_another_do_not_overlap() -> None:
    calls = [_call(1, 1, 0.0, 0.1), _call(1, 1, 0.2, 1.5), _call(2, 2, 1.0, 1.2), _call(2, 2, 1.3, 1.4)]
    assert overlapping_leaders(calls) == []  # the old leader's last call began before the new one's first answer


def test_an_old_leader_acknowledging_a_call_begun_after_the_new_leaders_first_answer_is_found() -> None:
    calls = [_call(1, 1, 0.0, 0.1), _call(2, 2, 1.0, 1.2), _call(1, 1, 1.3, 1.4)]
    found = overlapping_leaders(calls)
    assert len(found) == 1 and "node 1 (epoch 1)" in found[0] and "node 2 (epoch 2)" in found[0]


def test_overlap_is_judged_per_coordinator_and_on_acknowledgements_only() -> None:
    calls = [
        _call(2, 2, 1.0, 1.2, coordinator=1),  # another coordinator's newer epoch
        _call(2, 3, 1.0, 1.2, outcome="NOT_COORDINATOR"),  # refused: acknowledged nothing
        _call(1, 1, 1.3, 1.4),
    ]
    assert overlapping_leaders(calls) == []


def test_acknowledged_by_keeps_the_nodes_acknowledgements_inside_the_window() -> None:
    calls = [
        _call(1, 1, 0.5, 0.6),  # sent before the window
        _call(1, 1, 1.5, 1.6),  # inside
        _call(1, 1, 1.7, 2.5),  # answered after it
        _call(2, 1, 1.5, 1.6),  # another node
        _call(1, 1, 1.5, 1.6, outcome="NOT_ENOUGH_REPLICAS"),
    ]
    assert acknowledged_by(calls, 1, 1.0, 2.0) == [calls[1]]
    assert outcomes(calls) == {"NONE": 4, "NOT_ENOUGH_REPLICAS": 1}


def _packet_message(packet_id: int) -> bytes:
    header = struct.pack("!IHB", packet_id, 0x0800, 3) + b"\0"
    body = struct.pack("=BBH", 2, 0, 0) + attribute(5, b"\0" * 6) + attribute(NFQA_PACKET_HDR, header)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET, 0, 0, 0) + body


def test_the_delay_process_reads_every_packet_id_of_one_read() -> None:
    assert packet_ids(_packet_message(7) + _packet_message(8)) == [7, 8]
    assert len(attribute(1, b"\1\2\3\4\5")) == 12  # 4 + 5, padded to 4 bytes
