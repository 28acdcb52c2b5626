#!/usr/bin/env python3
"""Seeds for the dns fuzz target (tests/fuzz/fuzz_dns.c): DNS answers as a
nameserver sends them, built by hand, written to tests/fuzz/corpus/dns/.

    python3 tests/fuzz/seeds/dns.py
"""
import struct
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "dns"
A, NS, CNAME, AAAA, IN = 1, 2, 5, 28, 1


def name(n):
    return b"".join(bytes([len(p)]) + p.encode() for p in n.split(".")) + b"\0"


def header(an, rcode=0, qd=1, ns=0, ar=0, ident=0x1234):
    return struct.pack(">HHHHHH", ident, 0x8180 | rcode, qd, an, ns, ar)


def question(n="example.com", qtype=A):
    return name(n) + struct.pack(">HH", qtype, IN)


def rr(owner, rtype, rdata, ttl=300):
    """OWNER: raw name bytes (b"\\xc0\\x0c" points at the question's name)."""
    return owner + struct.pack(">HHIH", rtype, IN, ttl, len(rdata)) + rdata


Q = b"\xc0\x0c"  # the question's name, at offset 12


def a(i):
    return bytes([93, 184, 216, i])


def aaaa(i):
    return bytes.fromhex("2606280001200000000000000000") + bytes([0, i])


def seeds():
    s = {}
    s["a-one.bin"] = header(1) + question() + rr(Q, A, a(34))
    s["aaaa-one.bin"] = header(1) + question(qtype=AAAA) + rr(Q, AAAA, aaaa(1))
    s["a-and-aaaa-mixed.bin"] = header(3) + question() + rr(Q, A, a(1)) + rr(Q, AAAA, aaaa(2)) + rr(Q, A, a(3))
    # www.example.com CNAME example.com (compressed: "www" + pointer), then
    # two A records owned by the CNAME's target
    q = question("www.example.com")
    target_off = 12 + len(q) + 2 + 10  # the CNAME's rdata
    s["cname-then-a.bin"] = (header(3) + q + rr(Q, CNAME, b"\x03cdn" + b"\xc0\x10") +
                             rr(struct.pack(">H", 0xc000 | target_off), A, a(5)) +
                             rr(struct.pack(">H", 0xc000 | target_off), A, a(6)))
    s["cname-only.bin"] = header(1) + question("www.example.com") + rr(Q, CNAME, name("example.org"))
    # 17 addresses: one more than a result holds
    s["a-17.bin"] = header(17) + question() + b"".join(rr(Q, A, a(i)) for i in range(17))
    s["aaaa-17.bin"] = header(17) + question(qtype=AAAA) + b"".join(rr(Q, AAAA, aaaa(i)) for i in range(17))
    # cut inside the second record: the first address stays, -EBADMSG
    full = header(2) + question() + rr(Q, A, a(7)) + rr(Q, A, a(8))
    s["truncated.bin"] = full[:-3]
    # the header says three answers, the message holds one
    s["ancount-lies.bin"] = header(3) + question() + rr(Q, A, a(9))
    # an answer's name a pointer to itself, and one to a pointer to it
    q = question()
    self_off = 12 + len(q)
    s["pointer-loop.bin"] = header(1) + q + rr(struct.pack(">H", 0xc000 | self_off), A, a(10))
    s["pointer-pair.bin"] = (header(2) + q + rr(Q, A, a(11)) +
                             rr(struct.pack(">H", 0xc000 | (self_off + 16)), A, a(12)))
    s["pointer-past-end.bin"] = header(1) + q + rr(b"\xc3\xff", A, a(13))
    s["a-bad-rdlen.bin"] = header(2) + question() + rr(Q, A, a(14) + b"\0") + rr(Q, A, a(15))
    s["nxdomain.bin"] = header(0, rcode=3) + question("nope.example.com") + \
        rr(name("example.com"), 6, name("ns.example.com") + name("h.example.com") + struct.pack(">IIIII", 1, 2, 3, 4, 5))
    s["authority-glue.bin"] = (struct.pack(">HHHHHH", 1, 0x8180, 1, 1, 1, 1) + question() + rr(Q, A, a(16)) +
                               rr(Q, NS, name("ns1.example.com")) + rr(name("ns1.example.com"), A, a(17)))
    s["short-header.bin"] = b"\x12\x34\x81\x80\x00"
    s["no-question.bin"] = header(1, qd=0) + rr(name("example.com"), A, a(18))
    return s


def main():
    CORPUS.mkdir(parents=True, exist_ok=True)
    for n, data in seeds().items():
        (CORPUS / n).write_bytes(data)
    print(f"{len(seeds())} files in {CORPUS}")


if __name__ == "__main__":
    main()
