"""A slow, reordering link where the kernel has no ``netem``: packets that an nftables rule sends to an
NFQUEUE are held for a random delay each (so later ones overtake earlier ones) and then accepted.

``python -m tests.fleet.delayer QUEUE MEAN_MS`` inside the namespace whose rules queue to ``QUEUE``.
Loss is not done here (an nftables ``numgen random`` rule drops); the rules queue with ``bypass``, so
packets flow unhindered whenever no delayer listens. The NFQUEUE protocol (linux/netfilter/
nfnetlink_queue.h) spoken over a raw netlink socket: bind a queue, copy metadata only, give verdicts.
"""

from __future__ import annotations

import heapq
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = 0, 1, 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
CFG_CMD, CFG_PARAMS = 1, 2
CMD_BIND = 1
COPY_META = 1
PACKET_HDR, VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLMSG_ERROR = 2


def _attr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _message(msg: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, 0, 0) + body


def _packet_ids(data: bytes) -> list[int]:
    """The packet ids of every NFQUEUE packet message in one netlink datagram."""
    ids, at = [], 0
    while at + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, at)
        if length < 16:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | MSG_PACKET:
            pos = at + 20
            while pos + 4 <= at + length:
                alen, atype = struct.unpack_from("=HH", data, pos)
                if alen < 4:
                    break
                if atype & 0x7FFF == PACKET_HDR:
                    ids.append(struct.unpack_from(">I", data, pos + 4)[0])
                pos += (alen + 3) & ~3
        elif kind == NLMSG_ERROR and struct.unpack_from("=i", data, at + 16)[0] != 0:
            raise OSError(-struct.unpack_from("=i", data, at + 16)[0], "NFQUEUE refused a request")
        at += (length + 3) & ~3
    return ids


def run(queue: int, mean_ms: float, *, limit_s: float = 3600.0) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.send(
        _message(
            MSG_CONFIG, queue, _attr(CFG_CMD, struct.pack("=BBH", CMD_BIND, 0, 0)), NLM_F_REQUEST | NLM_F_ACK
        )
    )
    _packet_ids(sock.recv(65536))
    params = struct.pack(">IB", 0, COPY_META)
    sock.send(_message(MSG_CONFIG, queue, _attr(CFG_PARAMS, params), NLM_F_REQUEST | NLM_F_ACK))
    _packet_ids(sock.recv(65536))
    print("delayer ready", flush=True)
    held: list[tuple[float, int]] = []
    rng = random.Random()
    ends = time.monotonic() + limit_s  # bounded: a forgotten delayer ends by itself
    while time.monotonic() < ends:
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, pid = heapq.heappop(held)
            verdict = _attr(VERDICT_HDR, struct.pack(">II", NF_ACCEPT, pid))
            sock.send(_message(MSG_VERDICT, queue, verdict))
        wait = max(0.0, held[0][0] - now) if held else 0.5
        ready, _, _ = select.select([sock], [], [], wait)
        if ready:
            for pid in _packet_ids(sock.recv(65536)):
                delay = rng.uniform(0.2, 1.8) * mean_ms / 1000
                heapq.heappush(held, (time.monotonic() + delay, pid))


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(int(sys.argv[1]), float(sys.argv[2]))


if __name__ == "__main__":
    main()
