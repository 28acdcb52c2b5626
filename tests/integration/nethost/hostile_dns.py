"""A hostile nameserver for the proxy's resolver: every UDP answer is
truncated (TC), so the resolver retries over TCP, where the answer is just
over 4 KiB, padded with a TXT record so that the address record's data
sits past byte 4096 (the size of a typical answer buffer). The address
itself is 10.255.0.9 (A) or fd00::9 (AAAA): a resolver that reads its
answer right reports exactly that, and the proxy refuses it as private.

Usage: hostile_dns.py PORT   (127.0.0.1, UDP and TCP; prints "ready")
"""
import socket
import struct
import sys
import threading

PORT = int(sys.argv[1])


def answer(q, truncated):
    qid, question = q[:2], q[12:]
    qtype = struct.unpack(">H", question[-4:-2])[0]
    if truncated:
        return qid + struct.pack(">HHHHH", 0x8380, 1, 0, 0, 0) + question
    rdata = socket.inet_pton(socket.AF_INET6, "fd00::9") if qtype == 28 else socket.inet_aton("10.255.0.9")
    body = qid + struct.pack(">HHHHH", 0x8180, 1, 2, 0, 0) + question
    pad = 4096 - 12 - len(body) - 12                    # the address starts at byte 4096
    body += b"\xc0\x0c" + struct.pack(">HHIH", 16, 1, 60, pad) + bytes([min(pad - 1, 255)]) + b"A" * (pad - 1)
    body += b"\xc0\x0c" + struct.pack(">HHIH", qtype if qtype in (1, 28) else 1, 1, 60, len(rdata)) + rdata
    return body


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", PORT))
    while True:
        q, peer = s.recvfrom(4096)
        s.sendto(answer(q, True), peer)


def tcp(ready):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", PORT))
    s.listen()
    ready.set()
    while True:
        c, _ = s.accept()
        try:
            while True:
                head = c.recv(2)
                if len(head) < 2:
                    break
                n, q = struct.unpack(">H", head)[0], b""
                while len(q) < n:
                    q += c.recv(n - len(q))
                r = answer(q, False)
                c.sendall(struct.pack(">H", len(r)) + r)
        except OSError:
            pass
        c.close()


ready = threading.Event()
threading.Thread(target=udp, daemon=True).start()
threading.Thread(target=tcp, args=(ready,), daemon=True).start()
ready.wait()
print("ready", flush=True)
threading.Event().wait()
