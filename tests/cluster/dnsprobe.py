"""Ask one DNS server for one A record, with no resolver library.

    python3 dnsprobe.py SERVER NAME [--expect nxdomain]

Exits 0 when the answer is as expected (by default: at least one address),
else 1. up.sh uses it to wait for CoreDNS; it needs no dig or nslookup.
"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import sys

RCODES = {0: "NOERROR", 2: "SERVFAIL", 3: "NXDOMAIN", 5: "REFUSED"}


def query(server: str, name: str, timeout: float = 2.0) -> tuple[str, int]:
    """Return (rcode name, number of answers) of an A query for name."""
    qid = random.randrange(1 << 16)
    header = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    packet = header + qname + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(packet, (server, 53))
        while True:
            data, _ = s.recvfrom(4096)
            rid, flags, _, ancount = struct.unpack(">HHHH", data[:8])
            if rid == qid:
                rcode = flags & 0xF
                return RCODES.get(rcode, str(rcode)), ancount


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("server")
    parser.add_argument("name")
    parser.add_argument("--expect", choices=["address", "nxdomain"], default="address")
    args = parser.parse_args()
    try:
        rcode, answers = query(args.server, args.name)
    except OSError as e:
        print(f"{args.name}: {e}", file=sys.stderr)
        return 1
    print(f"{args.name}: {rcode}, {answers} answer(s)")
    if args.expect == "nxdomain":
        return 0 if rcode == "NXDOMAIN" else 1
    return 0 if rcode == "NOERROR" and answers > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
