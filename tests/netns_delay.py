"""Delay on a link without `tc netem` (this kernel has no sch_netem): run inside a network namespace as
`python -m tests.netns_delay QUEUE DELAY_MS`, it binds NFQUEUE `QUEUE` over nfnetlink and accepts each queued packet
DELAY_MS after it was queued, in order (one delay for every packet, as netem's `delay` without jitter). Packets
queue while it runs; it prints `bound` once the queue is bound, so the iptables rule may send packets to it.

The queue is set fail-open: a packet that finds the queue full goes at once rather than being dropped (the harness
asks for loss separately, with iptables' `statistic` match). Speaks the protocol directly (linux/netfilter/
nfnetlink_queue.h), needing no library.
"""

from __future__ import annotations

import collections
import select
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
QUEUE_MAXLEN = 16384
RECEIVE_BUFFER = 8 * 1024 * 1024


def attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def message(kind: int, family: int, queue: int, attributes: bytes, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BB", family, 0) + struct.pack("!H", queue) + attributes
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, 0, 0) + body


def packet_ids(data: bytes) -> list[int]:
    """The ids of the packets in one read of the socket (several netlink messages may come at once)."""
    ids, at = [], 0
    while at + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, at)
        if length < 16:
            break
        if kind == NLMSG_ERROR:
            error = struct.unpack_from("=i", data, at + 16)[0]
            if error != 0:
                raise OSError(-error, "nfnetlink refused a request")
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            position = at + 20  # past the netlink header and the nfgenmsg
            while position + 4 <= at + length:
                attribute_length, attribute_kind = struct.unpack_from("=HH", data, position)
                if attribute_length < 4:
                    break
                if attribute_kind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, position + 4)[0])
                position += (attribute_length + 3) & ~3
        at += (length + 3) & ~3
    return ids


def main(queue: int, delay_ms: int) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.bind((0, 0))
    bind = attribute(NFQA_CFG_CMD, struct.pack("=BB", NFQNL_CFG_CMD_BIND, 0) + struct.pack("!H", socket.AF_INET))
    sock.send(message(NFQNL_MSG_CONFIG, socket.AF_UNSPEC, queue, bind, NLM_F_REQUEST | NLM_F_ACK))
    packet_ids(sock.recv(65536))  # raises if the kernel refused the bind
    settings = (
        attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
        + attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))
        + attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN))
        + attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN))
    )
    sock.send(message(NFQNL_MSG_CONFIG, socket.AF_UNSPEC, queue, settings, NLM_F_REQUEST | NLM_F_ACK))
    packet_ids(sock.recv(65536))
    print("bound", flush=True)
    held: collections.deque[tuple[float, int]] = collections.deque()  # (when to accept, packet id), in order
    delay_s = delay_ms / 1000
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([sock], [], [], timeout)
        if readable:
            now = time.monotonic()
            held.extend((now + delay_s, packet_id) for packet_id in packet_ids(sock.recv(RECEIVE_BUFFER)))
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, packet_id = held.popleft()
            verdict = attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))
            sock.send(message(NFQNL_MSG_VERDICT, socket.AF_UNSPEC, queue, verdict))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
